//! `rmcast._rmcast`: the extension module under the `rmcast` Python package.
//!
//! A thin layer: the Python side (`python/rmcast/`) normalises arguments into
//! an options dict, turns report dicts into dataclasses and builds the
//! public exceptions; this module builds the library's configurations, runs
//! every blocking call with the GIL released and answers Ctrl-C.
//!
//! Blocking calls run on a worker thread; the calling thread waits for it in
//! slices of [`SLICE`] with the GIL released and runs the interpreter's
//! signal handlers between slices (`check_signals`). When a handler raises
//! (KeyboardInterrupt), the call raises the session's cancel flag, waits for
//! the worker to wind the session down (the library checks the flag at least
//! every 100 ms) and re-raises. Stream endpoints have no cancel flag: their
//! operation keeps running on its worker after an interrupt and its result
//! is collected by the next call on the endpoint (see [`Endpoint`]).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

/// How long the waiting thread sleeps (GIL released) between two looks at
/// the interpreter's pending signals.
const SLICE: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------- errors

/// The public exception `name` from `rmcast.errors`, built with `msg`.
fn py_error(py: Python<'_>, name: &str, msg: String) -> PyErr {
    match py
        .import("rmcast.errors")
        .and_then(|m| m.getattr(name))
        .and_then(|cls| cls.call1((msg.clone(),)))
    {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// The library's error as the matching Python exception.
fn lib_err(py: Python<'_>, e: rmcast::Error) -> PyErr {
    let text = e.to_string();
    let kind = match e {
        rmcast::Error::Io { .. } => "RmcastIOError",
        rmcast::Error::Config(_) | rmcast::Error::Invalid(_) => "InvalidArgument",
        rmcast::Error::Refused(_) => "Refused",
        rmcast::Error::Failed(_) => "TransferFailed",
        rmcast::Error::NoSession(_) => "NoSession",
        rmcast::Error::Cancelled => "Cancelled",
        _ => "RmcastError",
    };
    py_error(py, kind, text)
}

fn invalid(py: Python<'_>, msg: impl Into<String>) -> PyErr {
    py_error(py, "InvalidArgument", msg.into())
}

// ---------------------------------------------------------------- buffers

/// A contiguous buffer acquired from a Python object with the buffer
/// protocol (`PyObject_GetBuffer`), released when dropped. While it is
/// held the exporter keeps the memory in place (a `bytearray` or numpy
/// array refuses to resize).
struct Buffer {
    view: Box<capi::Py_buffer>,
}

/// The buffer protocol's C API. It joined the limited API only in 3.11
/// (so PyO3 hides it under `abi3-py39`), but CPython has exported these
/// symbols with this struct layout since 3.3.
#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
mod capi {
    use pyo3::ffi::{Py_ssize_t, PyObject};
    use std::ffi::{c_char, c_int, c_void};

    #[repr(C)]
    pub struct Py_buffer {
        pub buf: *mut c_void,
        pub obj: *mut PyObject,
        pub len: Py_ssize_t,
        pub itemsize: Py_ssize_t,
        pub readonly: c_int,
        pub ndim: c_int,
        pub format: *mut c_char,
        pub shape: *mut Py_ssize_t,
        pub strides: *mut Py_ssize_t,
        pub suboffsets: *mut Py_ssize_t,
        pub internal: *mut c_void,
    }

    impl Py_buffer {
        pub fn new() -> Self {
            Self {
                buf: std::ptr::null_mut(),
                obj: std::ptr::null_mut(),
                len: 0,
                itemsize: 0,
                readonly: 0,
                ndim: 0,
                format: std::ptr::null_mut(),
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                suboffsets: std::ptr::null_mut(),
                internal: std::ptr::null_mut(),
            }
        }
    }

    /// `PyBUF_ANY_CONTIGUOUS`: C- or Fortran-contiguous, strides given.
    pub const PyBUF_ANY_CONTIGUOUS: c_int = 0x0080 | 0x0010 | 0x0008;

    unsafe extern "C" {
        pub fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut Py_buffer, flags: c_int) -> c_int;
        pub fn PyBuffer_Release(view: *mut Py_buffer);
    }
}

// SAFETY: the view is only read (its pointer and length) off the GIL; it
// is released with the GIL held (Drop).
unsafe impl Send for Buffer {}

impl Buffer {
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut view = Box::new(capi::Py_buffer::new());
        // SAFETY: `view` is a valid, writable Py_buffer; the GIL is held.
        let rc = unsafe {
            capi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, capi::PyBUF_ANY_CONTIGUOUS)
        };
        if rc != 0 {
            let e = PyErr::fetch(obj.py());
            return Err(invalid(
                obj.py(),
                format!(
                    "cannot read this object in place ({e}); pass a contiguous buffer \
                     (bytes, bytearray, memoryview, numpy.ascontiguousarray(a)) or copy=True"
                ),
            ));
        }
        Ok(Self { view })
    }

    fn as_slice(&self) -> &[u8] {
        let len = usize::try_from(self.view.len).unwrap_or(0);
        if len == 0 || self.view.buf.is_null() {
            return &[];
        }
        // SAFETY: an acquired contiguous buffer is `len` readable bytes at `buf`.
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: acquired by PyObject_GetBuffer, released once, with the GIL.
        Python::attach(|_| unsafe { capi::PyBuffer_Release(&mut *self.view) });
    }
}

// ---------------------------------------------------------------- blocking

