//! rmcast: reliable multicast file transfer over UDP.
//!
//! This crate is the runtime and the public library API. It drives the
//! sans-IO state machines of [`rmcast_proto`] with real non-blocking UDP
//! sockets (one `mio` event loop per sender or receiver, one thread each),
//! reads the object from a memory-mapped file or a byte slice, hashes it with
//! BLAKE3, and on the receiving side stores it in a temporary file that is
//! renamed into place only after its hash matches.
//!
//! - [`send_file`] / [`send_bytes`]: announce a transfer on a multicast
//!   group, wait for `proto.receivers` receivers, send, and report how each
//!   fared ([`SendReport`]).
//! - [`recv_to_dir`] / [`recv_to_vec`]: join the next transfer announced on a
//!   group and store the object in a directory or in memory ([`RecvReport`]).
//! - [`demo`]: one sender and N receiver threads over loopback, with a
//!   byte-for-byte check of every copy.
//! - [`parse_size`] / [`parse_rate`] / [`parse_duration`]: the size, rate
//!   and duration syntax of the CLI (and of the lab's files).
//!
//! Defaults keep traffic on the machine: multicast leaves through
//! `127.0.0.1` with TTL 1. Every long-running call takes an optional cancel
//! flag (checked at least every 100 ms) and an optional progress callback
//! (called at most about ten times a second).
//!
//! It is not the protocol (see `rmcast-proto`), not the packet format (see
//! `rmcast-wire`) and not the command line (see `rmcast-cli`).
//!
//! I/O is batched on Linux: consecutive data packets to one destination
//! leave in one UDP GSO send (`UDP_SEGMENT`), or one `sendmmsg` where GSO
//! is refused, and sockets are read with `recvmmsg` and `UDP_GRO`, each
//! coalesced buffer split back into datagrams before the machine sees them.
//! `RMCAST_NO_GSO=1` and `RMCAST_NO_GRO=1` force the fallbacks.
//!
//! ```no_run
//! use rmcast::{RecvConfig, SendConfig, recv_to_vec, send_bytes};
//! let group = rmcast::random_group();
//! let rc = RecvConfig { group, ..RecvConfig::default() };
//! let receiver = std::thread::spawn(move || recv_to_vec(&rc, None));
//! let report = send_bytes("hello.txt", b"hello", &SendConfig { group, ..SendConfig::default() }, None)?;
//! assert!(report.ok);
//! let (_, bytes) = receiver.join().unwrap()?;
//! assert_eq!(bytes, b"hello");
//! # Ok::<(), rmcast::Error>(())
//! ```

#![warn(missing_docs)]

mod batch;
mod catch_up;
mod demo;
pub mod hybrid;
mod json;
mod keys;
mod name;
mod net;
pub mod overlay;
mod parse;
mod receiver;
mod relay;
mod sender;
mod storage;
pub mod stream;
mod tree;
mod udp;

