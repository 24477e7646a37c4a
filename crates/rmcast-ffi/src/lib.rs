//! The C library of rmcast (`librmcast_ffi.so` / `librmcast_ffi.a`, header
//! `include/rmcast.h`): send and receive one object (a file or a buffer),
//! and PRMP message streams, from C.
//!
//! Conventions (the header repeats them for C readers):
//!
//! - Every function that can fail returns an [`RmcastStatus`]; on anything
//!   but `RMCAST_STATUS_OK` a message for a human is in
//!   [`rmcast_last_error`] (thread-local, like `errno`/`dlerror`).
//! - No panic crosses the boundary: every entry point runs under
//!   `catch_unwind`, and a panic becomes `RMCAST_STATUS_PANIC`.
//! - Handles are opaque and freed by their own `*_free` function; strings
//!   the library hands out belong to the handle they came from; received
//!   bytes are an [`RmcastBuffer`] freed with [`rmcast_buffer_free`].

#![warn(missing_docs)]
// Every unsafe block says why it is sound (`// SAFETY:`).
#![warn(clippy::undocumented_unsafe_blocks)]

mod report;
mod stream;

pub use report::*;
pub use stream::*;

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_void};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What a call returned. Zero is success; every other value comes with a
/// message in `rmcast_last_error()`. New codes may be added at the end.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmcastStatus {
    /// Success.
    Ok = 0,
    /// A wrong argument: a NULL pointer, a string that is not UTF-8, a
    /// group that is not `a.b.c.d:port` in 224.0.0.0/4, zero receivers, a
    /// setting out of range.
    InvalidArgument = 1,
    /// No usable group key: none given and not insecure, or the key file is
    /// missing or not a key file.
    Key = 2,
    /// A system call failed (sockets, files); the message says which.
    Io = 3,
    /// This receiver refused the offered object (unsafe name, too large, no space).
    Refused = 4,
    /// The transfer or stream failed (sender silent, removed, aborted).
    Failed = 5,
    /// The session ran, but not every receiver got everything: the report
    /// (still handed out) says who failed and why.
    Incomplete = 6,
    /// The cancel token was raised.
    Cancelled = 7,
    /// `rmcast_stream_read`: the stream is over; no message was returned.
    EndOfStream = 8,
    /// A bug: a panic inside the library was caught at the boundary.
    Panic = 9,
}

/// A failed call: the code and the message `rmcast_last_error` will show.
#[derive(Debug)]
pub(crate) struct FfiError {
    pub(crate) status: RmcastStatus,
    pub(crate) message: String,
}

impl FfiError {
    pub(crate) fn new(status: RmcastStatus, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(RmcastStatus::InvalidArgument, message)
    }
}

impl From<rmcast::Error> for FfiError {
    fn from(e: rmcast::Error) -> Self {
        let status = match &e {
            rmcast::Error::Io { .. } => RmcastStatus::Io,
            rmcast::Error::Config(_) | rmcast::Error::Invalid(_) => RmcastStatus::InvalidArgument,
            rmcast::Error::Refused(_) => RmcastStatus::Refused,
            rmcast::Error::Cancelled => RmcastStatus::Cancelled,
            _ => RmcastStatus::Failed,
        };
        Self::new(status, e.to_string())
    }
}

pub(crate) type FfiResult<T = ()> = Result<T, FfiError>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // try_with: a thread being torn down has no slot left; never panic here.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("internal error in librmcast (a panic was caught at the C boundary): {what}")
}

/// Runs an entry point that returns a status: catches panics, sets the
/// thread's last error (empty on success).
pub(crate) fn entry(f: impl FnOnce() -> FfiResult) -> RmcastStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_last_error("");
            RmcastStatus::Ok
        }
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status
        }
        Err(p) => {
            // Setting the message may not panic again: a CString of a
            // String with its NULs escaped cannot fail.
            set_last_error(&panic_message(&*p));
            RmcastStatus::Panic
        }
    }
}

/// Runs an entry point that returns a value rather than a status; a panic
/// gives `fallback` (and a last error).
pub(crate) fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            set_last_error(&panic_message(&*p));
            fallback
        }
    }
}

/// A C string argument as UTF-8; `what` names it in the message.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> FfiResult<&'a str> {
    if p.is_null() {
        return Err(FfiError::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, and the caller promises a NUL-terminated string.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|_| FfiError::invalid(format!("{what} is not UTF-8")))
}

/// A handle argument; `what` names it in the message.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` made by this library, not used
/// mutably elsewhere during `'a`.
pub(crate) unsafe fn handle<'a, T>(p: *const T, what: &str) -> FfiResult<&'a T> {
    // SAFETY: the caller promises NULL or a live handle.
    unsafe { p.as_ref() }.ok_or_else(|| FfiError::invalid(format!("{what} is NULL")))
}

/// A handle argument to change; `what` names it in the message.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` made by this library, used by
/// no one else during `'a`.
pub(crate) unsafe fn handle_mut<'a, T>(p: *mut T, what: &str) -> FfiResult<&'a mut T> {
    // SAFETY: the caller promises NULL or a live handle nobody else uses.
    unsafe { p.as_mut() }.ok_or_else(|| FfiError::invalid(format!("{what} is NULL")))
}

