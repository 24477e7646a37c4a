//! The sending driver: one socket, one `mio` loop, one `rmcast_proto::Sender`.

use crate::net::{self, Clock, MAX_WAIT, Outgoing, Port, Ticker};
use crate::{
    Error, Progress, SendConfig, SendReport, check_group, check_loss, goodput_mbps, protocol_name,
};
use mio::{Events, Poll, Token, Waker};
use rmcast_proto::{
    Dest, HASH_LEN, HuntState, Instant, Kind, ObjectInfo, RateControl, RateController, Sender,
    SenderEvent, Seq, SessionId,
};
use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// The event loop's wake-up when the background hash is ready.
pub(crate) const HASH_TOKEN: Token = Token(3);
/// Bytes hashed between two looks at the stop flag (about 10 ms of BLAKE3
/// on one core), so an ended session does not wait for a whole object.
const HASH_CHUNK: usize = 16 << 20;

/// The object's BLAKE3 hash and how long computing it took.
pub(crate) struct Hashed {
    pub(crate) hash: [u8; HASH_LEN],
    pub(crate) took: Duration,
    /// A relay forwards its sender's signature over the object.
    pub(crate) signature: Option<[u8; rmcast_wire::SIGNATURE_LEN]>,
}

/// A source that fills while the session runs (a relay's downstream
/// half): the bytes stored so far, and why to give up if the upstream
/// half failed. The filler wakes the loop under [`HASH_TOKEN`] after
/// each change, and sends the hash (with the upstream's signature) as
/// the hashing thread would.
#[derive(Default)]
pub(crate) struct Feed {
    pub(crate) available: AtomicU64,
    pub(crate) abort: std::sync::Mutex<Option<String>>,
}

/// Hashes `data` on the calling thread; `None` if `stop` was raised first.
/// Both runtimes (multicast and the TCP overlay) run it beside the transfer.
pub(crate) fn hash_object(data: &[u8], stop: &AtomicBool) -> Option<Hashed> {
    let start = std::time::Instant::now();
    let mut hasher = blake3::Hasher::new();
    for chunk in data.chunks(HASH_CHUNK) {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        hasher.update(chunk);
    }
    Some(Hashed {
        hash: *hasher.finalize().as_bytes(),
        took: start.elapsed(),
        signature: None,
    })
}

/// Receive buffer of the rate group socket: only the group's rate packets
/// reach it (a kernel filter drops the data), a few dozen bytes each.
const GROUP_SOCKET_BYTES: usize = 256 << 10;

/// The controller's trace as CSV (`SendConfig::rate_trace`): one row per
/// change of spacing or state, the columns of the simulator's trace
/// (`t_s,spacing_us,rate_pps,state,sent,rtt_us`). Rows are formatted into
/// a buffered writer: no allocation per row.
struct RateTrace {
    out: std::io::BufWriter<File>,
    path: std::path::PathBuf,
    last: Option<(Duration, HuntState)>,
}

impl RateTrace {
    fn create(path: &Path) -> Result<Self, Error> {
        let file = File::create(path).map_err(|source| Error::Io {
            context: format!("cannot create the rate trace {}", path.display()),
            source,
        })?;
        let mut out = std::io::BufWriter::with_capacity(64 << 10, file);
        let _ = writeln!(out, "t_s,spacing_us,rate_pps,state,sent,rtt_us");
        Ok(Self {
            out,
            path: path.to_owned(),
            last: None,
        })
    }

    fn record(&mut self, t: Duration, rc: &RateController, sent: u64) {
        let now = (rc.spacing(), rc.state());
        if self.last == Some(now) {
            return;
        }
        self.last = Some(now);
        let state = match now.1 {
            HuntState::Increase => "increase",
            HuntState::Decrease => "decrease",
        };
        let _ = writeln!(
            self.out,
            "{:.6},{:.3},{:.0},{state},{sent},{:.1}",
            t.as_secs_f64(),
            now.0.as_secs_f64() * 1e6,
            rc.rate_pps(),
            rc.rtt().as_secs_f64() * 1e6
        );
    }

