//! PRMP message streams from C: a sender announces a stream and admits the
//! config's receivers, then sends messages; receivers read them in order.

use crate::{
    FfiError, FfiResult, RmcastBuffer, RmcastConfig, RmcastReport, RmcastStatus, clear_out, entry,
    guard, hand_out, handle_mut,
};
use rmcast::stream::{Admission, StreamReceiver, StreamRecvConfig, StreamSendConfig, StreamSender};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a stream sender announces itself when the config sets no timeout.
const ANNOUNCE_DEFAULT: Duration = Duration::from_secs(30);

/// The sending end of a stream: opened by `rmcast_stream_sender_open`,
/// ended by `rmcast_stream_sender_close` (or dropped by
/// `rmcast_stream_sender_free`). Use it from one thread at a time.
pub struct RmcastStreamSender {
    inner: Option<StreamSender>,
    wanted: usize,
    cancel: Option<Arc<AtomicBool>>,
}

/// The receiving end of a stream: opened by `rmcast_stream_receiver_open`,
/// ended by `rmcast_stream_receiver_close` (or dropped by
/// `rmcast_stream_receiver_free`). Use it from one thread at a time.
pub struct RmcastStreamReceiver {
    inner: Option<StreamReceiver>,
}

fn closed() -> FfiError {
    FfiError::invalid("the stream handle was already closed")
}

/// Opens a stream on the config's group: announces it and admits up to
/// `rmcast_config_set_receivers` receivers, for at most the config's
/// timeout (30 s by default). Returns at once; call
/// `rmcast_stream_sender_wait` to wait for the receivers before sending
/// (messages sent earlier wait in the send buffer). `*out` gets the handle
/// (NULL on failure). Messages are at most 64 KiB each.
///
/// # Safety
/// `cfg` is NULL or a live config; `out` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_stream_sender_open(
    cfg: *const RmcastConfig,
    out: *mut *mut RmcastStreamSender,
) -> RmcastStatus {
    entry(|| {
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        // SAFETY: `out` is non-NULL and writable (contract).
        unsafe { clear_out(out) };
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { crate::handle(cfg, "cfg") }?;
        let wanted = usize::from(cfg.receivers);
        let mut send = StreamSendConfig {
            group: cfg.group,
            iface: cfg.iface,
            wanted: Some(wanted),
            group_key: cfg.session_key("rmcast_stream_sender_open")?,
            ..StreamSendConfig::default()
        };
        send.proto.admission = Admission::Announce {
            duration: cfg.timeout.unwrap_or(ANNOUNCE_DEFAULT),
            interval: Duration::from_millis(100),
            receivers_max: cfg.receivers,
        };
        send.proto.group_key = send.group_key.clone();
        let sender = StreamSender::open(send)?;
        // SAFETY: `out` is non-NULL and writable (contract).
        unsafe {
            hand_out(
                out,
                RmcastStreamSender {
                    inner: Some(sender),
                    wanted,
                    cancel: cfg.cancel.clone(),
                },
            )
        };
        Ok(())
    })
}

/// Blocks until admission is over (every wanted receiver joined, or the
/// announcement's time ran out); `*established` (if not NULL) gets how many
/// joined. `RMCAST_STATUS_INCOMPLETE` when fewer than the config's
/// receivers joined (the stream still works with those that did), and
/// `RMCAST_STATUS_CANCELLED` if the config's cancel token was raised.
///
/// # Safety
/// `s` is NULL or a live stream sender; `established` is NULL or valid for
/// one `size_t` write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_stream_sender_wait(
    s: *mut RmcastStreamSender,
    established: *mut usize,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let s = unsafe { handle_mut(s, "sender") }?;
        let sender = s.inner.as_ref().ok_or_else(closed)?;
        let joined = loop {
            if s.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(FfiError::new(RmcastStatus::Cancelled, "cancelled"));
            }
            if let Some(n) = sender.wait_established(Some(Duration::from_millis(100)))? {
                break n;
            }
        };
        if !established.is_null() {
            // SAFETY: non-NULL and writable (contract).
            unsafe { *established = joined };
        }
        if joined < s.wanted {
            return Err(FfiError::new(
                RmcastStatus::Incomplete,
                format!("only {joined} of {} receivers joined the stream", s.wanted),
            ));
        }
        Ok(())
    })
}

/// Sends one message of `len` bytes (at most 64 KiB), blocking while the
/// send buffer is full. Never drops: OK means every receiver that stays in
/// the session will read it. Fails when every receiver is gone.
///
/// # Safety
/// `s` is NULL or a live stream sender; `data` is valid for `len` bytes of
/// reading (NULL allowed when `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_stream_send(
    s: *mut RmcastStreamSender,
    data: *const u8,
    len: usize,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let s = unsafe { handle_mut(s, "sender") }?;
        let sender = s.inner.as_mut().ok_or_else(closed)?;
        let msg: &[u8] = if len == 0 {
            &[]
        } else if data.is_null() {
            return Err(FfiError::invalid(format!("data is NULL but len is {len}")));
        } else {
            // SAFETY: non-NULL and valid for `len` bytes (contract).
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        sender.send(msg)?;
        Ok(())
    })
}