/// Runs `f` on a worker thread while this thread waits with the GIL
/// released; Ctrl-C (any exception from a signal handler) raises `cancel`,
/// waits for the worker to stop and is re-raised.
fn run_blocking<T, F>(py: Python<'_>, cancel: &Arc<AtomicBool>, f: F) -> PyResult<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    std::thread::scope(|s| {
        let (tx, mut rx) = mpsc::channel::<()>();
        let worker = s.spawn(move || {
            let r = f();
            let _ = tx.send(());
            r
        });
        let mut interrupted = None;
        loop {
            let (back, got) = py.detach(move || {
                let got = rx.recv_timeout(SLICE);
                (rx, got)
            });
            rx = back;
            match got {
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Err(e) = py.check_signals() {
                        cancel.store(true, Ordering::SeqCst);
                        interrupted = Some(e);
                        break;
                    }
                }
            }
        }
        let joined = py.detach(|| worker.join());
        if let Some(e) = interrupted {
            return Err(e);
        }
        joined.map_err(|_| PyRuntimeError::new_err("rmcast: the worker thread panicked"))
    })
}

/// A cancel flag Python code can raise (`rmcast.aio` raises it when its
/// task is cancelled); pass it as `cancel=` to a blocking call.
#[pyclass(module = "rmcast._rmcast", frozen)]
struct CancelToken {
    flag: Arc<AtomicBool>,
}

#[pymethods]
impl CancelToken {
    #[new]
    fn new() -> Self {
        Self {
            flag: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Raise the flag: the call using this token stops within ~100 ms.
    fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Whether the flag is raised.
    #[getter]
    fn cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

fn cancel_flag(token: Option<&Bound<'_, CancelToken>>) -> Arc<AtomicBool> {
    token.map_or_else(
        || Arc::new(AtomicBool::new(false)),
        |t| t.get().flag.clone(),
    )
}

// ---------------------------------------------------------------- keys

/// A group key (see `rmcast keygen`): every packet of a session is sealed
/// under it.
#[pyclass(module = "rmcast._rmcast", frozen)]
struct Key {
    inner: Arc<rmcast::GroupKey>,
}

#[pymethods]
impl Key {
    /// Loads a key file written by `rmcast keygen` or `rmcast.keygen`.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = rmcast::load_key(&path).map_err(|e| lib_err(py, e))?;
        Ok(Self { inner })
    }

    /// The key's public identifier (safe to print).
    #[getter]
    fn id(&self) -> String {
        self.inner.id().to_string()
    }

    fn __repr__(&self) -> String {
        format!("<rmcast.Key {}>", self.inner.id())
    }
}

/// Makes a fresh group key, writes it to `path` (mode 0600, never
/// overwriting) and returns it.
#[pyfunction]
fn keygen(py: Python<'_>, path: PathBuf) -> PyResult<Key> {
    let key = rmcast::generate_key();
    rmcast::write_key(&path, &key).map_err(|e| lib_err(py, e))?;
    Ok(Key {
        inner: Arc::new(key),
    })
}

// ---------------------------------------------------------------- options

struct Opts<'a, 'py> {
    d: &'a Bound<'py, PyDict>,
}

impl<'py> Opts<'_, 'py> {
    fn item(&self, k: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(self.d.get_item(k)?.filter(|v| !v.is_none()))
    }
    fn str(&self, k: &str) -> PyResult<Option<String>> {
        self.item(k)?.map(|v| v.extract::<String>()).transpose()
    }
    fn u64(&self, k: &str) -> PyResult<Option<u64>> {
        self.item(k)?.map(|v| v.extract::<u64>()).transpose()
    }
    fn f64(&self, k: &str) -> PyResult<Option<f64>> {
        self.item(k)?.map(|v| v.extract::<f64>()).transpose()
    }
    fn secs(&self, k: &str) -> PyResult<Option<Duration>> {
        match self.f64(k)? {
            None => Ok(None),
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s))),
            Some(s) => Err(PyValueError::new_err(format!("{k}={s} is not a duration"))),
        }
    }
    fn path(&self, k: &str) -> PyResult<Option<PathBuf>> {
        self.item(k)?.map(|v| v.extract::<PathBuf>()).transpose()
    }
    fn key(&self) -> PyResult<Option<Arc<rmcast::GroupKey>>> {
        match self.item("key")? {
            None => Ok(None),
            Some(k) => Ok(Some(k.cast::<Key>()?.get().inner.clone())),
        }
    }
    fn group(&self, py: Python<'_>) -> PyResult<SocketAddrV4> {
        match self.str("group")? {
            None => Ok(rmcast::DEFAULT_GROUP),
            Some(g) => g
                .parse()
                .map_err(|_| invalid(py, format!("group {g:?} is not ADDR:PORT"))),
        }
    }
    fn iface(&self, py: Python<'_>) -> PyResult<Ipv4Addr> {
        match self.str("iface")? {
            None => Ok(Ipv4Addr::LOCALHOST),
            Some(a) => a
                .parse()
                .map_err(|_| invalid(py, format!("iface {a:?} is not an IPv4 address"))),
        }
    }
}

fn to_u16(py: Python<'_>, k: &str, v: u64) -> PyResult<u16> {
    u16::try_from(v).map_err(|_| invalid(py, format!("{k}={v} is too large")))
}

fn to_u32(py: Python<'_>, k: &str, v: u64) -> PyResult<u32> {
    u32::try_from(v).map_err(|_| invalid(py, format!("{k}={v} is too large")))
}