/// Moves `value` to the heap and hands it to C through `out`.
///
/// # Safety
/// `out` is NULL (the value is dropped) or valid for one pointer write.
pub(crate) unsafe fn hand_out<T>(out: *mut *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: the caller promises `out` is writable.
        unsafe { *out = Box::into_raw(Box::new(value)) };
    }
}

/// Settings of a send, a receive or a stream: made by `rmcast_config_new`,
/// changed by the `rmcast_config_set_*` functions, freed by
/// `rmcast_config_free`. Defaults: group 239.77.0.1:7700, interface
/// 127.0.0.1, TTL 1 (traffic stays on the machine), 1 receiver, no
/// timeout, no key and not insecure (a session then refuses to start);
/// a sender's protocol `"auto"` (chosen for the group that registers, as
/// `rmcast send` does), FEC as auto chooses, laggards waited for.
///
/// A config is read, never changed, by the calls that use it: several
/// threads may use one config at once as long as none of them changes it.
pub struct RmcastConfig {
    group: SocketAddrV4,
    iface: Ipv4Addr,
    receivers: u16,
    name: Option<String>,
    key: Option<Arc<rmcast::GroupKey>>,
    insecure: bool,
    timeout: Option<Duration>,
    cancel: Option<Arc<AtomicBool>>,
    max_bytes: Option<u64>,
    progress: Option<(ProgressFn, usize)>,
    /// `None`: auto.
    protocol: Option<rmcast::ProtocolId>,
    /// `None`: the protocol's (or auto's) choice; `Some(None)`: off.
    fec: Option<Option<rmcast::FecShape>>,
    laggard: rmcast::Laggard,
}

/// A progress callback: `done` bytes of `total` (0 until known), and the
/// phase in words (`"waiting for receivers"`, `"sending"`, `"receiving"`,
/// `"verifying"`, `"done"`, ...; valid during the call only), with the
/// `user` pointer given to `rmcast_config_set_progress`.
pub type RmcastProgressFn =
    Option<unsafe extern "C" fn(done: u64, total: u64, phase: *const c_char, user: *mut c_void)>;

type ProgressFn = unsafe extern "C" fn(u64, u64, *const c_char, *mut c_void);

impl Default for RmcastConfig {
    fn default() -> Self {
        Self {
            group: rmcast::DEFAULT_GROUP,
            iface: Ipv4Addr::LOCALHOST,
            receivers: 1,
            name: None,
            key: None,
            insecure: false,
            timeout: None,
            cancel: None,
            max_bytes: None,
            progress: None,
            protocol: None,
            fec: None,
            laggard: rmcast::Laggard::Wait,
        }
    }
}

impl RmcastConfig {
    /// The group key the session runs under, or `None` when insecure;
    /// refuses when neither was chosen (`call` names the function).
    pub(crate) fn session_key(&self, call: &str) -> FfiResult<Option<Arc<rmcast::GroupKey>>> {
        match (&self.key, self.insecure) {
            (Some(k), _) => Ok(Some(k.clone())),
            (None, true) => Ok(None),
            (None, false) => Err(FfiError::new(
                RmcastStatus::Key,
                format!(
                    "{call} needs a group key: make one with rmcast_keygen(path) (or `rmcast keygen > group.key`), \
                     copy it to every member, and pass it with rmcast_config_set_key_file(cfg, path); \
                     rmcast_config_set_insecure(cfg, 1) runs without one, unauthenticated and in the clear"
                ),
            )),
        }
    }

    /// Calls the config's progress callback, if any, with `p`.
    fn report_progress(&self, p: rmcast::Progress) {
        if let Some((f, user)) = self.progress {
            let phase = CString::new(p.phase).unwrap_or_default();
            // SAFETY: the caller of rmcast_config_set_progress promised a
            // function that may be called with these arguments during the
            // calls that use this config; `phase` outlives the call.
            unsafe {
                f(
                    p.done_bytes,
                    p.total_bytes,
                    phase.as_ptr(),
                    user as *mut c_void,
                )
            };
        }
    }

    fn send_config(&self, call: &str) -> FfiResult<rmcast::SendConfig> {
        let mut cfg = rmcast::SendConfig {
            group: self.group,
            iface: self.iface,
            cancel: self.cancel.clone(),
            name: self.name.clone(),
            ..rmcast::SendConfig::default()
        };
        let p = &mut cfg.proto;
        p.receivers = self.receivers;
        p.group_key = self.session_key(call)?;
        if let Some(t) = self.timeout {
            p.join_wait = t;
        }
        match self.protocol {
            Some(id) => p.protocol = id,
            // Chosen for the group that registers, keeping a FEC shape
            // the caller set (as `rmcast send --protocol auto`).
            None => {
                p.auto = Some(rmcast::AutoConfig {
                    keep_window: false,
                    keep_fec: self.fec.is_some(),
                    keep_poll_interval: false,
                });
            }
        }
        if let Some(f) = self.fec {
            p.fec = f;
        }
        p.laggard = self.laggard;
        p.validate()
            .map_err(|e| FfiError::invalid(format!("{call}: {e}")))?;
        Ok(cfg)
    }