pub use demo::{DemoConfig, DemoReport, demo, random_group};
pub use json::auth_json;
pub use keys::{
    KEY_FILE_ENV, KEY_HOWTO, PublicKey, SigningKey, generate_key, generate_signing_key, load_key,
    load_public_key, load_signing_key, public_key_file, sign_object, signature_trusted, write_key,
    write_signing_key,
};
pub use name::safe_relative_path;
pub use parse::{HumanDuration, parse_duration, parse_rate, parse_size};
pub use receiver::{
    Received, recv_sessions_to_dir, recv_to_dir, recv_to_memory, recv_to_vec, serve_to_dir,
};
pub use relay::{RelayConfig, RelayReport, relay};
pub use rmcast_proto::auto;
pub use rmcast_proto::security::{AuthStats, GroupKey, KeyFileError, KeyId};
pub use rmcast_proto::{
    AutoChoice, AutoConfig, ConfigError, FEC_MAX_BLOCK, FecShape, HASH_LEN, HuntParams, Laggard,
    MemberOutcome, ProtocolId, RateControl, RateGroupConfig, ReceiverStats, Repair, SenderConfig,
    SenderEvent, SenderStats, SessionId, Status, TreeShape,
};
pub use sender::{send_bytes, send_file, send_path};
pub use tree::{CHUNK_SIZE, MAP_MIN, TreeCounts};

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The group receivers and senders use when none is given: 239.77.0.1:7700.
pub const DEFAULT_GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 77, 0, 1), 7700);
/// Socket buffer size asked for by default (4 MiB).
pub const DEFAULT_SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// How to send one object.
#[derive(Clone, Debug)]
pub struct SendConfig {
    /// Multicast group and port of the session.
    pub group: SocketAddrV4,
    /// Local interface address: the socket binds to it and multicast leaves through it.
    pub iface: Ipv4Addr,
    /// Multicast TTL (1 keeps packets on the local network segment).
    pub ttl: u32,
    /// Protocol settings (protocol, receivers to wait for, window, timers, rate).
    pub proto: SenderConfig,
    /// Test knob: fraction of data packets (0..=1) every receiver drops on
    /// purpose; sent in the offer. Zero in production.
    pub loss: f64,
    /// Kernel socket buffer size to ask for, in bytes.
    pub socket_buffer_bytes: usize,
    /// Raise to stop: the sender aborts the session and says goodbye.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Name receivers store the object under; `None`: the file's name.
    pub name: Option<String>,
    /// Under Hunt's rate control: write the controller's trace (time,
    /// spacing, rate, state, packets sent, RTT estimate) to this CSV file.
    pub rate_trace: Option<PathBuf>,
    /// Sign the object (its hash, size and name) with this Ed25519 key:
    /// receivers that `trust` its public half accept only signed content.
    pub signing_key: Option<Arc<SigningKey>>,
    /// Told of every event of the session as it happens (multicast
    /// protocols; the TCP overlays report at the end only).
    pub on_event: Option<EventHook>,
}

impl Default for SendConfig {
    fn default() -> Self {
        Self {
            group: DEFAULT_GROUP,
            iface: Ipv4Addr::LOCALHOST,
            ttl: 1,
            proto: SenderConfig::default(),
            loss: 0.0,
            socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            cancel: None,
            name: None,
            rate_trace: None,
            signing_key: None,
            on_event: None,
        }
    }
}

/// A callback for a sender's events as they happen (a receiver joined,
/// verified, failed; the session started short; it finished), for
/// dashboards and scripts (`rmcast send --json-events`). Called on the
/// sender's thread: it must return quickly.
#[derive(Clone)]
pub struct EventHook(pub Arc<dyn Fn(&SenderEvent) + Send + Sync>);

impl std::fmt::Debug for EventHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventHook")
    }
}

/// How to receive one object.
#[derive(Clone, Debug)]
pub struct RecvConfig {
    /// Multicast group and port to listen on.
    pub group: SocketAddrV4,
    /// Local interface address to join the group on and send feedback from.
    pub iface: Ipv4Addr,
    /// Directory the object is stored in (created if missing) by [`recv_to_dir`].
    pub out_dir: PathBuf,
    /// Name shown in the sender's report.
    pub name: String,
    /// Test knob: fraction of data packets (0..=1) to drop on purpose.
    pub loss: f64,
    /// Seed of the test-loss generator (mixed with the rank).
    pub seed: u64,
    /// Give up when the sender is silent this long.
    pub sender_timeout: Duration,
    /// Give up when no session is announced within this time (`None`: wait forever).
    pub listen_timeout: Option<Duration>,
    /// Join only this session (`None`: the first one announced).
    pub session: Option<SessionId>,
    /// Kernel receive buffer size to ask for, in bytes.
    pub socket_buffer_bytes: usize,
    /// Raise to stop: the receiver leaves the session and removes partial files.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Refuse objects larger than this many bytes (`Status::TooLarge`).
    pub max_bytes: Option<u64>,
    /// Refuse an object whose name is already taken under `out_dir`
    /// instead of replacing that file with the verified new version.
    pub no_clobber: bool,
    /// A directory tree is merged into the directory of its name already
    /// under `out_dir`, file by file (files it does not name are kept),
    /// instead of replacing that directory whole in one exchange.
    pub merge_tree: bool,
    /// Multicast TTL of the feedback socket (feedback itself is unicast).
    pub ttl: u32,
    /// Hunt's multicast rate NACK (several senders on one group): on a new
    /// gap in a sender's stream, also multicast a `RateNak` so every sender
    /// backs off; at most one per this interval per sender. `None`: off.
    pub rate_nak_interval: Option<Duration>,
    /// The group key every datagram must be sealed under (see
    /// [`load_key`]); `None` runs insecure, which the sender must do too.
    pub group_key: Option<Arc<GroupKey>>,
    /// Accept only objects signed by one of these keys (`rmcast recv
    /// --trust`): an unsigned object, or one signed by anyone else, even a
    /// holder of the group key, is refused (`Status::Untrusted`) and not
    /// kept. Empty: signatures are not checked.
    pub trust: Vec<PublicKey>,
    /// Test knob: store at most this many bytes per second, as a slow disk
    /// would (over multicast and over a `--laggard tcp` catch-up alike).
    /// `None`: as fast as they come.
    pub store_rate: Option<u64>,
}