/// What a protocol name selects.
enum Proto {
    Multicast(rmcast::ProtocolId),
    Overlay(fn(u32) -> rmcast::overlay::OverlayShape),
}

/// The protocol names `rmcast --protocol` accepts ("auto", the default,
/// chooses for the group once it has registered).
const PROTOCOLS: &[&str] = &[
    "auto",
    "ack",
    "nak-poll",
    "ring",
    "tree",
    "tcp-direct",
    "tcp-tree",
    "tcp-binomial",
    "tcp-chain",
    "tcp-bintree",
    "tcp-pipeline",
];

fn protocol(py: Python<'_>, name: &str) -> PyResult<Proto> {
    use rmcast::ProtocolId as P;
    use rmcast::overlay::OverlayShape as S;
    Ok(match name {
        "auto" => Proto::Multicast(rmcast::SenderConfig::default().protocol),
        "ack" => Proto::Multicast(P::Ack),
        "nak-poll" => Proto::Multicast(P::NakPoll),
        "ring" => Proto::Multicast(P::Ring),
        "tree" => Proto::Multicast(P::Tree),
        "tcp-direct" => Proto::Overlay(|_| S::Direct),
        "tcp-tree" => Proto::Overlay(|fanout| S::Tree { fanout }),
        "tcp-binomial" => Proto::Overlay(|_| S::Binomial),
        "tcp-chain" => Proto::Overlay(|_| S::Chain),
        "tcp-bintree" => Proto::Overlay(|_| S::Bintree),
        "tcp-pipeline" => Proto::Overlay(|_| S::Pipeline),
        other => {
            return Err(invalid(
                py,
                format!(
                    "unknown protocol {other:?}; one of: {}",
                    PROTOCOLS.join(", ")
                ),
            ));
        }
    })
}

/// The sender side's configuration: multicast or overlay.
enum SendCfg {
    Multicast(Box<rmcast::SendConfig>),
    Overlay(rmcast::overlay::OverlaySendConfig),
}

fn send_config(py: Python<'_>, o: &Opts<'_, '_>, cancel: Arc<AtomicBool>) -> PyResult<SendCfg> {
    let key = o.key()?;
    let signing_key = match o.path("sign")? {
        Some(p) => Some(rmcast::load_signing_key(&p).map_err(|e| lib_err(py, e))?),
        None => None,
    };
    let receivers = to_u16(py, "receivers", o.u64("receivers")?.unwrap_or(1))?;
    let name = o.str("name")?;
    let wait = o.secs("wait")?;
    let proto_name = o.str("protocol")?.unwrap_or_else(|| "auto".into());
    match protocol(py, &proto_name)? {
        Proto::Overlay(shape) => {
            let fanout = to_u32(py, "fanout", o.u64("fanout")?.unwrap_or(2))?;
            let mut c = rmcast::overlay::OverlaySendConfig {
                shape: shape(fanout),
                receivers,
                name,
                cancel: Some(cancel),
                key,
                signing_key,
                ..Default::default()
            };
            for k in ["fec", "laggard"] {
                if o.str(k)?.is_some() {
                    return Err(invalid(
                        py,
                        format!("{k} applies to the UDP multicast protocols, not to {proto_name}"),
                    ));
                }
            }
            if let Some(ctl) = o.str("control")? {
                c.control = ctl
                    .parse::<SocketAddr>()
                    .map_err(|_| invalid(py, format!("control {ctl:?} is not ADDR:PORT")))?;
            }
            if let Some(s) = o.u64("segment_size")? {
                c.segment_size = Some(to_u32(py, "segment_size", s)?);
            }
            if let Some(w) = wait {
                c.join_wait = w;
            }
            if let Some(t) = o.secs("peer_timeout")? {
                c.inactivity = t;
            }
            if let Some(t) = o.secs("stall_timeout")? {
                if t <= c.inactivity {
                    return Err(invalid(
                        py,
                        format!(
                            "stall_timeout={} must exceed peer_timeout={} (a dead node is named first)",
                            t.as_secs_f64(),
                            c.inactivity.as_secs_f64()
                        ),
                    ));
                }
                c.stall_timeout = Some(t);
            }
            Ok(SendCfg::Overlay(c))
        }
        Proto::Multicast(id) => {
            let mut c = rmcast::SendConfig {
                group: o.group(py)?,
                iface: o.iface(py)?,
                cancel: Some(cancel),
                name,
                signing_key,
                ..Default::default()
            };
            if let Some(t) = o.u64("ttl")? {
                c.ttl = to_u32(py, "ttl", t)?;
            }
            if let Some(l) = o.f64("loss")? {
                c.loss = l;
            }
            if let Some(b) = o.u64("socket_buffer")? {
                c.socket_buffer_bytes = usize::try_from(b).unwrap_or(usize::MAX);
            }
            let p = &mut c.proto;
            p.protocol = id;
            p.receivers = receivers;
            p.group_key = key;
            if let Some(w) = wait {
                p.join_wait = w;
            }
            if let Some(s) = o.u64("packet_size")? {
                p.packet_size = usize::try_from(s).unwrap_or(usize::MAX);
            }
            if let Some(w) = o.u64("window")? {
                p.window = to_u32(py, "window", w)?;
            }
            if let Some(t) = o.secs("peer_timeout")? {
                p.peer_timeout = t;
            }
            if let Some(t) = o.secs("stall_timeout")? {
                p.stall_timeout = Some(t);
            }
            let fec = o.str("fec")?;
            if let Some(f) = &fec {
                p.fec = fec_shape(py, f)?;
            }
            // "auto" chooses for the group that registers, keeping what
            // the caller fixed (the CLI's --protocol auto).
            let window_given = o.u64("window")?.is_some();
            p.auto = (proto_name == "auto").then(|| rmcast::AutoConfig {
                keep_window: window_given,
                keep_fec: fec.is_some(),
                keep_poll_interval: false,
            });
            p.rate_bits_per_s = o.u64("rate")?;
            p.laggard = laggard(py, o.str("laggard")?.as_deref(), o.secs("laggard_after")?)?;
            p.validate()
                .map_err(|e| lib_err(py, rmcast::Error::Config(e)))?;
            Ok(SendCfg::Multicast(Box::new(c)))
        }
    }
}