    fn recv_config(&self, call: &str) -> FfiResult<rmcast::RecvConfig> {
        let mut cfg = rmcast::RecvConfig {
            group: self.group,
            iface: self.iface,
            listen_timeout: self.timeout,
            cancel: self.cancel.clone(),
            max_bytes: self.max_bytes,
            group_key: self.session_key(call)?,
            ..rmcast::RecvConfig::default()
        };
        if let Some(n) = &self.name {
            cfg.name = n.clone();
        }
        Ok(cfg)
    }
}

/// Parses `a.b.c.d:port`, a multicast address and a port other than 0.
fn parse_group(s: &str) -> FfiResult<SocketAddrV4> {
    let group: SocketAddrV4 = s.trim().parse().map_err(|_| {
        FfiError::invalid(format!(
            "bad group {s:?}: expected a multicast IPv4 address and a port, e.g. \"239.77.0.1:7700\""
        ))
    })?;
    if !group.ip().is_multicast() {
        return Err(FfiError::invalid(format!(
            "bad group {s:?}: {} is not a multicast address (use 224.0.0.0/4, e.g. 239.77.0.1)",
            group.ip()
        )));
    }
    if group.port() == 0 {
        return Err(FfiError::invalid(format!(
            "bad group {s:?}: the port must not be 0"
        )));
    }
    Ok(group)
}

/// The library's version, e.g. `"0.1.0"` (a static string).
#[unsafe(no_mangle)]
pub extern "C" fn rmcast_version() -> *const c_char {
    static VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"?",
        };
    VERSION.as_ptr()
}

/// The message of the last failed call on this thread (`""` after a call
/// that succeeded). Never NULL. Valid until the next call into the library
/// on this thread that returns an `RmcastStatus`; copy it to keep it.
#[unsafe(no_mangle)]
pub extern "C" fn rmcast_last_error() -> *const c_char {
    // The pointer stays valid while the thread-local's CString is not
    // replaced, which only a later fallible call does (see above).
    guard(c"".as_ptr(), || LAST_ERROR.with(|e| e.borrow().as_ptr()))
}

/// A status code's name, e.g. `"RMCAST_STATUS_KEY"` (a static string;
/// `"RMCAST_STATUS_UNKNOWN"` for a value no version defined).
#[unsafe(no_mangle)]
pub extern "C" fn rmcast_status_name(status: i32) -> *const c_char {
    let name: &'static CStr = match status {
        0 => c"RMCAST_STATUS_OK",
        1 => c"RMCAST_STATUS_INVALID_ARGUMENT",
        2 => c"RMCAST_STATUS_KEY",
        3 => c"RMCAST_STATUS_IO",
        4 => c"RMCAST_STATUS_REFUSED",
        5 => c"RMCAST_STATUS_FAILED",
        6 => c"RMCAST_STATUS_INCOMPLETE",
        7 => c"RMCAST_STATUS_CANCELLED",
        8 => c"RMCAST_STATUS_END_OF_STREAM",
        9 => c"RMCAST_STATUS_PANIC",
        _ => c"RMCAST_STATUS_UNKNOWN",
    };
    name.as_ptr()
}

/// A new config with the defaults (see `RmcastConfig`); free it with
/// `rmcast_config_free`. NULL only if the library failed internally.
#[unsafe(no_mangle)]
pub extern "C" fn rmcast_config_new() -> *mut RmcastConfig {
    guard(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(RmcastConfig::default()))
    })
}

/// Frees a config (NULL: nothing happens). Calls that used it keep what
/// they need; streams opened with it do not refer to it.
///
/// # Safety
/// `cfg` is NULL or a config from `rmcast_config_new` not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_free(cfg: *mut RmcastConfig) {
    guard((), || {
        if !cfg.is_null() {
            // SAFETY: the caller hands back a config from rmcast_config_new.
            drop(unsafe { Box::from_raw(cfg) });
        }
    });
}

/// Sets the multicast group and port, `"a.b.c.d:port"` with the address
/// in 224.0.0.0/4 (e.g. `"239.77.0.1:7700"`); senders and receivers of a
/// session must use the same. Fails with `RMCAST_STATUS_INVALID_ARGUMENT`
/// on anything else.
///
/// # Safety
/// `cfg` is NULL or a live config; `group` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_group(
    cfg: *mut RmcastConfig,
    group: *const c_char,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        // SAFETY: forwarded from this function's contract.
        cfg.group = parse_group(unsafe { str_arg(group, "group") }?)?;
        Ok(())
    })
}

/// Sets the local interface address (`"127.0.0.1"` by default, which keeps
/// every packet on this machine): sockets bind to it and multicast leaves
/// and is joined through it.
///
/// # Safety
/// `cfg` is NULL or a live config; `iface` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_iface(
    cfg: *mut RmcastConfig,
    iface: *const c_char,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        // SAFETY: forwarded from this function's contract.
        let s = unsafe { str_arg(iface, "iface") }?;
        cfg.iface = s.trim().parse().map_err(|_| {
            FfiError::invalid(format!(
                "bad interface {s:?}: expected an IPv4 address, e.g. \"127.0.0.1\""
            ))
        })?;
        Ok(())
    })
}