/// Ends the stream, blocks until every remaining receiver confirmed it
/// holds every message (or none is left), and frees the handle (whatever
/// the result: do not use `s` again). `*report` (if not NULL) gets the
/// report (free it with `rmcast_report_free`), NULL if the stream failed
/// locally. `RMCAST_STATUS_INCOMPLETE` when some receiver did not confirm
/// everything (the report names it and says why).
///
/// # Safety
/// `s` is NULL or a live stream sender, not used after this call;
/// `report` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_stream_sender_close(
    s: *mut RmcastStreamSender,
    report: *mut *mut RmcastReport,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { clear_out(report) };
        if s.is_null() {
            return Err(FfiError::invalid("sender is NULL"));
        }
        // SAFETY: a live handle from rmcast_stream_sender_open, given up by
        // the caller.
        let mut s = unsafe { Box::from_raw(s) };
        let sender = s.inner.take().ok_or_else(closed)?;
        let r = RmcastReport::from_stream_send(&sender.close()?);
        let result = if r.ok {
            Ok(())
        } else {
            Err(FfiError::new(RmcastStatus::Incomplete, r.summary()))
        };
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { hand_out(report, r) };
        result
    })
}

/// Frees a stream sender without closing the stream properly (receivers
/// will see it end without a close). NULL: nothing. Use it on error paths;
/// `rmcast_stream_sender_close` already frees.
///
/// # Safety
/// `s` is NULL or a live stream sender, not used after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_stream_sender_free(s: *mut RmcastStreamSender) {
    guard((), || {
        if !s.is_null() {
            // SAFETY: a live handle from rmcast_stream_sender_open, given up.
            drop(unsafe { Box::from_raw(s) });
        }
    });
}

/// Joins the config's group and waits, in the background, for a stream to
/// be announced; returns at once with the handle in `*out` (NULL on
/// failure). `rmcast_stream_read` then blocks for the messages. The
/// config's timeout bounds the wait for admission (default: forever).
///
/// # Safety
/// `cfg` is NULL or a live config; `out` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_stream_receiver_open(
    cfg: *const RmcastConfig,
    out: *mut *mut RmcastStreamReceiver,
) -> RmcastStatus {
    entry(|| {
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        // SAFETY: `out` is non-NULL and writable (contract).
        unsafe { clear_out(out) };
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { crate::handle(cfg, "cfg") }?;
        let mut recv = StreamRecvConfig {
            group: cfg.group,
            iface: cfg.iface,
            connect_timeout: cfg.timeout,
            group_key: cfg.session_key("rmcast_stream_receiver_open")?,
            ..StreamRecvConfig::default()
        };
        recv.proto.group_key = recv.group_key.clone();
        if let Some(name) = &cfg.name {
            recv.proto.name = name.clone();
        }
        let receiver = StreamReceiver::open(recv)?;
        // SAFETY: `out` is non-NULL and writable (contract).
        unsafe {
            hand_out(
                out,
                RmcastStreamReceiver {
                    inner: Some(receiver),
                },
            )
        };
        Ok(())
    })
}

/// Blocks until the next whole message is there and hands it out in `*msg`
/// (free it with `rmcast_buffer_free`). `RMCAST_STATUS_END_OF_STREAM` (and
/// `{NULL, 0}`) once the sender closed the stream and every message was
/// read; `RMCAST_STATUS_FAILED` when the session failed for this receiver
/// (removed, sender silent, not admitted within the timeout).
///
/// # Safety
/// `r` is NULL or a live stream receiver; `msg` is NULL or valid for
/// writing one `RmcastBuffer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_stream_read(
    r: *mut RmcastStreamReceiver,
    msg: *mut RmcastBuffer,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: the caller promises NULL or a writable buffer.
        let msg = unsafe { msg.as_mut() }.ok_or_else(|| FfiError::invalid("msg is NULL"))?;
        msg.data = std::ptr::null_mut();
        msg.len = 0;
        // SAFETY: forwarded from this function's contract.
        let r = unsafe { handle_mut(r, "receiver") }?;
        let receiver = r.inner.as_mut().ok_or_else(closed)?;
        match receiver.read()? {
            Some(bytes) => {
                *msg = RmcastBuffer::from_vec(bytes);
                Ok(())
            }
            None => Err(FfiError::new(
                RmcastStatus::EndOfStream,
                "the stream is over: the sender closed it and every message was read",
            )),
        }
    })
}

/// Ends this receiver's part (leaves the session if the stream is not
/// over, else stays briefly to confirm the close), frees the handle
/// (whatever the result), and reports in `*report` (if not NULL; free it
/// with `rmcast_report_free`). OK when the stream was complete: closed by
/// the sender and every message read; else `RMCAST_STATUS_INCOMPLETE`.
///
/// # Safety
/// `r` is NULL or a live stream receiver, not used after this call;
/// `report` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_stream_receiver_close(
    r: *mut RmcastStreamReceiver,
    report: *mut *mut RmcastReport,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { clear_out(report) };
        if r.is_null() {
            return Err(FfiError::invalid("receiver is NULL"));
        }
        // SAFETY: a live handle from rmcast_stream_receiver_open, given up.
        let mut r = unsafe { Box::from_raw(r) };
        let receiver = r.inner.take().ok_or_else(closed)?;
        let rep = RmcastReport::from_stream_recv(&receiver.finish());
        let result: FfiResult = if rep.ok {
            Ok(())
        } else {
            Err(FfiError::new(RmcastStatus::Incomplete, {
                let why = rep.summary();
                format!("the stream ended incomplete: {why}")
            }))
        };
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { hand_out(report, rep) };
        result
    })
}

/// Frees a stream receiver (leaving the session if it is not over). NULL:
/// nothing. `rmcast_stream_receiver_close` already frees.
///
/// # Safety
/// `r` is NULL or a live stream receiver, not used after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_stream_receiver_free(r: *mut RmcastStreamReceiver) {
    guard((), || {
        if !r.is_null() {
            // SAFETY: a live handle from rmcast_stream_receiver_open, given up.
            drop(unsafe { Box::from_raw(r) });
        }
    });
}