/// `laggard="tcp"|"eject"|"wait"` and `laggard_after` (seconds), as
/// `rmcast send --laggard` and `--laggard-after`; unset: the library's
/// `wait` (`after` defaults to the CLI's 2 s).
fn laggard(
    py: Python<'_>,
    mode: Option<&str>,
    after: Option<Duration>,
) -> PyResult<rmcast::Laggard> {
    let mode = mode.unwrap_or("wait");
    rmcast::Laggard::from_setting(mode, after).map_err(|e| {
        let after = after.map_or_else(String::new, |a| {
            format!(", laggard_after={}", a.as_secs_f64())
        });
        invalid(py, format!("laggard={mode:?}{after}: {e}"))
    })
}

/// `fec="K:P"`, `"K:P:D"` (or `"off"`): the block shape, as `rmcast send --fec`.
fn fec_shape(py: Python<'_>, s: &str) -> PyResult<Option<rmcast::FecShape>> {
    rmcast::FecShape::from_setting(s).map_err(|e| invalid(py, format!("fec={s:?}: {e}")))
}

// ---------------------------------------------------------------- reports

fn auth_dict<'py>(
    py: Python<'py>,
    a: &rmcast::AuthStats,
    sealed: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("sealed", sealed)?;
    d.set_item("opened", a.opened)?;
    d.set_item("refused", a.refused())?;
    d.set_item("unsealed", a.unsealed)?;
    d.set_item("no_key", a.no_key)?;
    d.set_item("malformed", a.malformed)?;
    d.set_item("wrong_key", a.wrong_key)?;
    d.set_item("unknown_session", a.unknown_session)?;
    d.set_item("replayed", a.replayed)?;
    d.set_item("too_old", a.too_old)?;
    d.set_item("forged", a.forged)?;
    Ok(d)
}

/// The fields of `rmcast send --json`, plus `members` (every admitted
/// receiver) and `session`.
fn send_dict<'py>(py: Python<'py>, r: &rmcast::SendReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let members = PyList::empty(py);
    let failures = PyList::empty(py);
    let caught_up = PyList::empty(py);
    for m in &r.members {
        let md = PyDict::new(py);
        md.set_item("rank", m.rank)?;
        md.set_item("name", &m.name)?;
        md.set_item("addr", m.addr.to_string())?;
        md.set_item("verified", m.verified)?;
        md.set_item("reason", m.reason.as_deref())?;
        md.set_item("caught_up_from", m.caught_up_from)?;
        members.append(&md)?;
        if let Some(from) = m.caught_up_from {
            let c = PyDict::new(py);
            c.set_item("rank", m.rank)?;
            c.set_item("name", &m.name)?;
            c.set_item("addr", m.addr.to_string())?;
            c.set_item("from_bytes", from)?;
            c.set_item("verified", m.verified)?;
            caught_up.append(c)?;
        }
        if !m.verified {
            let f = PyDict::new(py);
            f.set_item("rank", m.rank)?;
            f.set_item("name", &m.name)?;
            f.set_item("addr", m.addr.to_string())?;
            f.set_item("reason", m.reason.as_deref().unwrap_or("did not confirm"))?;
            failures.append(f)?;
        }
    }
    let per_data = if r.data_packets == 0 {
        0.0
    } else {
        r.control_packets as f64 / r.data_packets as f64
    };
    d.set_item("protocol", &r.protocol)?;
    d.set_item("fec", rmcast::auto::fec_text(r.fec))?;
    d.set_item("auto", r.auto.as_ref().map(ToString::to_string))?;
    d.set_item("receivers", r.receivers)?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("seconds", r.seconds)?;
    d.set_item("goodput_mbps", r.goodput_mbps)?;
    d.set_item("verified", r.verified)?;
    d.set_item("data_packets", r.data_packets)?;
    d.set_item("retransmitted_packets", r.retransmitted_packets)?;
    d.set_item("parity_packets", r.stats.parity_packets)?;
    d.set_item("control_packets", r.control_packets)?;
    d.set_item("control_per_data_packet", per_data)?;
    d.set_item("skipped_bytes", r.skipped_bytes)?;
    d.set_item("acks", r.stats.acks)?;
    d.set_item("naks", r.stats.naks)?;
    d.set_item("timeouts", r.stats.timeouts)?;
    d.set_item("repolls", r.stats.repolls)?;
    d.set_item("unicast_repairs", r.stats.unicast_repairs)?;
    d.set_item("multicast_repairs", r.stats.multicast_repairs)?;
    d.set_item("group_naks", r.stats.group_naks)?;
    d.set_item("group_packets", r.stats.group_packets)?;
    d.set_item("group_sent", r.stats.group_sent)?;
    d.set_item("auth", auth_dict(py, &r.stats.auth, r.sealed)?)?;
    d.set_item("auth_failures", r.auth_failures.clone())?;
    d.set_item("ok", r.ok)?;
    d.set_item("error", r.error.as_deref())?;
    d.set_item("failures", failures)?;
    d.set_item("members", members)?;
    d.set_item("caught_up", caught_up)?;
    d.set_item("session", r.session.to_string())?;
    d.set_item("data_seconds", r.data_seconds)?;
    Ok(d)
}