/// Sets how many receivers a sender waits for (object send) or admits
/// (stream sender); 1 by default. Zero, or more than 65520, is refused.
///
/// # Safety
/// `cfg` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_receivers(
    cfg: *mut RmcastConfig,
    receivers: u32,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        if receivers == 0 || receivers > 65520 {
            return Err(FfiError::invalid(format!(
                "receivers must be 1 to 65520, not {receivers}"
            )));
        }
        cfg.receivers = receivers as u16;
        Ok(())
    })
}

/// Sets a sender's reliability protocol by the name `rmcast send
/// --protocol` takes: `"auto"` (the default: chosen for the group once it
/// has registered, from its size, the object's size and the rate), `"ack"`,
/// `"nak-poll"`, `"ring"` or `"tree"`. NULL is `"auto"`. The TCP overlays
/// (`tcp-*`) are not in the C library: it sends over UDP multicast.
///
/// # Safety
/// `cfg` is NULL or a live config; `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_protocol(
    cfg: *mut RmcastConfig,
    name: *const c_char,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        if name.is_null() {
            cfg.protocol = None;
            return Ok(());
        }
        // SAFETY: forwarded from this function's contract.
        let name = unsafe { str_arg(name, "name") }?;
        cfg.protocol = parse_protocol(name)?;
        Ok(())
    })
}

/// A protocol's name: `None` for auto.
fn parse_protocol(name: &str) -> FfiResult<Option<rmcast::ProtocolId>> {
    use rmcast::ProtocolId as P;
    if name == "auto" {
        return Ok(None);
    }
    if let Some(id) = [P::Ack, P::NakPoll, P::Ring, P::Tree]
        .into_iter()
        .find(|p| p.cli_name() == name)
    {
        return Ok(Some(id));
    }
    Err(FfiError::invalid(if name.starts_with("tcp-") {
        format!(
            "protocol {name:?} is a TCP overlay, which the C library does not run \
             (it sends over UDP multicast); the rmcast CLI and the Rust and Python \
             libraries do"
        )
    } else {
        format!("unknown protocol {name:?}: one of auto, ack, nak-poll, ring, tree")
    }))
}

/// Sets a sender's block FEC as `rmcast send --fec` takes it: `"K:P"` (K
/// data packets per block, P parity packets sent with each before anyone
/// asks; more on demand), `"K:P:D"` (D blocks interleaved, so a burst of D
/// losses costs each block one packet), or `"off"`. NULL goes back to the
/// default: what the protocol `"auto"` chooses for the group, else off.
///
/// # Safety
/// `cfg` is NULL or a live config; `shape` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_fec(
    cfg: *mut RmcastConfig,
    shape: *const c_char,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        if shape.is_null() {
            cfg.fec = None;
            return Ok(());
        }
        // SAFETY: forwarded from this function's contract.
        let shape = unsafe { str_arg(shape, "shape") }?;
        let fec = rmcast::FecShape::from_setting(shape)
            .map_err(|e| FfiError::invalid(format!("fec {shape:?}: {e}")))?;
        cfg.fec = Some(fec);
        Ok(())
    })
}

/// What a sender does with a receiver that falls far behind the group (at
/// least half a window behind its median receiver for `after_ms`), as
/// `rmcast send --laggard`: `"wait"` (the default: the group goes at its
/// pace), `"eject"` (it is named as failed and the others go on) or
/// `"tcp"` (it fetches the rest over TCP from the sender while the group
/// goes on, and still gets a verified copy). `after_ms` 0 is the default,
/// 2 s; it must be 0 with `"wait"`, and at least 100 otherwise. NULL is
/// `"wait"`.
///
/// # Safety
/// `cfg` is NULL or a live config; `mode` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_laggard(
    cfg: *mut RmcastConfig,
    mode: *const c_char,
    after_ms: u64,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        let mode = if mode.is_null() {
            "wait"
        } else {
            // SAFETY: forwarded from this function's contract.
            unsafe { str_arg(mode, "mode") }?
        };
        let after = (after_ms > 0).then(|| Duration::from_millis(after_ms));
        if after.is_some_and(|a| a < Duration::from_millis(100)) {
            return Err(FfiError::invalid(format!(
                "after_ms {after_ms} is below 100 (0 is the default, 2 s)"
            )));
        }
        cfg.laggard = rmcast::Laggard::from_setting(mode, after).map_err(|e| {
            FfiError::invalid(format!("laggard {mode:?}, after_ms {after_ms}: {e}"))
        })?;
        Ok(())
    })
}

/// Sets a name: a sender stores the object under it at the receivers (by
/// default a file keeps its own name; `rmcast_send_buffer` takes its own);
/// a receiver or stream receiver shows it in the sender's report (default
/// `"host:pid"`). NULL goes back to the default.
///
/// # Safety
/// `cfg` is NULL or a live config; `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_name(
    cfg: *mut RmcastConfig,
    name: *const c_char,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        cfg.name = if name.is_null() {
            None
        } else {
            // SAFETY: forwarded from this function's contract.
            Some(unsafe { str_arg(name, "name") }?.to_owned())
        };
        Ok(())
    })
}