    fn finish(&mut self) -> Result<(), Error> {
        self.out.flush().map_err(|source| Error::Io {
            context: format!("cannot write the rate trace {}", self.path.display()),
            source,
        })
    }
}

/// How long a cancelled sender may spend saying goodbye.
const FAREWELL_MAX: Duration = Duration::from_secs(2);

/// Sends the file at `path` to `cfg.proto.receivers` receivers on `cfg.group`.
///
/// Returns `Ok` once the session is over, also when some receivers failed
/// (`report.ok == false`, `report.members` say why); `Err` only for local
/// problems (unreadable file, sockets, configuration) or cancellation.
/// The file is memory-mapped: it must not be truncated while it is sent.
pub fn send_file(
    path: &Path,
    cfg: &SendConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<SendReport, Error> {
    let (name, map) = map_file(path, cfg.name.as_deref())?;
    run(&name, map.bytes(), cfg, progress, None)
}

/// A file's bytes, mapped read-only (an empty file needs no mapping).
pub(crate) struct Mapped(Option<memmap2::Mmap>);

impl Mapped {
    pub(crate) fn bytes(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }
}

/// Opens the regular file at `path` and maps it; the name it is offered
/// under is `name`, else its file name (which must be UTF-8).
pub(crate) fn map_file(path: &Path, name: Option<&str>) -> Result<(String, Mapped), Error> {
    let file = File::open(path).map_err(|source| Error::Io {
        context: format!("cannot open {}", path.display()),
        source,
    })?;
    let meta = file.metadata().map_err(|source| Error::Io {
        context: format!("cannot inspect {}", path.display()),
        source,
    })?;
    if !meta.is_file() {
        return Err(Error::Invalid(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let name = match name {
        Some(n) => n.to_owned(),
        None => path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "the name of {} is not UTF-8; give the object a name",
                    path.display()
                ))
            })?,
    };
    if meta.len() == 0 {
        // mmap of zero bytes fails; an empty object needs no mapping.
        return Ok((name, Mapped(None)));
    }
    // SAFETY: the mapping is read-only; the caller must not truncate the
    // file during the transfer (documented on `send_file`). Concurrent
    // writes could only make receivers fail verification, never this
    // process misbehave beyond SIGBUS on truncation, which is the
    // documented contract.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| Error::Io {
        context: format!("cannot map {} into memory", path.display()),
        source,
    })?;
    Ok((name, Mapped(Some(map))))
}

/// Sends a file, or a directory tree as one object, to
/// `cfg.proto.receivers` receivers (see [`send_file`]).
///
/// A tree travels as a manifest (every file's path, size, mode, mtime and
/// chunk hashes; directories; symbolic links that stay inside the tree)
/// followed by the files' bytes, under the name of the directory with a
/// trailing `/` (or `cfg.name`); receivers store it as a directory of that
/// name, swapped in whole once every file verified. Special files, names
/// that are not UTF-8 and links that leave the tree are refused before
/// anything is sent, naming the path. Files must not be truncated while
/// they are sent (they are memory-mapped, as `send_file`'s file is).
pub fn send_path(
    path: &Path,
    cfg: &SendConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<SendReport, Error> {
    let meta = std::fs::metadata(path).map_err(|source| Error::Io {
        context: format!("cannot inspect {}", path.display()),
        source,
    })?;
    if !meta.is_dir() {
        return send_file(path, cfg, progress);
    }
    let (name, tree) = tree_object(path, cfg.name.as_deref())?;
    run(&name, tree.as_slice(), cfg, progress, None)
}

/// The directory tree at `path` as one object, and its name (`name`, or
/// the directory's, with the tree's trailing `/`).
pub(crate) fn tree_object(
    path: &Path,
    name: Option<&str>,
) -> Result<(String, crate::tree::TreeObject), Error> {
    let name = match name {
        Some(n) => n.trim_end_matches(crate::tree::TREE_SUFFIX).to_owned(),
        None => {
            let full = path.canonicalize().map_err(|source| Error::Io {
                context: format!("cannot resolve {}", path.display()),
                source,
            })?;
            full.file_name()
                .and_then(|n| n.to_str())
                .map(str::to_owned)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "the name of {} is not UTF-8 (or it is /); give the tree a name",
                        path.display()
                    ))
                })?
        }
    };
    let tree = crate::tree::TreeObject::build(path)?;
    let (files, dirs, links) = tree.counts;
    tracing::info!(
        "tree {}: {files} files, {dirs} directories, {links} symbolic links, {} bytes as one object",
        path.display(),
        tree.as_slice().len()
    );
    Ok((format!("{name}{}", crate::tree::TREE_SUFFIX), tree))
}