/// The fields of `rmcast recv --json`.
fn recv_dict<'py>(py: Python<'py>, r: &rmcast::RecvReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("ok", r.verified)?;
    d.set_item("name", &r.name)?;
    d.set_item("path", r.path.as_ref().map(|p| p.display().to_string()))?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("seconds", r.seconds)?;
    d.set_item("goodput_mbps", r.goodput_mbps)?;
    d.set_item("rank", r.rank)?;
    d.set_item("session", r.session.map(|s| s.to_string()))?;
    d.set_item("verified", r.verified)?;
    d.set_item("data_packets", r.stats.data_packets)?;
    d.set_item("duplicates", r.stats.duplicates)?;
    d.set_item("acks", r.stats.acks)?;
    d.set_item("naks", r.stats.naks)?;
    d.set_item("malformed", r.stats.malformed)?;
    d.set_item("foreign", r.stats.foreign)?;
    let a = &r.stats.auth;
    d.set_item("auth", auth_dict(py, a, a.opened > 0 || a.sealed > 0)?)?;
    d.set_item("rate_naks", r.stats.rate_naks)?;
    d.set_item("rate_naks_heard", r.stats.rate_naks_heard)?;
    d.set_item("naks_suppressed", r.stats.naks_suppressed)?;
    d.set_item("replaced", r.replaced)?;
    let tree = match r.tree {
        Some(t) => {
            let td = PyDict::new(py);
            td.set_item("files", t.files)?;
            td.set_item("dirs", t.dirs)?;
            td.set_item("symlinks", t.symlinks)?;
            Some(td)
        }
        None => None,
    };
    d.set_item("tree", tree)?;
    d.set_item("held_bytes", r.held_bytes)?;
    d.set_item("group_ok", r.group.as_ref().map(Result::is_ok))?;
    d.set_item(
        "group_error",
        r.group.as_ref().and_then(|g| g.as_ref().err()),
    )?;
    Ok(d)
}

// ---------------------------------------------------------------- send / recv

/// Sends one object: `source` is a path (`str`) or any object with the
/// buffer protocol (read in place, never copied; it must stay unchanged
/// until the call returns). Returns the report's dict; remote failures are
/// in it (`ok`, `failures`), local ones raise.
#[pyfunction]
#[pyo3(signature = (source, opts, cancel=None))]
fn send<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    opts: &Bound<'py, PyDict>,
    cancel: Option<&Bound<'py, CancelToken>>,
) -> PyResult<Bound<'py, PyDict>> {
    let flag = cancel_flag(cancel);
    let o = Opts { d: opts };
    let cfg = send_config(py, &o, flag.clone())?;
    let result = if source.is_instance_of::<PyString>() {
        let path = PathBuf::from(source.extract::<String>()?);
        run_blocking(py, &flag, move || match &cfg {
            SendCfg::Multicast(c) => rmcast::send_path(&path, c, None),
            SendCfg::Overlay(c) => rmcast::overlay::send_file(&path, c, None),
        })?
    } else {
        let buf = Buffer::get(source)?;
        let name = o.str("name")?.unwrap_or_else(|| "object".into());
        // The buffer stays acquired until the call returned; writes by
        // other Python threads meanwhile are the caller's to avoid.
        let data = buf.as_slice();
        let r = run_blocking(py, &flag, move || match &cfg {
            SendCfg::Multicast(c) => rmcast::send_bytes(&name, data, c, None),
            SendCfg::Overlay(c) => rmcast::overlay::send_bytes(&name, data, c, None),
        })?;
        drop(buf);
        r
    };
    let report = result.map_err(|e| lib_err(py, e))?;
    send_dict(py, &report)
}

/// Received bytes owned by Rust (the library's mapping of the in-memory
/// file they arrived in); the Python side exposes them without a copy
/// through a ctypes array at `address()`.
#[pyclass(module = "rmcast._rmcast", frozen)]
struct RecvBuffer {
    data: rmcast::Received,
}

#[pymethods]
impl RecvBuffer {
    /// Address of the first byte (valid while this object lives).
    fn address(&self) -> usize {
        self.data.as_ptr() as usize
    }
    fn __len__(&self) -> usize {
        self.data.len()
    }
    /// A copy as `bytes`.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.data)
    }
}