/// Reads the group key file at `path` (made by `rmcast_keygen` or
/// `rmcast keygen`): every session with this config is sealed under it
/// (authenticated and encrypted), and turns insecure off. A missing or
/// malformed file fails with `RMCAST_STATUS_KEY` here, not later.
///
/// # Safety
/// `cfg` is NULL or a live config; `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_key_file(
    cfg: *mut RmcastConfig,
    path: *const c_char,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        // SAFETY: forwarded from this function's contract.
        let path = unsafe { str_arg(path, "path") }?;
        let key = rmcast::load_key(Path::new(path))
            .map_err(|e| FfiError::new(RmcastStatus::Key, e.to_string()))?;
        cfg.key = Some(key);
        cfg.insecure = false;
        Ok(())
    })
}

/// `insecure != 0`: run without a group key, unauthenticated and in the
/// clear (anyone on the network can read, forge or end the session), and
/// forget any key set before; the other side must run insecure too.
/// `0`: back to needing a key.
///
/// # Safety
/// `cfg` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_insecure(
    cfg: *mut RmcastConfig,
    insecure: i32,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        cfg.insecure = insecure != 0;
        if cfg.insecure {
            cfg.key = None;
        }
        Ok(())
    })
}

/// Sets how long to wait for the other side, in milliseconds (0: the
/// default). Object sender: for its receivers to register (default 30 s).
/// Object receiver: for a transfer to be announced (default forever).
/// Stream sender: for its receivers to join (default 30 s). Stream
/// receiver: to be admitted to a stream (default forever).
///
/// # Safety
/// `cfg` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_timeout_ms(
    cfg: *mut RmcastConfig,
    timeout_ms: u64,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        cfg.timeout = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms));
        Ok(())
    })
}

/// A receiver refuses objects larger than `max_bytes` (0: no limit, the
/// default); `rmcast_recv_buffer` holds the whole object in memory.
///
/// # Safety
/// `cfg` is NULL or a live config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_max_bytes(
    cfg: *mut RmcastConfig,
    max_bytes: u64,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        cfg.max_bytes = (max_bytes > 0).then_some(max_bytes);
        Ok(())
    })
}

/// Object sends and receives with this config stop soon (within about
/// 100 ms) once `cancel` is raised, returning `RMCAST_STATUS_CANCELLED`.
/// The config holds its own reference: the token may be freed before the
/// config. NULL removes the token.
///
/// # Safety
/// `cfg` is NULL or a live config; `cancel` is NULL or a live token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_cancel(
    cfg: *mut RmcastConfig,
    cancel: *const RmcastCancel,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        // SAFETY: forwarded from this function's contract.
        cfg.cancel = unsafe { cancel.as_ref() }.map(|c| c.flag.clone());
        Ok(())
    })
}

/// Object sends and receives with this config call `progress` on the
/// calling thread, at most about ten times a second and once at the end,
/// passing `user` back. NULL `progress` removes it. The callback must not
/// unwind (C++ exceptions, `longjmp`) through the library, and must not
/// change or free the config.
///
/// # Safety
/// `cfg` is NULL or a live config; `progress` is NULL or a function that is
/// safe to call with `user` from every thread that uses this config.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_config_set_progress(
    cfg: *mut RmcastConfig,
    progress: RmcastProgressFn,
    user: *mut c_void,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle_mut(cfg, "cfg") }?;
        cfg.progress = progress.map(|f| (f, user as usize));
        Ok(())
    })
}

/// A cancel token: raised once (from any thread, or a signal handler), it
/// stops the calls whose config holds it. Made by `rmcast_cancel_new`,
/// freed by `rmcast_cancel_free`.
pub struct RmcastCancel {
    flag: Arc<AtomicBool>,
}

/// A new, lowered cancel token. NULL only if the library failed internally.
#[unsafe(no_mangle)]
pub extern "C" fn rmcast_cancel_new() -> *mut RmcastCancel {
    guard(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(RmcastCancel {
            flag: Arc::new(AtomicBool::new(false)),
        }))
    })
}

/// Raises the token. Async-signal-safe (one atomic store, no allocation,
/// no lock): call it from a `SIGINT` handler or another thread. NULL: nothing.
///
/// # Safety
/// `cancel` is NULL or a live token (not freed concurrently).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_cancel_raise(cancel: *const RmcastCancel) {
    // catch_unwind costs nothing unless something panics (an atomic store
    // cannot); no last error is set, on purpose: a signal handler must not
    // allocate or touch thread-locals.
    let _ = catch_unwind(|| {
        // SAFETY: the caller promises NULL or a live token.
        if let Some(c) = unsafe { cancel.as_ref() } {
            c.flag.store(true, Ordering::SeqCst);
        }
    });
}

/// Lowers the token again, so the configs holding it can run new calls.
///
/// # Safety
/// `cancel` is NULL or a live token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_cancel_reset(cancel: *const RmcastCancel) {
    guard((), || {
        // SAFETY: the caller promises NULL or a live token.
        if let Some(c) = unsafe { cancel.as_ref() } {
            c.flag.store(false, Ordering::SeqCst);
        }
    });
}

