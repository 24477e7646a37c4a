//! The async (tokio) face of the message stream (cargo feature `tokio`).
//!
//! The blocking endpoints already run their protocol on a driver thread of
//! their own; these wrappers move an endpoint onto tokio's blocking pool for
//! each call that may wait, so an async task never blocks its executor:
//! [`AsyncStreamSender::send`] resolves once the message is in the send
//! buffer (waiting, like [`StreamSender::send`], while the buffer is full —
//! nothing is ever dropped), [`AsyncStreamReceiver::read_into`] once the next
//! whole message is there. A call that is cancelled (its future dropped)
//! leaves the endpoint with the blocking pool until that call completes, and
//! the next call then fails with [`Error::Failed`] naming the cancelled one;
//! an endpoint is meant to be driven by one task, call after call.

use super::{
    SenderEvent, StreamReceiver, StreamRecvConfig, StreamRecvReport, StreamSendConfig,
    StreamSendReport, StreamSender,
};
use crate::Error;
use std::time::Duration;

/// Runs `f` on tokio's blocking pool and returns its result.
async fn blocking<T, F>(f: F) -> Result<T, Error>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Failed(format!("the stream call did not complete: {e}")))
}

fn gone(what: &str) -> Error {
    Error::Failed(format!(
        "the endpoint is still busy with an earlier {what} whose future was dropped"
    ))
}

/// [`StreamSender`] for async code.
pub struct AsyncStreamSender {
    inner: Option<StreamSender>,
}

impl AsyncStreamSender {
    /// Opens a session (see [`StreamSender::open`]).
    pub async fn open(cfg: StreamSendConfig) -> Result<Self, Error> {
        let inner = blocking(move || StreamSender::open(cfg)).await??;
        Ok(Self { inner: Some(inner) })
    }

    /// Waits until admission is over (see [`StreamSender::wait_established`]):
    /// the number of receivers admitted, or `None` on timeout.
    pub async fn wait_established(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Option<usize>, Error> {
        let s = self.inner.take().ok_or_else(|| gone("call"))?;
        let (s, r) = blocking(move || {
            let r = s.wait_established(timeout);
            (s, r)
        })
        .await?;
        self.inner = Some(s);
        r
    }

    /// Queues one message; waits while the send buffer is full.
    pub async fn send(&mut self, msg: Vec<u8>) -> Result<(), Error> {
        let mut s = self.inner.take().ok_or_else(|| gone("send"))?;
        let (s, r) = blocking(move || {
            let r = s.send(&msg);
            (s, r)
        })
        .await?;
        self.inner = Some(s);
        r
    }

    /// The events so far (joins, suspicions, removals, leaves), without waiting.
    pub fn events(&self) -> Vec<SenderEvent> {
        self.inner
            .as_ref()
            .map(|s| s.events().collect())
            .unwrap_or_default()
    }

    /// Closes the stream once every remaining receiver holds everything
    /// (see [`StreamSender::close`]).
    pub async fn close(mut self) -> Result<StreamSendReport, Error> {
        let s = self.inner.take().ok_or_else(|| gone("call"))?;
        blocking(move || s.close()).await?
    }
}

/// [`StreamReceiver`] for async code.
pub struct AsyncStreamReceiver {
    inner: Option<StreamReceiver>,
    /// A buffer that travels with the receiver to the blocking pool, so a
    /// read costs no allocation once it has grown to the largest message.
    buf: Vec<u8>,
}

impl AsyncStreamReceiver {
    /// Joins the group (see [`StreamReceiver::open`]).
    pub async fn open(cfg: StreamRecvConfig) -> Result<Self, Error> {
        let inner = blocking(move || StreamReceiver::open(cfg)).await??;
        Ok(Self {
            inner: Some(inner),
            buf: Vec::new(),
        })
    }

    /// Appends the next whole message to `out` and returns its length, or
    /// `None` at the end of the stream (see [`StreamReceiver::read_into`]).
    pub async fn read_into(&mut self, out: &mut Vec<u8>) -> Result<Option<usize>, Error> {
        let mut r = self.inner.take().ok_or_else(|| gone("read"))?;
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let (r, buf, got) = blocking(move || {
            let got = r.read_into(&mut buf);
            (r, buf, got)
        })
        .await?;
        self.inner = Some(r);
        if let Ok(Some(_)) = got {
            out.extend_from_slice(&buf);
        }
        self.buf = buf;
        got
    }

    /// The next whole message, or `None` at the end of the stream.
    pub async fn read(&mut self) -> Result<Option<Vec<u8>>, Error> {
        let mut out = Vec::new();
        Ok(self.read_into(&mut out).await?.map(|_| out))
    }

    /// Ends this receiver's part (see [`StreamReceiver::finish`]).
    pub async fn finish(mut self) -> Result<StreamRecvReport, Error> {
        let r = self.inner.take().ok_or_else(|| gone("read"))?;
        blocking(move || r.finish()).await
    }
}