fn recv_config(
    py: Python<'_>,
    o: &Opts<'_, '_>,
    cancel: Arc<AtomicBool>,
) -> PyResult<rmcast::RecvConfig> {
    let mut c = rmcast::RecvConfig {
        group: o.group(py)?,
        iface: o.iface(py)?,
        cancel: Some(cancel),
        group_key: o.key()?,
        listen_timeout: o.secs("listen_timeout")?,
        ..Default::default()
    };
    if let Some(d) = o.path("out_dir")? {
        c.out_dir = d;
    }
    if let Some(n) = o.str("name")? {
        c.name = n;
    }
    if let Some(t) = o.secs("sender_timeout")? {
        c.sender_timeout = t;
    }
    if let Some(m) = o.u64("max_bytes")? {
        c.max_bytes = Some(m);
    }
    if let Some(l) = o.f64("loss")? {
        c.loss = l;
    }
    c.store_rate = o.u64("store_rate")?;
    if let Some(b) = o.u64("socket_buffer")? {
        c.socket_buffer_bytes = usize::try_from(b).unwrap_or(usize::MAX);
    }
    if let Some(trust) = o.item("trust")? {
        for p in trust.try_iter()? {
            let p: PathBuf = p?.extract()?;
            c.trust
                .push(rmcast::load_public_key(&p).map_err(|e| lib_err(py, e))?);
        }
    }
    Ok(c)
}

/// Receives one object: into `opts["out_dir"]` (returns `(report, None)`)
/// or, with `memory=True`, into memory (returns `(report, RecvBuffer)`).
/// With `opts["sender"]` (ADDR:PORT) it joins a TCP overlay (tcp-*
/// protocols; to a directory only).
#[pyfunction]
#[pyo3(signature = (opts, memory=false, cancel=None))]
fn recv<'py>(
    py: Python<'py>,
    opts: &Bound<'py, PyDict>,
    memory: bool,
    cancel: Option<&Bound<'py, CancelToken>>,
) -> PyResult<(Bound<'py, PyDict>, Option<RecvBuffer>)> {
    let flag = cancel_flag(cancel);
    let o = Opts { d: opts };
    let cfg = recv_config(py, &o, flag.clone())?;
    if let Some(sender) = o.str("sender")? {
        if memory {
            return Err(invalid(py, "tcp-* receivers store to a directory only"));
        }
        let ov = rmcast::overlay::OverlayRecvConfig {
            sender: sender
                .parse()
                .map_err(|_| invalid(py, format!("sender {sender:?} is not ADDR:PORT")))?,
            out_dir: cfg.out_dir.clone(),
            name: cfg.name.clone(),
            connect_timeout: cfg.listen_timeout,
            inactivity: cfg.sender_timeout,
            cancel: Some(flag.clone()),
            key: cfg.group_key.clone(),
            trust: cfg.trust.clone(),
            max_bytes: cfg.max_bytes,
            ..Default::default()
        };
        let r = run_blocking(py, &flag, move || rmcast::overlay::recv_to_dir(&ov, None))?
            .map_err(|e| lib_err(py, e))?;
        return Ok((recv_dict(py, &r)?, None));
    }
    if memory {
        let (r, data) = run_blocking(py, &flag, move || rmcast::recv_to_memory(&cfg, None))?
            .map_err(|e| lib_err(py, e))?;
        Ok((recv_dict(py, &r)?, Some(RecvBuffer { data })))
    } else {
        let r = run_blocking(py, &flag, move || rmcast::recv_to_dir(&cfg, None))?
            .map_err(|e| lib_err(py, e))?;
        Ok((recv_dict(py, &r)?, None))
    }
}

// ---------------------------------------------------------------- streams

/// An endpoint whose blocking operations run on a worker thread that owns
/// it for the time of the operation. After Ctrl-C the operation goes on;
/// its outcome waits in `Busy` for the next call.
enum Endpoint<T> {
    Idle(T),
    Busy(mpsc::Receiver<(T, Outcome)>),
    Closed,
}

/// An endpoint behind a mutex: Python objects must be `Sync`; every
/// method takes `&mut self`, so the lock is never contended.
struct Locked<T>(std::sync::Mutex<Endpoint<T>>);

impl<T> Locked<T> {
    fn new(t: T) -> Self {
        Self(std::sync::Mutex::new(Endpoint::Idle(t)))
    }
    fn get(&mut self) -> &mut Endpoint<T> {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}

/// What an operation on a stream endpoint returned.
enum Outcome {
    Unit(Result<(), rmcast::Error>),
    Count(Result<Option<usize>, rmcast::Error>),
    Message(Result<Option<Vec<u8>>, rmcast::Error>),
}

impl<T: Send + 'static> Endpoint<T> {
    /// Waits for the operation in flight (if any) and returns the endpoint
    /// with that operation's outcome.
    fn settle(&mut self, py: Python<'_>) -> PyResult<Option<(T, Option<Outcome>)>> {
        match std::mem::replace(self, Endpoint::Closed) {
            Endpoint::Closed => Ok(None),
            Endpoint::Idle(t) => Ok(Some((t, None))),
            Endpoint::Busy(mut rx) => loop {
                let (back, got) = py.detach(move || {
                    let got = rx.recv_timeout(SLICE);
                    (rx, got)
                });
                rx = back;
                match got {
                    Ok((t, out)) => return Ok(Some((t, Some(out)))),
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        return Err(PyRuntimeError::new_err(
                            "rmcast: the stream's worker thread panicked",
                        ));
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if let Err(e) = py.check_signals() {
                            *self = Endpoint::Busy(rx);
                            return Err(e);
                        }
                    }
                }
            },
        }
    }

    /// Runs `op` on the endpoint on a worker thread and waits for it
    /// (interruptibly). An operation interrupted earlier is waited for
    /// first; if it failed, its error is raised and `op` does not run.
    fn run(
        &mut self,
        py: Python<'_>,
        what: &str,
        op: impl FnOnce(&mut T) -> Outcome + Send + 'static,
    ) -> PyResult<Outcome> {
        let Some((mut t, earlier)) = self.settle(py)? else {
            return Err(py_error(
                py,
                "RmcastError",
                format!("the stream is closed ({what})"),
            ));
        };
        if let Some(Err(e)) = earlier.map(|out| unit(py, out)) {
            *self = Endpoint::Idle(t);
            return Err(e);
        }
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let out = op(&mut t);
            let _ = tx.send((t, out));
        });
        *self = Endpoint::Busy(rx);
        match self.settle(py)? {
            Some((t, Some(out))) => {
                *self = Endpoint::Idle(t);
                Ok(out)
            }
            _ => unreachable!("a busy endpoint settles with an outcome"),
        }
    }
}