/// 1 if the token is raised, 0 if not (or NULL).
///
/// # Safety
/// `cancel` is NULL or a live token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_cancel_is_raised(cancel: *const RmcastCancel) -> i32 {
    guard(0, || {
        // SAFETY: the caller promises NULL or a live token.
        i32::from(unsafe { cancel.as_ref() }.is_some_and(|c| c.flag.load(Ordering::SeqCst)))
    })
}

/// Frees the token (NULL: nothing). Configs that hold it keep their own
/// reference, so a raise before the free still reaches them.
///
/// # Safety
/// `cancel` is NULL or a token from `rmcast_cancel_new` not freed yet, and
/// no other thread or signal handler uses it any more.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_cancel_free(cancel: *mut RmcastCancel) {
    guard((), || {
        if !cancel.is_null() {
            // SAFETY: the caller hands back a token from rmcast_cancel_new.
            drop(unsafe { Box::from_raw(cancel) });
        }
    });
}

/// Writes a random group on this machine's private multicast range
/// (`"239.x.y.z:port"`, NUL-terminated) into `out`, which holds `cap`
/// bytes (32 is enough). Handy for tests that must not meet each other.
///
/// # Safety
/// `out` is NULL or valid for `cap` bytes of writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_random_group(out: *mut c_char, cap: usize) -> RmcastStatus {
    entry(|| {
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        let text = rmcast::random_group().to_string();
        if text.len() + 1 > cap {
            return Err(FfiError::invalid(format!(
                "out holds {cap} bytes; a group needs up to 22 (32 is enough)"
            )));
        }
        // SAFETY: `out` is valid for `cap` bytes and text.len() + 1 <= cap.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), out.cast::<u8>(), text.len());
            *out.add(text.len()) = 0;
        }
        Ok(())
    })
}

/// Writes a fresh group key to a new file at `path` with mode 0600 (the
/// same format as `rmcast keygen`). Refuses to overwrite an existing file:
/// a lost key cannot be recovered. Copy the file to every member.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_keygen(path: *const c_char) -> RmcastStatus {
    entry(|| {
        // SAFETY: forwarded from this function's contract.
        let path = unsafe { str_arg(path, "path") }?;
        rmcast::write_key(Path::new(path), &rmcast::generate_key())?;
        Ok(())
    })
}

/// Bytes allocated by the library (a received object or message). Free
/// them with `rmcast_buffer_free`, never with `free()`. An empty buffer may
/// have a non-NULL `data` that must not be read.
#[repr(C)]
pub struct RmcastBuffer {
    /// The first byte (NULL once freed).
    pub data: *mut u8,
    /// How many bytes.
    pub len: usize,
}

impl RmcastBuffer {
    pub(crate) fn from_vec(v: Vec<u8>) -> Self {
        let boxed = v.into_boxed_slice();
        let len = boxed.len();
        let data = Box::into_raw(boxed).cast::<u8>();
        Self { data, len }
    }
}

/// Frees the bytes of `buf` and sets it to `{NULL, 0}` (so a second free
/// does nothing). NULL, or a buffer whose `data` is NULL: nothing.
///
/// # Safety
/// `buf` is NULL or points to a buffer filled by this library (or zeroed),
/// whose fields the caller did not change.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_buffer_free(buf: *mut RmcastBuffer) {
    guard((), || {
        // SAFETY: the caller promises NULL or a valid buffer.
        let Some(b) = (unsafe { buf.as_mut() }) else {
            return;
        };
        if !b.data.is_null() {
            let slice = std::ptr::slice_from_raw_parts_mut(b.data, b.len);
            // SAFETY: data and len are those of a Box<[u8]> made by
            // RmcastBuffer::from_vec, unchanged, and not freed yet.
            drop(unsafe { Box::from_raw(slice) });
        }
        b.data = std::ptr::null_mut();
        b.len = 0;
    });
}

/// Sends `len` bytes at `data` under the name `name` to the config's
/// receivers (`rmcast_config_set_receivers`) on its group, blocking until
/// the session is over.
///
/// Returns `RMCAST_STATUS_OK` when every receiver verified the object,
/// `RMCAST_STATUS_INCOMPLETE` when the session ran but some receivers
/// failed (the report names them), another status when it could not run.
/// `*report` (if `report` is not NULL) gets a report whenever the session
/// ran (OK or INCOMPLETE), NULL otherwise; free it with `rmcast_report_free`.
///
/// # Safety
/// `cfg` is NULL or a live config; `name` is NULL or a NUL-terminated
/// string; `data` is valid for `len` bytes of reading (it may be NULL when
/// `len` is 0); `report` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_send_buffer(
    cfg: *const RmcastConfig,
    name: *const c_char,
    data: *const u8,
    len: usize,
    report: *mut *mut RmcastReport,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { clear_out(report) };
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle(cfg, "cfg") }?;
        // SAFETY: forwarded from this function's contract.
        let name = unsafe { str_arg(name, "name") }?;
        let bytes: &[u8] = if len == 0 {
            &[]
        } else if data.is_null() {
            return Err(FfiError::invalid(format!("data is NULL but len is {len}")));
        } else {
            // SAFETY: non-NULL and valid for `len` bytes (contract).
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        let send = cfg.send_config("rmcast_send_buffer")?;
        let mut progress = |p| cfg.report_progress(p);
        let r = rmcast::send_bytes(name, bytes, &send, Some(&mut progress))?;
        finish_send(RmcastReport::from_send(&r), report)
    })
}