/// Sends `data` under `name` to `cfg.proto.receivers` receivers (see [`send_file`]).
pub fn send_bytes(
    name: &str,
    data: &[u8],
    cfg: &SendConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<SendReport, Error> {
    run(name, data, cfg, progress, None)
}

/// How much later than the machine asks a paced sender wakes up: 7 packet
/// times later, so that each wake-up sends a GSO batch of several packets
/// rather than one; at most 2 ms, so that timers stay timely, and at most
/// half of what the pacer's bucket (`bucket`, bytes) holds beyond one
/// packet, so that a late wake-up loses no tokens to a full bucket. (With
/// 65,507-byte packets at 1 Gbit/s the bucket is 250 kB, 2 ms: a 2 ms
/// slack let every wake-up overflow it, and 64 MiB took 1.02–1.10 s where
/// the pace allows 0.57; capped, 0.60–0.67 s.)
fn pace_slack(rate_bits_per_s: Option<u64>, packet_size: usize, bucket: Option<u64>) -> Duration {
    const SLACK_PACKETS: u64 = 7;
    const SLACK_MAX: Duration = Duration::from_millis(2);
    rate_bits_per_s.map_or(Duration::ZERO, |rate| {
        let ns = |bytes: u64| bytes.saturating_mul(8_000_000_000) / rate.max(1);
        let packets = ns(SLACK_PACKETS * packet_size as u64);
        let room = bucket.map_or(u64::MAX, |b| ns(b.saturating_sub(packet_size as u64) / 2));
        Duration::from_nanos(packets.min(room)).min(SLACK_MAX)
    })
}

/// Runs one session: hashes the object on a second thread while the
/// session starts and the data flows (the hash travels in `Close`, the
/// last thing the sender says), and drives the machine on this one.
/// `split`: the multicast half of a hybrid session (the count of receivers
/// served over TCP, raised by the lobby while registration is open).
pub(crate) fn run(
    name: &str,
    data: &[u8],
    cfg: &SendConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
    split: Option<&crate::hybrid::Split>,
) -> Result<SendReport, Error> {
    // A tree (a name ending in `/`) starts with its manifest: receivers
    // report what they hold once it is in (resume, delta), and its hash is
    // the object's (below).
    let manifest = crate::tree::manifest_extent_of(name, data);
    let mut proto = session_config(cfg, manifest)?;
    // `--laggard tcp`: the catch-up port, bound before the session starts
    // so that every `Move` can name it.
    let catch_up = match proto.laggard {
        rmcast_proto::Laggard::Tcp { after, .. } => {
            let (server, verdicts) = crate::catch_up::Server::bind(IpAddr::V4(cfg.iface))?;
            proto.laggard = rmcast_proto::Laggard::Tcp {
                after,
                port: server.port(),
            };
            Some((server, verdicts))
        }
        _ => None,
    };

    let poll = Poll::new().map_err(|source| Error::Io {
        context: "cannot create an event loop".into(),
        source,
    })?;
    let waker = Waker::new(poll.registry(), HASH_TOKEN).map_err(|source| Error::Io {
        context: "cannot create the event loop's waker".into(),
        source,
    })?;
    let waker = std::sync::Arc::new(waker);
    if let Some(s) = split {
        s.set_waker(waker.clone());
    }
    let stop = AtomicBool::new(false);
    let (hashed_tx, hashed) = mpsc::channel();
    let (catch_up_key, limit) = (proto.group_key.clone(), proto.peer_timeout);
    std::thread::scope(|scope| {
        let (stop, waker) = (&stop, &waker);
        // A tree's hash is its manifest's: the manifest holds every file's
        // chunk hashes, each of which receivers check, so it vouches for
        // every byte they store (and for nothing else: padding between
        // files is not stored). Resume and delta need no hash of the bytes
        // nobody sends, and nobody hashes the whole object twice.
        let hashed_part = match manifest {
            Some(len) => &data[..usize::try_from(len).map_or(data.len(), |l| l.min(data.len()))],
            None => data,
        };
        std::thread::Builder::new()
            .name("rmcast-hash".into())
            .spawn_scoped(scope, move || {
                if let Some(h) = hash_object(hashed_part, stop) {
                    // The loop may have ended already: nobody to tell.
                    if hashed_tx.send(h).is_ok() {
                        let _ = waker.wake();
                    }
                }
            })
            .map_err(|source| Error::Io {
                context: "cannot start the hashing thread".into(),
                source,
            })?;
        if let Some((server, _)) = &catch_up {
            let key = catch_up_key.as_ref();
            let wake = move || {
                let _ = waker.wake();
            };
            std::thread::Builder::new()
                .name("rmcast-catch-up".into())
                .spawn_scoped(scope, move || server.run(scope, data, key, limit, wake))
                .map_err(|source| Error::Io {
                    context: "cannot start the catch-up thread".into(),
                    source,
                })?;
        }
        let ends = Ends {
            split,
            catch_up: catch_up.as_ref().map(|(s, rx)| (s, rx)),
        };
        let result = drive(name, data, cfg, progress, proto, poll, &hashed, None, ends);
        // Ended early (error, cancel): the hash is not needed any more.
        stop.store(true, Ordering::Relaxed);
        if let Some((server, _)) = &catch_up {
            server.stop();
        }
        result
    })
}

/// The machine's configuration for a session of `cfg`: checked, with the
/// test loss and a tree's manifest extent (`have_after`) in.
pub(crate) fn session_config(
    cfg: &SendConfig,
    have_after: Option<u64>,
) -> Result<rmcast_proto::SenderConfig, Error> {
    check_group(cfg.group)?;
    check_loss(cfg.loss)?;
    let mut proto = cfg.proto.clone();
    proto.have_after = have_after;
    if cfg.loss > 0.0 {
        proto.test_loss_ppm = (cfg.loss * 1e6).round() as u32;
    }
    proto.validate()?;
    Ok(proto)
}

/// Sends `size` bytes under `name` from a source that fills while the
/// session runs (`data` is the whole object's extent, readable up to
/// `feed.available`): a relay's downstream half. `poll` is woken under
/// [`HASH_TOKEN`] when the feed changes; `hashed` brings the hash.
pub(crate) fn send_streamed(
    name: &str,
    data: &[u8],
    cfg: &SendConfig,
    poll: Poll,
    hashed: &mpsc::Receiver<Hashed>,
    feed: &Feed,
) -> Result<SendReport, Error> {
    // No resume or delta downstream: the receivers' reports of what they
    // hold would have to wait for the manifest the relay is still getting.
    let mut proto = session_config(cfg, None)?;
    // Nor a TCP catch-up: the relay does not hold what a laggard lacks
    // until the upstream session brought it. A laggard is waited for.
    if let rmcast_proto::Laggard::Tcp { .. } = proto.laggard {
        proto.laggard = rmcast_proto::Laggard::Wait;
    }
    drive(
        name,
        data,
        cfg,
        None,
        proto,
        poll,
        hashed,
        Some(feed),
        Ends::default(),
    )
}

/// What a session's loop serves beside its multicast: the TCP half of a
/// hybrid session, the TCP catch-ups of `--laggard tcp`.
#[derive(Default)]
struct Ends<'a> {
    split: Option<&'a crate::hybrid::Split>,
    catch_up: Option<(&'a crate::catch_up::Server, &'a CatchUpVerdicts)>,
}