fn unit(py: Python<'_>, o: Outcome) -> PyResult<()> {
    match o {
        Outcome::Unit(r) => r.map_err(|e| lib_err(py, e)),
        Outcome::Count(r) => r.map(|_| ()).map_err(|e| lib_err(py, e)),
        Outcome::Message(r) => r.map(|_| ()).map_err(|e| lib_err(py, e)),
    }
}

/// The sending end of a PRMP message stream.
#[pyclass(module = "rmcast._rmcast")]
struct StreamSender {
    ep: Locked<rmcast::stream::StreamSender>,
    max_message: usize,
}

fn members_list<'py>(
    py: Python<'py>,
    members: &[rmcast::stream::MemberInfo],
) -> PyResult<Bound<'py, PyList>> {
    let l = PyList::empty(py);
    for m in members {
        l.append(format!("{m:?}"))?;
    }
    Ok(l)
}

#[pymethods]
impl StreamSender {
    /// Opens a stream on `opts["group"]` announcing for `opts["wait"]`
    /// seconds and admitting `opts["receivers"]` receivers.
    #[new]
    fn new(py: Python<'_>, opts: &Bound<'_, PyDict>) -> PyResult<Self> {
        use rmcast::stream::{Admission, StreamSendConfig};
        let o = Opts { d: opts };
        let wanted = to_u16(py, "receivers", o.u64("receivers")?.unwrap_or(1))?;
        if wanted == 0 {
            return Err(invalid(py, "receivers must be at least 1"));
        }
        let key = o.key()?;
        let mut cfg = StreamSendConfig {
            group: o.group(py)?,
            iface: o.iface(py)?,
            wanted: Some(usize::from(wanted)),
            group_key: key.clone(),
            ..Default::default()
        };
        let p = &mut cfg.proto;
        p.admission = Admission::Announce {
            duration: o.secs("wait")?.unwrap_or(Duration::from_secs(30)),
            interval: Duration::from_millis(100),
            receivers_max: wanted,
        };
        p.group_key = key;
        if let Some(m) = o.u64("max_message")? {
            p.message_bytes_max = to_u32(py, "max_message", m)?;
        }
        if let Some(b) = o.u64("buffer_packets")? {
            p.send_buffer_packets = to_u32(py, "buffer_packets", b)?;
        }
        let max_message = p.message_bytes_max as usize;
        let s = rmcast::stream::StreamSender::open(cfg).map_err(|e| lib_err(py, e))?;
        Ok(Self {
            ep: Locked::new(s),
            max_message,
        })
    }

    /// The largest message `send` takes.
    #[getter]
    fn max_message(&self) -> usize {
        self.max_message
    }

    /// Blocks until admission is over (at most `timeout` seconds) and
    /// returns how many receivers joined, or None on timeout.
    #[pyo3(signature = (timeout=None))]
    fn wait(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<usize>> {
        let t = timeout.map(Duration::from_secs_f64);
        let out = self
            .ep
            .get()
            .run(py, "wait", move |s| Outcome::Count(s.wait_established(t)))?;
        match out {
            Outcome::Count(r) => r.map_err(|e| lib_err(py, e)),
            _ => unreachable!(),
        }
    }

    /// Sends one message (copied into the stream's buffer; blocks while
    /// the buffer is full).
    fn send(&mut self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        let msg = Buffer::get(data)?.as_slice().to_vec();
        let n = msg.len();
        let out = self
            .ep
            .get()
            .run(py, "send", move |s| Outcome::Unit(s.send(&msg)))?;
        unit(py, out)?;
        Ok(n)
    }

    /// Ends the stream, waits until every remaining receiver confirmed it
    /// holds everything, and returns the report's dict.
    fn close<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some((s, earlier)) = self.ep.get().settle(py)? else {
            return Ok(None);
        };
        if let Some(e) = earlier {
            // Still close the stream below; a failed earlier send shows in the report.
            let _ = unit(py, e);
        }
        let (tx, mut rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(s.close());
        });
        let r = loop {
            let (back, got) = py.detach(move || {
                let got = rx.recv_timeout(SLICE);
                (rx, got)
            });
            rx = back;
            match got {
                Ok(r) => break r,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(PyRuntimeError::new_err("rmcast: the close thread panicked"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
            }
        };
        let r = r.map_err(|e| lib_err(py, e))?;
        let d = PyDict::new(py);
        d.set_item("ok", r.ok)?;
        d.set_item("session", r.session.to_string())?;
        d.set_item("established", r.established)?;
        d.set_item("members", members_list(py, &r.members)?)?;
        let removed = PyList::empty(py);
        for (m, why) in &r.removed {
            removed.append(format!("{m:?}: {why:?}"))?;
        }
        d.set_item("removed", removed)?;
        d.set_item("left", members_list(py, &r.left)?)?;
        d.set_item("messages", r.messages)?;
        d.set_item("bytes", r.bytes)?;
        d.set_item("seconds", r.seconds)?;
        d.set_item("goodput_mbps", r.goodput_mbps)?;
        d.set_item("auth_failures", r.auth_failures)?;
        Ok(Some(d))
    }
}

/// The receiving end of a PRMP message stream.
#[pyclass(module = "rmcast._rmcast")]
struct StreamReceiver {
    ep: Locked<rmcast::stream::StreamReceiver>,
}

#[pymethods]
impl StreamReceiver {
    /// Joins the group `opts["group"]` and waits (in `read`) for a session.
    #[new]
    fn new(py: Python<'_>, opts: &Bound<'_, PyDict>) -> PyResult<Self> {
        use rmcast::stream::StreamRecvConfig;
        let o = Opts { d: opts };
        let mut cfg = StreamRecvConfig {
            group: o.group(py)?,
            iface: o.iface(py)?,
            connect_timeout: o.secs("listen_timeout")?,
            group_key: o.key()?,
            ..Default::default()
        };
        cfg.proto.group_key = cfg.group_key.clone();
        if let Some(t) = o.secs("sender_timeout")? {
            cfg.proto.sender_timeout = t;
        }
        if let Some(n) = o.str("name")? {
            cfg.proto.name = n;
        }
        if let Some(b) = o.u64("buffer_packets")? {
            cfg.proto.buffer_packets = to_u32(py, "buffer_packets", b)?;
        }
        let r = rmcast::stream::StreamReceiver::open(cfg).map_err(|e| lib_err(py, e))?;
        Ok(Self { ep: Locked::new(r) })
    }