/// Sends the file at `path` (memory-mapped: do not truncate it meanwhile),
/// under its file name unless `rmcast_config_set_name` gave another; the
/// rest as `rmcast_send_buffer`. A directory is sent as a tree in one
/// session (receivers store it as a directory of that name).
///
/// # Safety
/// `cfg` is NULL or a live config; `path` is NULL or a NUL-terminated
/// string; `report` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_send_file(
    cfg: *const RmcastConfig,
    path: *const c_char,
    report: *mut *mut RmcastReport,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { clear_out(report) };
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle(cfg, "cfg") }?;
        // SAFETY: forwarded from this function's contract.
        let path = unsafe { str_arg(path, "path") }?;
        let send = cfg.send_config("rmcast_send_file")?;
        let mut progress = |p| cfg.report_progress(p);
        let r = rmcast::send_path(Path::new(path), &send, Some(&mut progress))?;
        finish_send(RmcastReport::from_send(&r), report)
    })
}

/// Hands a sender's report out and says OK or INCOMPLETE.
fn finish_send(r: RmcastReport, out: *mut *mut RmcastReport) -> FfiResult {
    let result = if r.ok {
        Ok(())
    } else {
        Err(FfiError::new(RmcastStatus::Incomplete, r.summary()))
    };
    // SAFETY: every caller passes its own `report` argument, NULL or writable.
    unsafe { hand_out(out, r) };
    result
}

/// Sets `*out` to NULL, so a failed call leaves no stale pointer.
///
/// # Safety
/// `out` is NULL or valid for one pointer write.
pub(crate) unsafe fn clear_out<T>(out: *mut *mut T) {
    if !out.is_null() {
        // SAFETY: the caller promises `out` is writable.
        unsafe { *out = std::ptr::null_mut() };
    }
}

/// Receives the next object announced on the config's group into memory:
/// fills `*out` (free it with `rmcast_buffer_free`) and, if `report` is not
/// NULL, `*report` (free it with `rmcast_report_free`). Blocks until the
/// object is verified (its BLAKE3 hash matched), the transfer failed, the
/// timeout passed or the cancel token was raised. On failure `*out` is
/// `{NULL, 0}` and `*report` NULL.
///
/// # Safety
/// `cfg` is NULL or a live config; `out` is NULL or valid for writing one
/// `RmcastBuffer`; `report` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_recv_buffer(
    cfg: *const RmcastConfig,
    out: *mut RmcastBuffer,
    report: *mut *mut RmcastReport,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { clear_out(report) };
        // SAFETY: the caller promises NULL or a writable buffer.
        let out = unsafe { out.as_mut() }.ok_or_else(|| FfiError::invalid("out is NULL"))?;
        out.data = std::ptr::null_mut();
        out.len = 0;
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle(cfg, "cfg") }?;
        let recv = cfg.recv_config("rmcast_recv_buffer")?;
        let mut progress = |p| cfg.report_progress(p);
        let (r, bytes) = rmcast::recv_to_vec(&recv, Some(&mut progress))?;
        *out = RmcastBuffer::from_vec(bytes);
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { hand_out(report, RmcastReport::from_recv(&r)) };
        Ok(())
    })
}