/// The catch-ups' verdicts, by rank.
type CatchUpVerdicts = mpsc::Receiver<crate::catch_up::Verdict>;

/// The event loop of [`run`]: `hashed` brings the object's hash when the
/// hashing thread has it (it also wakes `poll` under [`HASH_TOKEN`]);
/// `feed`, for a source that fills while the session runs.
#[allow(clippy::too_many_arguments)]
fn drive(
    name: &str,
    data: &[u8],
    cfg: &SendConfig,
    mut progress: Option<&mut dyn FnMut(Progress)>,
    proto: rmcast_proto::SenderConfig,
    mut poll: Poll,
    hashed: &mpsc::Receiver<Hashed>,
    feed: Option<&Feed>,
    ends: Ends<'_>,
) -> Result<SendReport, Error> {
    let Ends { split, catch_up } = ends;
    let protocol = if proto.auto.is_some() {
        "auto"
    } else {
        protocol_name(proto.protocol)
    };
    let wanted = proto.receivers;

    let object = ObjectInfo {
        size: data.len() as u64,
        name: name.to_owned(),
        hash: None,
    };
    let size = object.size;
    let socket = net::sender_socket(cfg.iface, cfg.ttl, cfg.socket_buffer_bytes)?;
    let local = socket.local_addr().ok();
    // Feedback from many receivers arrives in bursts: read many per call.
    let mut port = Port::new(&poll, socket, Token(0), "sender socket", 32)?;
    let group = SocketAddr::V4(cfg.group);
    let alarm = net::Alarm::new(&poll, Token(1))?;
    // Several senders on one group (Hunt's rate group): hear the group's
    // RateNak / RateReport / RateSync on a filtered group socket.
    let mut group_port = match (&proto.rate_group, proto.rate_control()) {
        (Some(_), RateControl::Hunt(_)) => {
            let s = net::rate_group_socket(cfg.group, cfg.iface, GROUP_SOCKET_BYTES)?;
            Some(Port::with_gro(
                &poll,
                s,
                Token(2),
                "rate group socket",
                16,
                false,
            )?)
        }
        _ => None,
    };
    // Another sender announcing on our group would split the receivers:
    // listen for announcements until every receiver joined. Best effort.
    let mut announcements = match net::announcement_socket(cfg.group, cfg.iface, GROUP_SOCKET_BYTES)
        .and_then(|s| Port::with_gro(&poll, s, Token(3), "announcement socket", 4, false))
    {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::debug!("not listening for other sessions on the group: {e}");
            None
        }
    };
    let mut trace = match &cfg.rate_trace {
        Some(path) => Some(RateTrace::create(path)?),
        None => None,
    };

    let clock = Clock;
    let session = SessionId(rand::random());
    let isn = Seq(rand::random());
    let started = clock.now();
    let (rate, packet_size) = (proto.rate_bits_per_s, proto.packet_size);
    let mut proto = proto;
    proto.session_nonce = rand::random();
    match &proto.group_key {
        Some(k) => tracing::debug!("session {session}: sealed under group key {}", k.id()),
        None => tracing::debug!(
            "session {session}: insecure (no group key): unauthenticated, in the clear"
        ),
    }
    let catch_up_limit = proto.peer_timeout;
    let mut sender = Sender::new(proto, session, isn, object, started)?;
    if let Some((server, _)) = catch_up {
        server.set_session(session.0);
    }
    let mut moved = 0usize;
    if let Some(s) = split {
        s.set_session(session);
    }
    let mut elsewhere = 0;
    if feed.is_some() {
        sender.set_available(0);
    }
    let pace_slack = pace_slack(rate, packet_size, sender.pacer_bucket_bytes());
    tracing::info!(
        "session {session}: offering {name:?} ({size} bytes) on {group} from {}, \
         waiting for {wanted} receiver(s), protocol {protocol}",
        local.map_or_else(|| "?".to_owned(), |a| a.to_string())
    );

    let source: &[u8] = data;
    let mut events = Events::with_capacity(16);
    let mut ticker = Ticker::new();
    let mut first_announce: Option<Instant> = None;
    let mut all_joined: Option<Instant> = None;
    let mut last_confirmation: Option<Instant> = None;
    let mut cancelled_at: Option<Instant> = None;
    let mut rx_backlog = false;
    let mut auto = None;

    loop {
        let now = clock.now();
        if cancelled_at.is_none() && net::is_cancelled(cfg.cancel.as_ref()) {
            tracing::warn!("session {session}: interrupted; ending the session");
            sender.abort(now, "the sender was interrupted");
            cancelled_at = Some(now);
        }
        if cancelled_at.is_some_and(|t| now.saturating_since(t) > FAREWELL_MAX) {
            break;
        }
        if let Some(s) = split {
            let k = s.elsewhere();
            if k != elsewhere {
                elsewhere = k;
                sender.serve_elsewhere(now, k);
            }
            if s.take_announce() {
                sender.announce_again(now);
            }
        }
        if let Some(f) = feed {
            sender.set_available(f.available.load(Ordering::Acquire));
            if let Some(reason) = f.abort.lock().ok().and_then(|mut a| a.take()) {
                tracing::warn!("session {session}: {reason}; ending the session");
                sender.abort(now, &reason);
            }
        }
        if sender.object_hash().is_none()
            && let Ok(h) = hashed.try_recv()
        {
            let secs = h.took.as_secs_f64();
            tracing::debug!(
                "session {session}: hashed {size} bytes in {:.1} ms ({:.2} GB/s), \
                 {} bytes acknowledged by then",
                secs * 1e3,
                size as f64 / secs.max(1e-9) / 1e9,
                sender.acked_bytes()
            );
            // The Close, if every byte is acknowledged, goes out below.
            let signature = match (&h.signature, &cfg.signing_key) {
                (Some(sig), _) => Some(*sig),
                (None, Some(key)) => Some(crate::keys::sign_object(key, &h.hash, size, name)),
                (None, None) => None,
            };
            match signature {
                Some(sig) => sender.set_signed_object_hash(h.hash, sig),
                None => sender.set_object_hash(h.hash),
            }
            if let Some((server, _)) = catch_up {
                server.set_hash((h.hash, signature));
            }
        }
        if let Some((server, verdicts)) = catch_up
            && moved > 0
        {
            if sender.acked_bytes() >= size {
                server.release();
            }
            while let Ok((rank, verdict)) = verdicts.try_recv() {
                sender.catch_up_done(now, rank, verdict);
            }
            for (rank, verdict) in server.overdue(catch_up_limit) {
                sender.catch_up_done(now, rank, verdict);
            }
        }

        // Send what is still queued, then what the machine has, in batches.
        let tx_more = port.transmit(|buf| {
            let t = sender.poll_transmit(now, source, buf)?;
            first_announce.get_or_insert(now);
            let to = match t.dest {
                Dest::Group => group,
                Dest::Unicast(a) => a,
            };
            Some(Outgoing {
                to,
                len: t.len,
                batchable: t.kind == Kind::Data,
            })
        });
        if port.take_send_failures() > 0 {
            // ENOBUFS / EAGAIN: Hunt's rate control backs off (no-op otherwise).
            sender.on_send_error(now);
        }

        let mut finished = false;
        while let Some(e) = sender.poll_event() {
            if let Some(hook) = &cfg.on_event {
                (hook.0)(&e);
            }
            match e {
                SenderEvent::Joined { rank, name, addr } => {
                    tracing::info!("receiver {name:?} at {addr} joined with rank {rank}");
                }
                SenderEvent::OtherSession {
                    session: other,
                    sender: from,
                } => {
                    tracing::warn!(
                        "another session on {group}: {other} from {from}; receivers take the \
                         first session they hear, so the two split them (give each sender its \
                         own --group)"
                    );
                }
                SenderEvent::StartedShort { joined, wanted } => {
                    tracing::warn!(
                        "only {joined} of {wanted} receivers registered within the join wait; \
                         starting with them (--min-receivers)"
                    );
                }
                SenderEvent::Chose(choice) => {
                    tracing::info!("{choice}");
                    auto = Some(*choice);
                }
                SenderEvent::AllJoined => {
                    all_joined = Some(now);
                    announcements = None;
                    tracing::info!("all {wanted} receiver(s) joined; offering the object");
                }
                SenderEvent::Accepted { rank } => tracing::debug!("rank {rank} accepted"),
                SenderEvent::MemberFailed { rank, name, reason } => {
                    last_confirmation = Some(now);
                    tracing::warn!("receiver {name:?} (rank {rank}) failed: {reason}");
                    if let Some((server, _)) = catch_up {
                        server.forget(rank);
                    }
                }
                SenderEvent::Verified { rank } => {
                    last_confirmation = Some(now);
                    tracing::debug!("rank {rank} verified the object");
                    if let Some((server, _)) = catch_up {
                        server.forget(rank);
                    }
                }
                SenderEvent::Moved {
                    rank,
                    name,
                    addr,
                    from,
                    reason,
                } => {
                    tracing::warn!(
                        "receiver {name:?} (rank {rank}) at {addr}: {reason}; it catches up from \
                         byte {from} while the group goes on"
                    );
                    if let Some((server, _)) = catch_up {
                        server.expect(rank, addr);
                        moved += 1;
                    }
                }
                SenderEvent::Finished => finished = true,
            }
        }
        if finished {
            break;
        }
        if let Some(cb) = progress.as_deref_mut() {
            let phase = if all_joined.is_none() {
                "waiting for receivers"
            } else if sender.acked_bytes() < size {
                "sending"
            } else {
                "confirming"
            };
            if ticker.due(phase, false) {
                cb(Progress {
                    done_bytes: sender.acked_bytes(),
                    total_bytes: size,
                    phase,
                    joined: all_joined
                        .is_none()
                        .then(|| (sender.joined() as u16, wanted)),
                });
            }
        }

        port.update_interest(&poll)?;
        let mut wait = sender
            .poll_timeout()
            .map_or(MAX_WAIT, |t| match t.saturating_since(now) {
                Duration::ZERO => Duration::ZERO,
                d => d + pace_slack,
            })
            .min(MAX_WAIT);
        if rx_backlog || tx_more {
            wait = Duration::ZERO;
        }
        net::wait(&mut poll, &mut events, Some(&alarm), wait)?;

        let now = clock.now();
        rx_backlog = port.drain(|from, bytes| {
            sender.handle_datagram(now, from, bytes);
        });
        if let Some(g) = group_port.as_mut()
            && g.drain(|from, bytes| sender.handle_datagram(now, from, bytes))
        {
            rx_backlog = true;
        }
        if let Some(a) = announcements.as_mut() {
            // Its own announcements come back too; the machine ignores them.
            rx_backlog |= a.drain(|from, bytes| sender.handle_datagram(now, from, bytes));
        }
        if sender.poll_timeout().is_some_and(|t| now >= t) {
            sender.handle_timeout(now);
        }
        if let (Some(t), Some(rc)) = (trace.as_mut(), sender.rate()) {
            t.record(
                now.saturating_since(started),
                rc,
                sender.stats().data_packets,
            );
        }
    }
    if let Some(t) = trace.as_mut() {
        t.finish()?;
    }
    if let Some(f) = sender.rate_finder() {
        tracing::info!(
            "session {session}: --rate-control find: the path's rate found {:.1} Mbit/s on the \
             wire, paced at {:.1} at the end ({:?})",
            f.found_bits_per_s() as f64 / 1e6,
            f.pace_bits_per_s() as f64 / 1e6,
            f.state()
        );
    }

    let end = clock.now();
    if cancelled_at.is_some() {
        return Err(Error::Cancelled);
    }
    let mut outcome = sender
        .outcome()
        .cloned()
        .expect("a finished sender has an outcome");
    if !outcome.ok
        && let Some(why) = sender.auth_failures().describe()
    {
        // A member with another key (or none) never gets in: name it.
        let error = outcome.error.get_or_insert_with(String::new);
        error.push_str(&format!("; packets that did not authenticate: {why}"));
    }
    let first = first_announce.unwrap_or(started);
    let last = last_confirmation.unwrap_or(end);
    let seconds = net::secs_between(first, last);
    let stats = sender.stats().clone();
    if let Some(cb) = progress {
        cb(Progress {
            done_bytes: sender.acked_bytes(),
            total_bytes: size,
            phase: "done",
            joined: None,
        });
    }
    let skipped_bytes = (stats.skipped_packets * sender.payload_size() as u64).min(size);
    let report = SendReport {
        protocol: match &auto {
            Some(c) => protocol_name(c.protocol),
            None => protocol,
        }
        .to_owned(),
        fec: sender.config().fec,
        auto,
        receivers: outcome.members.len() as u16,
        bytes: size,
        seconds,
        goodput_mbps: goodput_mbps(size, seconds),
        verified: outcome.verified(),
        data_packets: stats.data_packets,
        retransmitted_packets: stats.retransmitted_packets,
        control_packets: stats.control_packets,
        ok: outcome.ok,
        error: outcome.error,
        members: outcome.members,
        missing: outcome.missing,
        stats,
        session,
        data_seconds: all_joined.map_or(0.0, |t| net::secs_between(t, last)),
        sealed: cfg.proto.group_key.is_some(),
        auth_failures: sender
            .auth_failures()
            .iter()
            .map(|(from, e, n)| format!("{from}: {n} packet(s) refused, {e}"))
            .collect(),
        skipped_bytes,
        hybrid: None,
    };
    tracing::info!(
        "session {session}: {} of {} receiver(s) verified {size} bytes in {:.3} s ({:.1} Mbit/s)",
        report.verified,
        report.receivers,
        report.seconds,
        report.goodput_mbps
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::pace_slack;
    use std::time::Duration;

    #[test]
    fn the_pace_slack_stays_inside_the_pacer_bucket() {
        let gbit = Some(1_000_000_000);
        // 7 packet times of 1472 bytes at 1 Gbit/s; the bucket is far larger.
        assert_eq!(
            pace_slack(gbit, 1472, Some(250_000)),
            Duration::from_nanos(82_432)
        );
        // 64 KB packets: 7 of them (3.7 ms) would overflow a 250 kB bucket;
        // half of what it holds beyond one packet is 92,246 bytes.
        assert_eq!(
            pace_slack(gbit, 65_507, Some(250_000)),
            Duration::from_nanos(737_968)
        );
        // Slow rates: at most 2 ms late.
        assert_eq!(
            pace_slack(Some(1_000_000), 1472, Some(65_000)),
            Duration::from_millis(2)
        );
        // Unpaced: no slack.
        assert_eq!(pace_slack(None, 1472, None), Duration::ZERO);
    }
}