    /// The next whole message, or None at the end of the stream.
    fn read<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let msg = match self.ep.get().settle(py)? {
            // A read interrupted by Ctrl-C finished meanwhile: its message is this one.
            Some((r, Some(Outcome::Message(m)))) => {
                *self.ep.get() = Endpoint::Idle(r);
                m.map_err(|e| lib_err(py, e))?
            }
            Some((r, _)) => {
                *self.ep.get() = Endpoint::Idle(r);
                let out = self
                    .ep
                    .get()
                    .run(py, "read", |r| Outcome::Message(r.read()))?;
                match out {
                    Outcome::Message(m) => m.map_err(|e| lib_err(py, e))?,
                    _ => unreachable!(),
                }
            }
            None => return Ok(None),
        };
        Ok(msg.map(|m| PyBytes::new(py, &m)))
    }

    /// Leaves the session (or lingers if the stream is over) and returns
    /// what was received as a dict.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let r = match std::mem::replace(self.ep.get(), Endpoint::Closed) {
            Endpoint::Idle(r) => r,
            // A read is still in flight (interrupted): let it end by itself.
            Endpoint::Busy(_) | Endpoint::Closed => return Ok(None),
        };
        let r = py.detach(move || r.finish());
        let d = PyDict::new(py);
        d.set_item("ok", r.complete && r.failure.is_none())?;
        d.set_item("session", r.session.map(|s| s.to_string()))?;
        d.set_item("rank", r.rank)?;
        d.set_item("messages", r.messages)?;
        d.set_item("bytes", r.bytes)?;
        d.set_item("seconds", r.seconds)?;
        d.set_item("goodput_mbps", r.goodput_mbps)?;
        d.set_item("complete", r.complete)?;
        d.set_item("failure", r.failure)?;
        d.set_item("auth_failures", r.auth_failures)?;
        Ok(Some(d))
    }
}

// ---------------------------------------------------------------- misc

/// A random group on 239.77.0.1 (random port): parallel sessions do not meet.
#[pyfunction]
fn random_group() -> String {
    rmcast::random_group().to_string()
}

/// Bytes in `text` ("64MiB", "4k", "1000").
#[pyfunction]
fn parse_size(py: Python<'_>, text: &str) -> PyResult<u64> {
    rmcast::parse_size(text).map_err(|e| invalid(py, e))
}

/// Bits per second in `text` ("90mbit", "1gbit").
#[pyfunction]
fn parse_rate(py: Python<'_>, text: &str) -> PyResult<u64> {
    rmcast::parse_rate(text).map_err(|e| invalid(py, e))
}

/// Seconds in `text` ("50ms", "10s", "2m").
#[pyfunction]
fn parse_duration(py: Python<'_>, text: &str) -> PyResult<f64> {
    rmcast::parse_duration(text)
        .map(|d| d.as_secs_f64())
        .map_err(|e| invalid(py, e))
}

#[pymodule]
fn _rmcast(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CancelToken>()?;
    m.add_class::<Key>()?;
    m.add_class::<RecvBuffer>()?;
    m.add_class::<StreamSender>()?;
    m.add_class::<StreamReceiver>()?;
    m.add_function(wrap_pyfunction!(keygen, m)?)?;
    m.add_function(wrap_pyfunction!(send, m)?)?;
    m.add_function(wrap_pyfunction!(recv, m)?)?;
    m.add_function(wrap_pyfunction!(random_group, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(parse_rate, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration, m)?)?;
    m.add("PROTOCOLS", PROTOCOLS.to_vec())?;
    m.add("KEY_FILE_ENV", rmcast::KEY_FILE_ENV)?;
    m.add("KEY_HOWTO", rmcast::KEY_HOWTO)?;
    Ok(())
}