/// Receives the next object announced on the config's group into the
/// directory `dir` (created if missing), stored under its offered name once
/// verified (`rmcast_report_path` says where); partial files are removed
/// on failure. The rest as `rmcast_recv_buffer`.
///
/// # Safety
/// `cfg` is NULL or a live config; `dir` is NULL or a NUL-terminated
/// string; `report` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_recv_file(
    cfg: *const RmcastConfig,
    dir: *const c_char,
    report: *mut *mut RmcastReport,
) -> RmcastStatus {
    entry(|| {
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { clear_out(report) };
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { handle(cfg, "cfg") }?;
        // SAFETY: forwarded from this function's contract.
        let dir = unsafe { str_arg(dir, "dir") }?;
        let mut recv = cfg.recv_config("rmcast_recv_file")?;
        recv.out_dir = dir.into();
        let mut progress = |p| cfg.report_progress(p);
        let r = rmcast::recv_to_dir(&recv, Some(&mut progress))?;
        // SAFETY: `report` is NULL or writable (contract).
        unsafe { hand_out(report, RmcastReport::from_recv(&r)) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_parse_or_say_why() {
        assert!(parse_group("239.1.2.3:7000").is_ok());
        for bad in ["", "nonsense", "10.0.0.1:7000", "239.1.2.3:0", "239.1.2.3"] {
            let e = parse_group(bad).unwrap_err();
            assert_eq!(e.status, RmcastStatus::InvalidArgument);
            assert!(e.message.contains("bad group"), "{}", e.message);
        }
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let st = entry(|| panic!("boom"));
        assert_eq!(st, RmcastStatus::Panic);
        // SAFETY: rmcast_last_error returns a valid NUL-terminated string.
        let msg = unsafe { CStr::from_ptr(rmcast_last_error()) }
            .to_str()
            .unwrap();
        assert!(msg.contains("boom"), "{msg}");
        assert_eq!(guard(7, || panic!("again")), 7);
    }

    #[test]
    fn protocol_names_are_the_clis() {
        assert_eq!(parse_protocol("auto").unwrap(), None);
        assert_eq!(
            parse_protocol("nak-poll").unwrap(),
            Some(rmcast::ProtocolId::NakPoll)
        );
        assert_eq!(
            parse_protocol("ring").unwrap(),
            Some(rmcast::ProtocolId::Ring)
        );
        let e = parse_protocol("tcp-chain").unwrap_err();
        assert!(e.message.contains("TCP overlay"), "{}", e.message);
        let e = parse_protocol("nakpoll").unwrap_err();
        assert!(e.message.contains("one of auto, ack"), "{}", e.message);
    }

    #[test]
    fn the_default_sender_is_auto_and_the_setters_reach_the_session() {
        let mut c = RmcastConfig {
            insecure: true,
            ..RmcastConfig::default()
        };
        let s = c.send_config("t").unwrap();
        assert!(s.proto.auto.is_some_and(|a| !a.keep_fec));
        assert_eq!(s.proto.laggard, rmcast::Laggard::Wait);
        c.protocol = Some(rmcast::ProtocolId::Ack);
        c.fec = Some(Some(rmcast::FecShape::new(16, 1)));
        c.laggard = rmcast::Laggard::from_setting("eject", None).unwrap();
        let s = c.send_config("t").unwrap();
        assert!(s.proto.auto.is_none());
        assert_eq!(s.proto.protocol, rmcast::ProtocolId::Ack);
        assert_eq!(s.proto.fec, Some(rmcast::FecShape::new(16, 1)));
        assert_eq!(
            s.proto.laggard,
            rmcast::Laggard::Eject {
                after: rmcast::Laggard::DEFAULT_AFTER
            }
        );
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let cfg = rmcast_config_new();
        let msg = || {
            // SAFETY: rmcast_last_error returns a valid NUL-terminated string.
            unsafe { CStr::from_ptr(rmcast_last_error()) }
                .to_str()
                .unwrap()
                .to_owned()
        };
        // SAFETY: a live config and NUL-terminated strings.
        unsafe {
            assert_eq!(
                rmcast_config_set_fec(cfg, c"0:1".as_ptr()),
                RmcastStatus::InvalidArgument
            );
            assert!(msg().contains("fec \"0:1\""), "{}", msg());
            assert_eq!(
                rmcast_config_set_fec(cfg, c"64:2:65".as_ptr()),
                RmcastStatus::InvalidArgument
            );
            assert!(msg().contains("interleaved blocks"), "{}", msg());
            assert_eq!(
                rmcast_config_set_fec(cfg, c"64:2:8".as_ptr()),
                RmcastStatus::Ok
            );
            assert_eq!(
                rmcast_config_set_fec(cfg, c"64:2".as_ptr()),
                RmcastStatus::Ok
            );
            assert_eq!(
                rmcast_config_set_laggard(cfg, c"wait".as_ptr(), 500),
                RmcastStatus::InvalidArgument
            );
            assert!(msg().contains("not wait"), "{}", msg());
            assert_eq!(
                rmcast_config_set_laggard(cfg, c"tcp".as_ptr(), 50),
                RmcastStatus::InvalidArgument
            );
            assert_eq!(
                rmcast_config_set_laggard(cfg, c"later".as_ptr(), 0),
                RmcastStatus::InvalidArgument
            );
            assert!(msg().contains("one of tcp, eject, wait"), "{}", msg());
            assert_eq!(
                rmcast_config_set_laggard(cfg, c"tcp".as_ptr(), 300),
                RmcastStatus::Ok
            );
            assert_eq!(
                rmcast_config_set_protocol(cfg, c"tcp-pipeline".as_ptr()),
                RmcastStatus::InvalidArgument
            );
            assert_eq!(
                rmcast_config_set_protocol(cfg, c"tree".as_ptr()),
                RmcastStatus::Ok
            );
            assert_eq!(
                rmcast_config_set_protocol(std::ptr::null_mut(), c"tree".as_ptr()),
                RmcastStatus::InvalidArgument
            );
            rmcast_config_free(cfg);
        }
    }

    #[test]
    fn status_names_match_the_enum() {
        for (st, name) in [
            (RmcastStatus::Ok, "RMCAST_STATUS_OK"),
            (RmcastStatus::Key, "RMCAST_STATUS_KEY"),
            (RmcastStatus::Panic, "RMCAST_STATUS_PANIC"),
        ] {
            // SAFETY: static NUL-terminated strings.
            let got = unsafe { CStr::from_ptr(rmcast_status_name(st as i32)) };
            assert_eq!(got.to_str().unwrap(), name);
        }
    }
}