impl Default for RecvConfig {
    fn default() -> Self {
        Self {
            group: DEFAULT_GROUP,
            iface: Ipv4Addr::LOCALHOST,
            out_dir: PathBuf::from("."),
            name: default_receiver_name(),
            loss: 0.0,
            seed: 0,
            sender_timeout: Duration::from_secs(10),
            listen_timeout: None,
            session: None,
            socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            cancel: None,
            max_bytes: None,
            no_clobber: false,
            merge_tree: false,
            ttl: 1,
            rate_nak_interval: None,
            group_key: None,
            trust: Vec::new(),
            store_rate: None,
        }
    }
}

/// A progress report for a bar: bytes done of the total, and what is happening.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes acknowledged by every receiver (sender) or held in order (receiver).
    pub done_bytes: u64,
    /// Size of the object (0 until a receiver has seen the offer).
    pub total_bytes: u64,
    /// "waiting for receivers", "listening", "sending", "receiving", "confirming", "verifying", "done", ...
    pub phase: &'static str,
    /// A sender waiting for receivers: how many registered of how many it
    /// waits for; `None` otherwise.
    pub joined: Option<(u16, u16)>,
}

/// What a sender reports after a session.
#[derive(Clone, Debug)]
pub struct SendReport {
    /// Protocol name as the CLI spells it ("nak-poll", "tcp-chain", ...);
    /// under `--protocol auto`, the one chosen ("auto" if the session
    /// ended before the group was known).
    pub protocol: String,
    /// Receivers admitted to the session.
    pub receivers: u16,
    /// Object size in bytes.
    pub bytes: u64,
    /// Seconds from the first announcement to the last confirmation.
    pub seconds: f64,
    /// `bytes * 8 / seconds / 1e6`.
    pub goodput_mbps: f64,
    /// Receivers that confirmed a hash-verified copy.
    pub verified: usize,
    /// First transmissions of data packets.
    pub data_packets: u64,
    /// Data packets sent again.
    pub retransmitted_packets: u64,
    /// Control packets received by the sender (every non-data packet).
    pub control_packets: u64,
    /// True when every receiver verified the object.
    pub ok: bool,
    /// Session-level failure, if any (too few receivers, aborted).
    pub error: Option<String>,
    /// Every admitted receiver and how it fared.
    pub members: Vec<MemberOutcome>,
    /// Receivers expected that never registered: the session started
    /// without them (`SenderConfig::min_receivers`), so `ok` is false.
    pub missing: u16,
    /// The engine's counters.
    pub stats: SenderStats,
    /// Session id of the transfer.
    pub session: SessionId,
    /// Seconds from the moment every receiver had registered to the last confirmation.
    pub data_seconds: f64,
    /// Whether the session ran under a group key (every packet or frame
    /// sealed).
    pub sealed: bool,
    /// Peers whose packets or connections did not authenticate, one line
    /// each (wrong key, no key, forgeries), also when the session succeeded.
    pub auth_failures: Vec<String>,
    /// Resume and delta (trees): object bytes never sent because every
    /// receiver held them already (on a first push, only the zero padding
    /// between files, which needs no packet).
    pub skipped_bytes: u64,
    /// Block FEC in effect (`--fec`, or auto's choice).
    pub fec: Option<rmcast_proto::FecShape>,
    /// `--protocol auto`: what it chose for the group, from what, and why
    /// (`None` when the protocol was given, or the session ended before
    /// the group was known).
    pub auto: Option<rmcast_proto::AutoChoice>,
    /// A hybrid session ([`hybrid`]): who took the object over multicast
    /// and who over the TCP overlay; `None` for any other session.
    pub hybrid: Option<hybrid::HybridReport>,
}

/// What a receiver reports after a transfer.
#[derive(Clone, Debug)]
pub struct RecvReport {
    /// Where the object was stored (`None` when received into memory).
    pub path: Option<PathBuf>,
    /// The object's name as offered.
    pub name: String,
    /// Object size in bytes.
    pub bytes: u64,
    /// Seconds from accepting the offer to verifying the object.
    pub seconds: f64,
    /// `bytes * 8 / seconds / 1e6`.
    pub goodput_mbps: f64,
    /// Rank given by the sender.
    pub rank: Option<u16>,
    /// Session joined.
    pub session: Option<SessionId>,
    /// True when the bytes hashed to the offered BLAKE3 hash.
    pub verified: bool,
    /// The engine's counters.
    pub stats: ReceiverStats,
    /// Data packets dropped on purpose by the test-loss knob.
    pub test_dropped_packets: u64,
    /// A file of the same name was under the output directory: the
    /// verified object replaced it (as the new version of that path).
    pub replaced: bool,
    /// The object was a directory tree: what it held (`None`: one file).
    pub tree: Option<TreeCounts>,
    /// Resume and delta (trees): object bytes found on this receiver's
    /// disk (an earlier version, an interrupted session's staging), so
    /// never received.
    pub held_bytes: u64,
    /// The whole group's outcome, as the sender's farewell told it (UDP
    /// multicast sessions): `Ok` when every receiver it wanted verified,
    /// else the sender's words on who did not; `None` when no farewell was
    /// heard (or over a TCP overlay, whose sender tells none).
    pub group: Option<Result<(), String>>,
    /// The sender moved this receiver, far behind the group, to a TCP
    /// catch-up (`rmcast send --laggard tcp`) when it held this many bytes
    /// in order; the rest came over TCP.
    pub caught_up_from: Option<u64>,
}

/// Everything that can go wrong locally (remote failures are in the reports).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed; `context` says what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, for a human.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The protocol settings cannot work.
    #[error("invalid protocol settings: {0}")]
    Config(#[from] ConfigError),
    /// A runtime setting or argument cannot work; the text says which.
    #[error("{0}")]
    Invalid(String),
    /// This receiver refused the offered object; the text says why.
    #[error("refused the offered object: {0}")]
    Refused(String),
    /// The transfer failed; the text says why.
    #[error("transfer failed: {0}")]
    Failed(String),
    /// No session was announced on the group within the listen timeout
    /// (`RecvConfig::listen_timeout`); nothing was joined.
    #[error("{0}")]
    NoSession(String),
    /// The cancel flag was raised.
    #[error("cancelled")]
    Cancelled,
}

/// `"{hostname}:{pid}"`, the default receiver name.
#[must_use]
pub fn default_receiver_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `len` bytes; gethostname writes at most that.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let host = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".to_owned()
    };
    format!("{host}:{}", std::process::id())
}

/// The protocol's name as reports and the CLI spell it.
#[must_use]
pub fn protocol_name(p: ProtocolId) -> &'static str {
    p.cli_name()
}

fn check_loss(loss: f64) -> Result<(), Error> {
    if (0.0..=1.0).contains(&loss) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "loss {loss} is outside 0..=1 (a fraction of packets)"
        )))
    }
}

fn check_group(group: SocketAddrV4) -> Result<(), Error> {
    if !group.ip().is_multicast() {
        return Err(Error::Invalid(format!(
            "{} is not a multicast address (use 224.0.0.0/4, e.g. 239.77.0.1)",
            group.ip()
        )));
    }
    if group.port() == 0 {
        return Err(Error::Invalid("the group port must not be 0".into()));
    }
    Ok(())
}

fn goodput_mbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds / 1e6
    } else {
        0.0
    }
}
