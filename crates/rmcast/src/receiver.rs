//! The receiving driver: a multicast and a unicast socket, one `mio` loop,
//! one `rmcast_proto::Receiver`, and the object's storage.

use crate::net::{self, Clock, MAX_WAIT, Outgoing, Port, Ticker};
use crate::relay::Upstream;
use crate::storage::{Placement, Sink, Target, prepare};
use crate::{Error, Progress, RecvConfig, RecvReport, check_group, check_loss, goodput_mbps};
use mio::{Events, Poll, Token};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rmcast_proto::{
    DataChunk, Dest, Endpoint, EndpointConfig, Instant, Kind, OfferInfo, Receiver, ReceiverConfig,
    ReceiverEvent, SessionHandle, SessionId, Status,
};
use std::cell::RefCell;
use std::collections::HashSet;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long a finished receiver keeps answering (a repeated Offer or Close)
/// so that its last words reach the sender; not at all once the sender
/// said Bye.
const LINGER: Duration = Duration::from_millis(200);
/// How often the loop looks whether a TCP catch-up ended.
const CATCH_UP_LOOK: Duration = Duration::from_millis(20);

/// Receives the next object announced on `cfg.group` into `cfg.out_dir`.
///
/// The object is written to a hidden partial file (`.{name}.rmcast-part-{session}-{id}`, the id unique to the receiver)
/// and renamed to its offered name only after its BLAKE3 hash matched; on
/// every failure the partial file is removed. Returns `Err(Error::NoSession)`
/// when nothing was announced within `cfg.listen_timeout`, `Err(Error::Failed)`
/// when the transfer failed and `Err(Error::Refused)` when this receiver
/// refused the offer (unsafe name, no space, too large).
pub fn recv_to_dir(
    cfg: &RecvConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<RecvReport, Error> {
    let target = out_dir(cfg)?;
    run(cfg, target, progress).map(|(report, _)| report)
}

/// `cfg.out_dir`, created if missing, as the target of a receive.
fn out_dir(cfg: &RecvConfig) -> Result<Target, Error> {
    std::fs::create_dir_all(&cfg.out_dir).map_err(|source| Error::Io {
        context: format!("cannot create output directory {}", cfg.out_dir.display()),
        source,
    })?;
    Ok(Target::Dir(cfg.out_dir.clone()))
}

/// Receives up to `sessions` transfers announced on `cfg.group` at once
/// (several senders on one group), each into `cfg.out_dir` under its
/// offered name, as [`recv_to_dir`] does for one.
///
/// One `Receiver` machine per session, routed by the session id in every
/// packet's header (`rmcast_proto::Endpoint`); the sockets are shared. It joins the first
/// `sessions` sessions announced (`cfg.session` is ignored) and returns
/// when each has ended, one result per session in the order they were
/// announced. `cfg.listen_timeout` bounds the wait for each next session:
/// if it passes first, the last entry is the error saying so. Two
/// sessions that offer the same name: the second is refused.
pub fn recv_sessions_to_dir(
    cfg: &RecvConfig,
    sessions: usize,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<Vec<Result<RecvReport, Error>>, Error> {
    if sessions == 0 {
        return Err(Error::Invalid("at least one session to receive".into()));
    }
    let target = out_dir(cfg)?;
    run_many(cfg, target, sessions, progress)
        .map(|v| v.into_iter().map(|r| r.map(|(report, _)| report)).collect())
}

/// A receiving service (`rmcast serve --max-concurrent N`; `progress` as
/// for [`recv_sessions_to_dir`], over the sessions running): takes the
/// sessions announced on `cfg.group`, up to `max_concurrent` at once, each
/// into `cfg.out_dir` under its offered name, and hands each one's result
/// to `on_session` as it ends, then takes the next. It stops when
/// `on_session` returns `false` (the sessions still running finish first),
/// on `cfg.cancel`, or when nothing is running and nothing was announced
/// for `cfg.listen_timeout` (`on_session` then gets that
/// `Err(Error::NoSession)`). Two sessions running at once that offer the
/// same name: the second is refused.
pub fn serve_to_dir(
    cfg: &RecvConfig,
    max_concurrent: usize,
    progress: Option<&mut dyn FnMut(Progress)>,
    on_session: &mut dyn FnMut(Result<RecvReport, Error>) -> bool,
) -> Result<(), Error> {
    if max_concurrent == 0 {
        return Err(Error::Invalid("at least one session at a time".into()));
    }
    let target = out_dir(cfg)?;
    let mut each = |r: Result<(RecvReport, Sink), Error>| on_session(r.map(|(report, _)| report));
    run_sessions(
        cfg,
        target,
        max_concurrent.max(2),
        progress,
        Some(&mut each),
        None,
    )
    .map(|_| ())
}

/// Receives the next object announced on `cfg.group` into memory (see [`recv_to_dir`]).
pub fn recv_to_vec(
    cfg: &RecvConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<(RecvReport, Vec<u8>), Error> {
    run(cfg, Target::Memory, progress).map(|(report, mut sink)| (report, sink.take_vec()))
}

/// Receives the next object announced on `cfg.group` into memory that is
/// written as a file on tmpfs is (an anonymous `memfd`, filled with
/// `pwrite`), then mapped: for large objects cheaper than [`recv_to_vec`],
/// whose fresh pages the kernel must zero and fault in one by one. The
/// bytes are [`Received`], writable, and live as long as it does.
pub fn recv_to_memory(
    cfg: &RecvConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<(RecvReport, Received), Error> {
    let (report, mut sink) = run(cfg, Target::Memfd, progress)?;
    let Some(file) = sink.take_memfd() else {
        return Err(Error::Invalid("no object was received into memory".into()));
    };
    let received = Received::map(&file, report.bytes).map_err(|source| Error::Io {
        context: "cannot map the received object".into(),
        source,
    })?;
    Ok((report, received))
}

/// An object received into memory by [`recv_to_memory`]: a writable
/// mapping of the anonymous file it was received into (empty for an empty
/// object).
pub struct Received {
    map: Option<memmap2::MmapMut>,
}

impl Received {
    fn map(file: &std::fs::File, len: u64) -> std::io::Result<Received> {
        if len == 0 {
            return Ok(Received { map: None });
        }
        // SAFETY: the memfd is this process's alone (created anonymous,
        // never shared), so nothing can truncate it under the mapping.
        // Shared, not private: populating a private writable mapping would
        // copy every page at once.
        let map = unsafe { memmap2::MmapOptions::new().populate().map_mut(file)? };
        Ok(Received { map: Some(map) })
    }
}

impl std::ops::Deref for Received {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

impl std::ops::DerefMut for Received {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or(&mut [])
    }
}

impl std::fmt::Debug for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Received({} bytes)", self.len())
    }
}

/// How the transfer ended, as far as this receiver is concerned.
enum End {
    Finished,
    Failed(String),
    Refused(String),
    Cancelled,
}

/// SplitMix64 finaliser: spreads a seed so nearby seeds give unrelated streams.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Everything the driver knows about one session's transfer; its machine
/// lives in the [`Endpoint`] under the same handle.
struct Driver<'a> {
    cfg: &'a RecvConfig,
    target: Target,
    sink: Sink,
    offer: Option<OfferInfo>,
    /// Test loss: probability of dropping a data packet before the machine sees it.
    loss: f64,
    rng: StdRng,
    dropped: u64,
    accepted_at: Option<Instant>,
    verified_at: Option<Instant>,
    path: Option<PathBuf>,
    verified: bool,
    /// The commit replaced a file of the same name.
    replaced: bool,
    all_data: bool,
    /// Every byte is in: hash and confirm after the next transmit pass.
    verify_pending: bool,
    end: Option<End>,
    clock: Clock,
    /// Several sessions: the names offered so far, so that two sessions
    /// never store under one name.
    names: Option<Rc<RefCell<HashSet<String>>>>,
    /// Resume and delta: bytes of the tree found on this disk.
    held_bytes: u64,
    /// Its offer was refused because a running session holds the name.
    name_refused: bool,
    /// Continuous service: its result was handed on.
    reported: bool,
    /// A relay's upstream half: the bytes go on to the downstream half,
    /// and the verdict waits for it.
    relay: Option<&'a Upstream>,
    /// A relay's own copy verified against this hash: the `Complete`
    /// waits for the group behind the relay.
    relay_hash: Option<[u8; rmcast_proto::HASH_LEN]>,
    /// The downstream half's verdict was passed on.
    relay_done: bool,
    /// The store-rate test knob's account: since when, and bytes stored.
    throttle: Throttle,
    /// Moved to a TCP catch-up holding this many bytes (`--laggard tcp`).
    caught_up_from: Option<u64>,
    /// That catch-up, while it runs.
    catching_up: Option<CatchUpJob>,
}

/// A TCP catch-up on its thread: it gives back the sink (and the store-rate
/// account) it took, with what it fetched.
struct CatchUpJob {
    handle: std::thread::JoinHandle<(Sink, Throttle, Result<crate::catch_up::Fetched, String>)>,
    /// Bytes held in order so far, for progress.
    stored: Arc<AtomicU64>,
}

/// The store-rate test knob ([`RecvConfig::store_rate`]): sleeps so that
/// bytes stored since the first stay within the rate.
#[derive(Default)]
struct Throttle {
    since: Option<std::time::Instant>,
    bytes: u64,
}

impl Throttle {
    /// `n` more bytes were stored: waits until the rate allows them.
    fn stored(&mut self, rate: Option<u64>, n: usize) {
        let Some(rate) = rate.filter(|r| *r > 0) else {
            return;
        };
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        self.bytes += n as u64;
        let due = since + Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        let now = std::time::Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
}

impl Driver<'_> {
    /// Test loss: true if this data packet is dropped before the machine
    /// sees it.
    fn test_drops(&mut self, bytes: &[u8]) -> bool {
        if self.loss > 0.0
            && matches!(
                rmcast_wire::peek_header(bytes),
                Ok((Kind::Data | Kind::Parity, _))
            )
            && self.rng.random_bool(self.loss)
        {
            self.dropped += 1;
            return true;
        }
        false
    }

    /// Stores the bytes the machine yielded.
    fn store(&mut self, machine: &mut Receiver, chunk: DataChunk<'_>) {
        self.throttle.stored(self.cfg.store_rate, chunk.bytes.len());
        if let Err(e) = self
            .sink
            .write(chunk.offset, chunk.bytes)
            .and_then(|()| self.sink.hash_ahead(machine.received_bytes()))
            .and_then(|()| self.poll_held(machine).map(|_| ()))
            .and_then(|()| match self.relay {
                Some(r) => {
                    r.publish(self.sink.stored_prefix(machine.received_bytes())?);
                    Ok(())
                }
                None => Ok(()),
            })
        {
            let name = self
                .offer
                .as_ref()
                .map_or("the object", |o| o.name.as_str());
            let text = format!("cannot write {name:?}: {e}");
            tracing::error!("{text}");
            self.sink.discard();
            self.end.get_or_insert(End::Failed(text.clone()));
            machine.leave(&text);
        }
    }

    /// Resume and delta (a tree): once the manifest is in, what this disk
    /// holds of the tree is looked for (on other threads) and, once found,
    /// reported to the sender. True when a report became due.
    fn poll_held(&mut self, machine: &mut Receiver) -> std::io::Result<bool> {
        let Some(payload) = self.offer.as_ref().map(|o| u64::from(o.payload_size)) else {
            return Ok(false);
        };
        let Some(held) = self.sink.poll_held(machine.received_bytes(), payload)? else {
            return Ok(false);
        };
        self.held_bytes = held.bytes;
        if held.bytes > 0 {
            tracing::info!(
                "{} bytes of the tree are on this disk already: only the rest travels",
                held.bytes
            );
        }
        machine.report_held(self.clock.now(), held.barrier, &held.packets);
        Ok(true)
    }

    /// Reacts to one of the machine's events.
    fn on_event(&mut self, machine: &mut Receiver, e: ReceiverEvent) {
        match e {
            ReceiverEvent::Admitted {
                session,
                rank,
                sender,
            } => {
                tracing::info!("joined session {session} of {sender} with rank {rank}");
                self.rng = StdRng::seed_from_u64(mix(self.cfg.seed ^ mix(u64::from(rank))));
            }
            ReceiverEvent::Offer(info) => self.on_offer(machine, info),
            // Every byte is in and a Close brought the hash to check.
            // Verified after the next transmit pass, so the ack for the
            // last packet is not held back by hashing the object.
            ReceiverEvent::AllData => self.verify_pending = true,
            ReceiverEvent::Moved { to, from } => self.catch_up(machine, to, from),
            ReceiverEvent::Finished => {
                self.end.get_or_insert(End::Finished);
            }
            ReceiverEvent::Failed(reason) => {
                if !self.verified {
                    self.sink.discard();
                }
                if let Some(r) = self.relay {
                    r.failed(format!("the relay's upstream session failed: {reason}"));
                }
                if machine.session().is_some() {
                    tracing::warn!("transfer failed: {reason}");
                } else {
                    // Nothing announced: the caller says so (a hybrid
                    // session's probe expects it and goes TCP).
                    tracing::debug!("no session: {reason}");
                }
                self.end.get_or_insert(End::Failed(reason));
            }
        }
    }

    fn on_offer(&mut self, machine: &mut Receiver, info: OfferInfo) {
        let offered = f64::from(info.test_loss_ppm) / 1e6;
        self.loss = self.cfg.loss.max(offered).clamp(0.0, 1.0);
        let session = machine.session().unwrap_or_default();
        tracing::info!(
            "offered {:?} ({} bytes, {} packets, protocol {:?})",
            info.name,
            info.size,
            info.packets,
            info.protocol
        );
        if let Some(names) = &self.names
            && !names.borrow_mut().insert(info.name.clone())
        {
            // Another running session holds the name (not this driver).
            let text = format!("another session on this group offered {:?} too", info.name);
            tracing::warn!("refusing {:?}: {text}", info.name);
            self.name_refused = true;
            self.offer = Some(info);
            self.end = Some(End::Refused(text.clone()));
            machine.refuse_offer(Status::Other, &text);
            return;
        }
        match prepare(
            &self.target,
            &info,
            session,
            self.cfg.max_bytes,
            Placement {
                no_clobber: self.cfg.no_clobber,
                merge_tree: self.cfg.merge_tree,
            },
        ) {
            Ok(sink) => {
                self.sink = sink;
                if self.relay.is_some() {
                    self.sink.keep_every_byte();
                }
                if let Some(r) = self.relay
                    && let Err(text) = r.offered(&info, &self.sink)
                {
                    tracing::warn!("refusing {:?}: {text}", info.name);
                    self.sink.discard();
                    self.offer = Some(info);
                    self.end = Some(End::Refused(text.clone()));
                    machine.refuse_offer(Status::Other, &text);
                    return;
                }
                self.accepted_at = Some(self.clock.now());
                let tree = info.name.ends_with(crate::tree::TREE_SUFFIX);
                self.offer = Some(info);
                machine.accept_offer();
                if tree {
                    // Resume and delta: the sender waits for our report of
                    // what this disk holds, once the manifest is in.
                    machine.report_pending(self.clock.now(), u32::MAX);
                }
            }
            Err((status, text)) => {
                let text = match self.relay {
                    Some(_) if info.name.ends_with(crate::tree::TREE_SUFFIX) => format!(
                        "{:?} is a directory tree: a relay forwards a tree from a copy on \
                         disk (rmcast relay --out DIR)",
                        info.name
                    ),
                    _ => text,
                };
                tracing::warn!("refusing {:?}: {text}", info.name);
                self.offer = Some(info);
                self.end = Some(End::Refused(text.clone()));
                machine.refuse_offer(status, &text);
            }
        }
    }

    /// Every byte is in and the sender's `Close` said which hash they must
    /// have: finish the incremental hash, compare, and store or discard.
    fn on_all_data(&mut self, machine: &mut Receiver) {
        self.all_data = true;
        // The machine reports AllData only once a Close brought the hash.
        let Some(expected) = machine.expected_hash() else {
            debug_assert!(false, "AllData before the Close's hash");
            return;
        };
        let (status, hash, text) = self.check(expected, machine.expected_signature());
        match self.relay {
            Some(r) if status == Status::Ok => {
                // The Complete waits for the group behind us
                // (`poll_relay`); our Close acks keep the sender from
                // timing us out meanwhile.
                tracing::info!(
                    "own copy verified; forwarding the hash to the group behind this relay \
                     and waiting for its verdict"
                );
                r.verified(hash, machine.expected_signature());
                self.relay_hash = Some(hash);
            }
            _ => machine.confirm(status, hash, &text),
        }
    }

    /// Checks the stored bytes against the sender's `expected` hash (and,
    /// with `--trust`, its `signature`), and stores or discards them: the
    /// verdict for the sender.
    fn check(
        &mut self,
        expected: [u8; rmcast_proto::HASH_LEN],
        signature: Option<[u8; rmcast_wire::SIGNATURE_LEN]>,
    ) -> (Status, [u8; rmcast_proto::HASH_LEN], String) {
        match self.sink.hash() {
            Ok(hash) if hash == expected && !self.trusted(signature.as_ref(), &hash) => {
                // Intact, but not vouched for by a key we trust: an insider
                // (a holder of the group key) may not pass off content.
                self.sink.discard();
                let text = if signature.is_some() {
                    "the object's signature does not verify under any --trust key"
                } else {
                    "the object is not signed, and --trust requires a signature"
                };
                self.end.get_or_insert(End::Failed(text.to_owned()));
                (Status::Untrusted, hash, text.to_owned())
            }
            Ok(hash) if hash == expected => match self.sink.commit() {
                Ok(path) => {
                    self.verified = true;
                    self.replaced = self.sink.replaces();
                    self.verified_at = Some(self.clock.now());
                    if let Some(p) = &path {
                        tracing::info!("verified and stored {}", p.display());
                    }
                    self.path = path;
                    (Status::Ok, hash, String::new())
                }
                Err(e) => {
                    self.sink.discard();
                    (Status::Io, hash, format!("cannot store the object: {e}"))
                }
            },
            Ok(hash) => {
                self.sink.discard();
                let text = format!(
                    "received bytes hash to {}, the sender says {}",
                    hex(&hash[..8]),
                    hex(&expected[..8])
                );
                (Status::HashMismatch, hash, text)
            }
            Err(e) => {
                self.sink.discard();
                let text = format!("cannot read the object back: {e}");
                (Status::Io, [0; rmcast_proto::HASH_LEN], text)
            }
        }
    }

    /// `--laggard tcp`: the sender moved this receiver to a TCP catch-up.
    /// Starts fetching the rest of the object there, on a thread of its own
    /// that takes the sink along ([`Driver::poll_catch_up`] finishes it), so
    /// the loop goes on serving the other sessions and reporting progress.
    fn catch_up(&mut self, machine: &mut Receiver, to: SocketAddr, from: u64) {
        let (Some(offer), Some(session), Some(rank)) =
            (self.offer.as_ref(), machine.session(), machine.rank())
        else {
            machine.catch_up_done(
                self.clock.now(),
                Err("moved before the object was offered".into()),
            );
            return;
        };
        if self.relay.is_some() {
            self.sink.discard();
            machine.catch_up_done(
                self.clock.now(),
                Err("a relay cannot catch up over TCP: the group behind it would wait".into()),
            );
            return;
        }
        tracing::warn!(
            "the sender moved this receiver, far behind the group, to a TCP catch-up at {to}: \
             fetching bytes {from}..{} there",
            offer.size
        );
        self.caught_up_from = Some(from);
        let req = crate::catch_up::Request {
            to,
            session: session.0,
            rank,
            from,
            size: offer.size,
            key: self.cfg.group_key.clone(),
            limit: self.cfg.sender_timeout,
        };
        // Ctrl-C (the receive's cancel flag) stops the fetch too.
        let abort = self.cfg.cancel.clone().unwrap_or_default();
        let stored = Arc::new(AtomicU64::new(from));
        let (mut sink, mut throttle) = (
            std::mem::replace(&mut self.sink, Sink::None),
            std::mem::take(&mut self.throttle),
        );
        let (rate, done) = (self.cfg.store_rate, stored.clone());
        let spawned = std::thread::Builder::new()
            .name("rmcast-catch-up".into())
            .spawn(move || {
                let fetched = crate::catch_up::fetch(&req, &abort, |at, bytes| {
                    throttle.stored(rate, bytes.len());
                    sink.write(at, bytes)?;
                    let end = at + bytes.len() as u64;
                    sink.hash_ahead(end)?;
                    done.store(end, Ordering::Relaxed);
                    Ok(())
                });
                (sink, throttle, fetched)
            });
        match spawned {
            Ok(handle) => self.catching_up = Some(CatchUpJob { handle, stored }),
            Err(e) => machine.catch_up_done(
                self.clock.now(),
                Err(format!("cannot start the catch-up: {e}")),
            ),
        }
    }

    /// A catch-up that ended: verifies what it fetched as a `Close` would,
    /// tells the sender and the machine. True when one ended.
    fn poll_catch_up(&mut self, machine: &mut Receiver) -> bool {
        if !self
            .catching_up
            .as_ref()
            .is_some_and(|j| j.handle.is_finished())
        {
            return false;
        }
        let job = self.catching_up.take().expect("a finished catch-up");
        let (sink, throttle, fetched) = match job.handle.join() {
            Ok(x) => x,
            Err(_) => {
                machine.catch_up_done(self.clock.now(), Err("the catch-up thread panicked".into()));
                return true;
            }
        };
        (self.sink, self.throttle) = (sink, throttle);
        match fetched {
            Ok(f) => {
                self.all_data = true;
                let (status, _, text) = self.check(f.hash, f.signature);
                f.confirm(status, &text, self.cfg.sender_timeout);
                machine.catch_up_done(
                    self.clock.now(),
                    if status == Status::Ok {
                        Ok(())
                    } else {
                        Err(format!("its copy did not verify ({status:?}): {text}"))
                    },
                );
            }
            Err(why) => {
                self.sink.discard();
                machine.catch_up_done(self.clock.now(), Err(why));
            }
        }
        true
    }

    /// Whether the object may be kept: no `--trust` keys, or a signature
    /// by one of them over this hash, size and name.
    fn trusted(
        &self,
        signature: Option<&[u8; rmcast_wire::SIGNATURE_LEN]>,
        hash: &[u8; 32],
    ) -> bool {
        if self.cfg.trust.is_empty() {
            return true;
        }
        let Some(offer) = &self.offer else {
            return false;
        };
        crate::keys::signature_trusted(&self.cfg.trust, signature, hash, offer.size, &offer.name)
    }

    /// A relay: passes the downstream half's verdict on once it came. Our
    /// copy verified: it is our `Complete`'s; before that (the downstream
    /// group failed early) we leave, saying why. True when it came.
    fn poll_relay(&mut self, machine: &mut Receiver) -> bool {
        let Some(r) = self.relay else {
            return false;
        };
        if self.relay_done || self.end.is_some() {
            return false;
        }
        let mut any = false;
        if let Some(names) = r.behind() {
            let all = u16::try_from(names.len()).unwrap_or(u16::MAX);
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            machine.report_behind(all, &names);
            any = true;
        }
        let Some(verdict) = r.verdict() else {
            return any;
        };
        self.relay_done = true;
        match (verdict, self.relay_hash) {
            (Ok(()), Some(hash)) => machine.confirm(Status::Ok, hash, ""),
            (Err(text), Some(hash)) => machine.confirm(Status::Other, hash, &text),
            (Err(text), None) => {
                tracing::warn!("leaving the upstream session: {text}");
                self.sink.discard();
                self.end.get_or_insert(End::Failed(text.clone()));
                machine.leave(&text);
            }
            (Ok(()), None) => {
                debug_assert!(false, "the group behind verified before our hash");
            }
        }
        true
    }

    fn progress(&self, machine: &Receiver) -> Progress {
        let phase = if self.verified {
            "done"
        } else if self.all_data {
            "verifying"
        } else if self.offer.is_some() {
            "receiving"
        } else if machine.session().is_some() {
            "joining"
        } else {
            "listening"
        };
        let done_bytes = match &self.catching_up {
            Some(job) => job.stored.load(Ordering::Relaxed),
            None => machine.received_bytes(),
        };
        Progress {
            done_bytes,
            total_bytes: self.offer.as_ref().map_or(0, |o| o.size),
            phase: if self.catching_up.is_some() {
                "catching up over TCP"
            } else {
                phase
            },
            joined: None,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn run(
    cfg: &RecvConfig,
    target: Target,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<(RecvReport, Sink), Error> {
    run_many(cfg, target, 1, progress)?
        .pop()
        .expect("one session, one result")
}

impl<'a> Driver<'a> {
    /// The driver of a machine listening for the next session announced.
    fn listening(
        cfg: &'a RecvConfig,
        target: Target,
        names: Option<Rc<RefCell<HashSet<String>>>>,
        relay: Option<&'a Upstream>,
    ) -> Self {
        Self {
            cfg,
            target,
            sink: Sink::None,
            offer: None,
            loss: cfg.loss,
            rng: StdRng::seed_from_u64(mix(cfg.seed)),
            dropped: 0,
            accepted_at: None,
            verified_at: None,
            path: None,
            verified: false,
            replaced: false,
            all_data: false,
            verify_pending: false,
            end: None,
            clock: Clock,
            names,
            held_bytes: 0,
            name_refused: false,
            reported: false,
            relay,
            relay_hash: None,
            relay_done: false,
            throttle: Throttle::default(),
            caught_up_from: None,
            catching_up: None,
        }
    }

    fn report(&mut self, machine: &Receiver) -> Result<(RecvReport, Sink), Error> {
        let bytes = self.offer.as_ref().map_or(0, |o| o.size);
        let seconds = match (self.accepted_at, self.verified_at) {
            (Some(a), Some(v)) => net::secs_between(a, v),
            _ => 0.0,
        };
        let report = RecvReport {
            path: self.path.clone(),
            name: self
                .offer
                .as_ref()
                .map_or_else(String::new, |o| o.name.clone()),
            bytes,
            seconds,
            goodput_mbps: goodput_mbps(bytes, seconds),
            rank: machine.rank(),
            session: machine.session(),
            verified: self.verified,
            stats: machine.stats().clone(),
            test_dropped_packets: self.dropped,
            replaced: self.replaced,
            tree: self.sink.tree_counts(),
            held_bytes: self.held_bytes,
            group: machine.group_outcome().cloned(),
            caught_up_from: self.caught_up_from,
        };
        match self.end.take() {
            _ if self.verified => Ok((report, std::mem::replace(&mut self.sink, Sink::None))),
            Some(End::Cancelled) => Err(Error::Cancelled),
            Some(End::Refused(text)) => Err(Error::Refused(text)),
            // Never joined: nothing was announced within the listen timeout.
            Some(End::Failed(reason)) if machine.session().is_none() => {
                Err(Error::NoSession(reason))
            }
            Some(End::Failed(reason)) => Err(Error::Failed(reason)),
            Some(End::Finished) | None => Err(Error::Failed(
                "the session ended without a verified copy".into(),
            )),
        }
    }
}

/// The sessions of one receiving process: the [`Endpoint`] holds their
/// machines (and routes each datagram to one), `drivers[h]` the rest of
/// session `h`.
struct Sessions<'a> {
    cfg: &'a RecvConfig,
    target: Target,
    endpoint: Endpoint,
    drivers: Vec<Driver<'a>>,
    names: Option<Rc<RefCell<HashSet<String>>>>,
    /// How many of the endpoint's announced sessions were logged.
    seen_logged: usize,
    /// Sources already warned about for packets that did not authenticate.
    auth_warned: Vec<SocketAddr>,
    /// A packet rebuilt from FEC parity, on its way to the disk.
    repaired: Vec<u8>,
}

impl<'a> Sessions<'a> {
    /// One machine listening for the first of `sessions` sessions (for
    /// `cfg.session` only, when it receives one); `own` is the feedback
    /// socket's address.
    fn new(
        cfg: &'a RecvConfig,
        target: Target,
        sessions: usize,
        own: Option<SocketAddr>,
        relay: Option<&'a Upstream>,
    ) -> Self {
        let names = (sessions > 1).then(|| Rc::new(RefCell::new(HashSet::new())));
        let endpoint = Endpoint::new(
            EndpointConfig {
                receiver: ReceiverConfig {
                    receiver_id: rand::random(),
                    name: cfg.name.clone(),
                    session: if sessions == 1 { cfg.session } else { None },
                    sender_timeout: cfg.sender_timeout,
                    listen_timeout: cfg.listen_timeout,
                    rate_nak_interval: cfg.rate_nak_interval,
                    group_key: cfg.group_key.clone(),
                    ..ReceiverConfig::default()
                },
                sessions,
                // Our own multicast rate NAKs come back to the group
                // socket, and must not count as another member's.
                own_addr: own,
            },
            Clock.now(),
        );
        Self {
            cfg,
            target: target.clone(),
            endpoint,
            drivers: vec![Driver::listening(cfg, target, names.clone(), relay)],
            names,
            seen_logged: 0,
            auth_warned: Vec::new(),
            repaired: Vec::new(),
        }
    }

    /// Whether a machine of ours took session `session`.
    fn took(&self, session: SessionId) -> bool {
        self.endpoint
            .iter()
            .any(|(_, m)| m.session() == Some(session))
    }

    /// Says which sessions were announced on the group and which were
    /// taken: several senders on one group split the waiting receivers
    /// between them, and each receiver must say so.
    fn log_sessions_seen(&mut self) {
        while let Some(s) = self.endpoint.sessions_seen().get(self.seen_logged).copied() {
            self.seen_logged += 1;
            if self.took(s.session) {
                tracing::info!(
                    "session {} of {} announced on {}: taken (the first announced{})",
                    s.session,
                    s.sender,
                    self.cfg.group,
                    if self.endpoint.max_sessions() > 1 {
                        " while a machine was listening"
                    } else {
                        ""
                    }
                );
            } else {
                tracing::warn!(
                    "another session on {}: {} from {}, not taken (this receiver takes the \
                     first {} announced); senders sharing a group split its receivers: give \
                     each sender its own --group, or use recv --sessions N",
                    self.cfg.group,
                    s.session,
                    s.sender,
                    self.endpoint.max_sessions()
                );
            }
        }
    }

    /// The sessions announced on the group that no machine took, for a
    /// failure report; empty when there were none.
    fn untaken_sessions(&self) -> String {
        let others: Vec<String> = self
            .endpoint
            .sessions_seen()
            .iter()
            .filter(|s| !self.took(s.session))
            .map(|s| format!("{} from {}", s.session, s.sender))
            .collect();
        if others.is_empty() {
            return String::new();
        }
        format!(
            " (other sessions announced on this group and not taken: {}; a receiver takes the first announced)",
            others.join(", ")
        )
    }

    /// Resume and delta: reports what the disk holds for every session
    /// whose search for it ended; true if any did.
    fn poll_held(&mut self) -> bool {
        let mut any = false;
        for (h, machine) in self.endpoint.iter_mut() {
            let d = &mut self.drivers[h.0];
            if d.end.is_some() {
                continue;
            }
            match d.poll_held(machine) {
                Ok(due) => any |= due,
                Err(e) => {
                    let text = format!("cannot look for the tree's chunks on this disk: {e}");
                    tracing::error!("{text}");
                    d.sink.discard();
                    d.end.get_or_insert(End::Failed(text.clone()));
                    machine.leave(&text);
                    any = true;
                }
            }
        }
        any
    }

    /// Continuous service: hands each ended session's result to `serve`
    /// and lets its slot take the next session; once `stopping` (set here
    /// when `serve` says so), takes no new session. True when anything
    /// changed.
    fn serve_step(&mut self, now: Instant, serve: OnSession<'_>, stopping: &mut bool) -> bool {
        let mut any = false;
        for i in 0..self.drivers.len() {
            let h = SessionHandle(i);
            let machine = self.endpoint.session(h);
            if self.drivers[i].reported || !machine.is_finished() {
                continue;
            }
            any = true;
            let joined = machine.session().is_some();
            let others_run = self
                .endpoint
                .iter()
                .any(|(k, m)| k != h && m.session().is_some() && !m.is_finished());
            let d = &mut self.drivers[i];
            d.reported = true;
            if let (Some(names), Some(offer), false) = (&self.names, &d.offer, d.name_refused) {
                names.borrow_mut().remove(&offer.name);
            }
            let result = d.report(machine);
            let quiet = match &result {
                // The listener's wait ran out while sessions run (listen
                // on), or it left because the service stops.
                Err(Error::NoSession(_)) => others_run || *stopping,
                _ => !joined && *stopping,
            };
            if !quiet && !serve(result) {
                *stopping = true;
            }
            if !*stopping {
                self.endpoint.retire(h, now);
            }
        }
        for h in self.endpoint.take_restarted() {
            self.drivers[h.0] =
                Driver::listening(self.cfg, self.target.clone(), self.names.clone(), None);
            any = true;
        }
        if *stopping && let Some(h) = self.endpoint.listener() {
            self.endpoint.session_mut(h).leave("the service stops");
            any = true;
        }
        any
    }

    /// `--laggard tcp`: finishes the catch-ups that ended; true if any did.
    fn poll_catch_ups(&mut self) -> bool {
        let mut any = false;
        for (h, machine) in self.endpoint.iter_mut() {
            any |= self.drivers[h.0].poll_catch_up(machine);
        }
        any
    }

    /// Whether a catch-up runs (the loop then looks at it often).
    fn catching_up(&self) -> bool {
        self.drivers.iter().any(|d| d.catching_up.is_some())
    }

    /// A relay: passes on the downstream half's verdict; true if it came.
    fn poll_relay(&mut self) -> bool {
        let mut any = false;
        for (h, machine) in self.endpoint.iter_mut() {
            any |= self.drivers[h.0].poll_relay(machine);
        }
        any
    }

    /// Verifies every session holding all its bytes (then reacts to what
    /// that caused); true if any did.
    fn verify(&mut self) -> bool {
        let mut any = false;
        for (h, machine) in self.endpoint.iter_mut() {
            let d = &mut self.drivers[h.0];
            if d.verify_pending {
                d.verify_pending = false;
                d.on_all_data(machine);
                any = true;
            }
        }
        self.on_events();
        any
    }

    /// Says once per source that its packets did not authenticate (wrong
    /// key, no key, or --insecure on one side): a receiver that waits for a
    /// session it cannot open must not wait in silence.
    fn warn_auth_failures(&mut self) {
        for (_, machine) in self.endpoint.iter() {
            for (from, e, _) in machine.auth_failures().iter() {
                if self.auth_warned.len() < rmcast_proto::security::FAILURE_SOURCES_MAX
                    && !self.auth_warned.contains(&from)
                {
                    self.auth_warned.push(from);
                    tracing::warn!(
                        "packets from {from} do not authenticate: {e}; every member needs the \
                         same group key (--key), or all run --insecure"
                    );
                }
            }
        }
    }

    /// Hands a datagram to the machine of its session (as the endpoint
    /// routes it) and stores the bytes it yields.
    fn on_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &mut [u8]) {
        let Some(h) = self.endpoint.route(from, bytes) else {
            return;
        };
        if self.drivers[h.0].test_drops(bytes) {
            return;
        }
        if let Some(chunk) = self.endpoint.deliver(h, now, from, bytes) {
            self.drivers[h.0].store(self.endpoint.session_mut(h), chunk);
        }
        self.store_repaired(h);
        if self.seen_logged < self.endpoint.sessions_seen().len() {
            self.log_sessions_seen();
        }
        while self.drivers.len() < self.endpoint.session_count() {
            // The endpoint started a listener for the next session.
            tracing::info!(
                "session {} announced; {} of {} sessions",
                self.endpoint.session(h).session().unwrap_or_default(),
                self.drivers.len(),
                self.endpoint.max_sessions()
            );
            let next = Driver::listening(self.cfg, self.target.clone(), self.names.clone(), None);
            self.drivers.push(next);
        }
        self.on_events();
    }

    /// Stores the data packets session `h`'s machine rebuilt from FEC
    /// parity. The chunk borrows the machine, which `store` also takes:
    /// it is copied into a buffer kept for the purpose (once per rebuilt
    /// packet, never per received one).
    fn store_repaired(&mut self, h: SessionHandle) {
        loop {
            let Some(chunk) = self.endpoint.poll_repaired(h) else {
                return;
            };
            let offset = chunk.offset;
            self.repaired.clear();
            self.repaired.extend_from_slice(chunk.bytes);
            let chunk = DataChunk {
                offset,
                bytes: &self.repaired,
            };
            self.drivers[h.0].store(self.endpoint.session_mut(h), chunk);
        }
    }

    /// Reacts to the machines' events; true if there were any (a reaction
    /// may owe a datagram, so the caller transmits again before sleeping).
    fn on_events(&mut self) -> bool {
        let mut any = false;
        while let Some((h, e)) = self.endpoint.poll_event() {
            any = true;
            self.drivers[h.0].on_event(self.endpoint.session_mut(h), e);
        }
        any
    }

    fn progress(&self) -> Progress {
        let machine = |i: usize| self.endpoint.session(SessionHandle(i));
        if let [d] = self.drivers.as_slice() {
            return d.progress(machine(0));
        }
        let mut p = Progress {
            done_bytes: 0,
            total_bytes: 0,
            phase: "done",
            joined: None,
        };
        for (i, d) in self.drivers.iter().enumerate() {
            let q = d.progress(machine(i));
            p.done_bytes += q.done_bytes;
            p.total_bytes += q.total_bytes;
            if q.phase != "done" && d.end.is_none() {
                p.phase = if machine(i).session().is_some() {
                    "receiving"
                } else if p.phase == "done" {
                    "listening"
                } else {
                    p.phase
                };
            }
        }
        p
    }
}

/// One session's outcome: its report and (into memory) its bytes.
type SessionResult = Result<(RecvReport, Sink), Error>;

fn run_many(
    cfg: &RecvConfig,
    target: Target,
    sessions: usize,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<Vec<SessionResult>, Error> {
    run_sessions(cfg, target, sessions, progress, None, None)
}

/// A relay's upstream half: receives the next session on `cfg.group` into
/// `target` as [`recv_to_dir`] does, handing the bytes on through `relay`
/// as they are stored and confirming only with the downstream verdict.
pub(crate) fn recv_relayed(
    cfg: &RecvConfig,
    target: Target,
    relay: &Upstream,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<RecvReport, Error> {
    run_sessions(cfg, target, 1, progress, None, Some(relay))?
        .pop()
        .expect("one session, one result")
        .map(|(report, _)| report)
}

/// A session's result, handed on as it ends (continuous service).
type OnSession<'s> = &'s mut dyn FnMut(SessionResult) -> bool;

/// The sessions' event loop. Without `serve`: the first `sessions`
/// sessions announced, every result at the end. With `serve`: up to
/// `sessions` (at least 2) at once, each result handed to `serve` as the
/// session ends, its slot then taking the next session (see
/// [`serve_to_dir`]).
fn run_sessions(
    cfg: &RecvConfig,
    target: Target,
    sessions: usize,
    mut progress: Option<&mut dyn FnMut(Progress)>,
    mut serve: Option<OnSession<'_>>,
    relay: Option<&Upstream>,
) -> Result<Vec<SessionResult>, Error> {
    check_group(cfg.group)?;
    check_loss(cfg.loss)?;
    let mut poll = Poll::new().map_err(|source| Error::Io {
        context: "cannot create an event loop".into(),
        source,
    })?;
    let group_socket = net::group_socket(cfg.group, cfg.iface, cfg.socket_buffer_bytes)?;
    // Data arrives here, GRO-coalesced where the kernel can.
    let mut group_port = Port::new(&poll, group_socket, Token(0), "multicast socket", 16)?;
    let feedback = net::feedback_socket(
        SocketAddrV4::new(cfg.iface, 0),
        cfg.ttl,
        cfg.socket_buffer_bytes,
    )?;
    let own = feedback.local_addr().ok();
    // Control packets and the odd unicast repair.
    let mut unicast = Port::new(&poll, feedback, Token(1), "feedback socket", 8)?;
    if let Some(r) = relay {
        // A relay's downstream half wakes this loop with its verdict.
        r.wake_upstream(poll.registry(), Token(2))?;
    }
    let group = SocketAddr::V4(cfg.group);

    let clock = Clock;
    let mut d = Sessions::new(cfg, target, sessions, own, relay);
    if sessions == 1 {
        tracing::info!("{:?} listening on {group} via {}", cfg.name, cfg.iface);
    } else {
        tracing::info!(
            "{:?} listening on {group} via {} for {sessions} sessions",
            cfg.name,
            cfg.iface
        );
    }

    let mut events = Events::with_capacity(16);
    let mut ticker = Ticker::new();
    let mut linger_until: Option<Instant> = None;
    let mut cancel_seen = false;
    // Continuous service: no new session is taken any more.
    let mut stopping = false;
    let mut rx_backlog = false;

    loop {
        let now = clock.now();
        if !cancel_seen && net::is_cancelled(cfg.cancel.as_ref()) {
            cancel_seen = true;
            let several = sessions > 1;
            for (h, machine) in d.endpoint.iter_mut() {
                let d = &mut d.drivers[h.0];
                if several && d.end.is_some() && !d.verified {
                    // This session is over already; the others still run.
                    continue;
                }
                if d.verified {
                    // The copy is verified and stored: nothing to take back. A
                    // Leave would turn a verified member into a failed one, so
                    // only flush the confirmation (below) and stop.
                    d.end.get_or_insert(End::Finished);
                } else {
                    tracing::warn!("interrupted; leaving the session");
                    d.end = Some(End::Cancelled);
                    d.sink.discard();
                    machine.leave("interrupted");
                }
            }
            let _ = d.on_events();
        }

        let mut tx_more = unicast.transmit(|buf| {
            // The endpoint takes the sessions round robin.
            let (_, t) = d.endpoint.poll_transmit(now, buf)?;
            let to = match t.dest {
                Dest::Group => group,
                Dest::Unicast(a) => a,
            };
            // Feedback batches too: after a GRO burst the machine owes
            // one ack per packet, all to the sender and of one size.
            Some(Outgoing {
                to,
                len: t.len,
                batchable: matches!(t.kind, Kind::Data | Kind::Ack | Kind::Nak),
            })
        });
        // Transmit first (the ack for the last packet must not wait for the
        // hash), then react; a reaction's datagram goes on the next pass,
        // at once rather than after the next arrival.
        let reacted = d.on_events();
        if d.verify() || reacted {
            tx_more = true;
        }
        if d.poll_held() {
            tx_more = true;
        }
        if d.poll_relay() {
            let _ = d.on_events();
            tx_more = true;
        }
        if d.poll_catch_ups() {
            let _ = d.on_events();
            tx_more = true;
        }
        if let Some(cb) = serve.as_deref_mut() {
            stopping |= cancel_seen;
            if d.serve_step(now, cb, &mut stopping) {
                tx_more = true;
            }
        }

        let over = serve.is_none() || stopping;
        // A catch-up's thread holds its sink: the loop outlives it, so that
        // an interrupted one's partial file is removed here.
        if over
            && d.drivers.iter().all(|d| d.end.is_some() || d.reported)
            && !d.catching_up()
            && linger_until.is_none()
        {
            // Every sender said Bye (or went quiet after our Complete): none
            // is left to repeat an Offer or a Close, so nothing to linger for.
            let said_bye = d
                .drivers
                .iter()
                .all(|d| matches!(d.end, Some(End::Finished)));
            linger_until = Some(now + if said_bye { Duration::ZERO } else { LINGER });
        }
        if let Some(until) = linger_until {
            if now >= until && !unicast.has_pending() {
                break;
            }
            if now.saturating_since(until) > LINGER {
                // The socket stayed full for a whole extra linger: give up on it.
                break;
            }
        }
        if let Some(cb) = progress.as_deref_mut() {
            let p = d.progress();
            if ticker.due(p.phase, false) {
                cb(p);
            }
        }

        unicast.update_interest(&poll)?;
        let mut wait = d
            .endpoint
            .poll_timeout()
            .map_or(MAX_WAIT, |t| t.saturating_since(now))
            .min(MAX_WAIT);
        if let Some(until) = linger_until {
            wait = wait.min(until.saturating_since(now));
        }
        if d.catching_up() {
            wait = wait.min(CATCH_UP_LOOK);
        }
        if rx_backlog || tx_more {
            wait = Duration::ZERO;
        }
        net::wait(&mut poll, &mut events, None, wait)?;

        let now = clock.now();
        let more_group = group_port.drain(|from, bytes| {
            d.on_datagram(now, from, bytes);
        });
        let more_unicast = unicast.drain(|from, bytes| {
            d.on_datagram(now, from, bytes);
        });
        rx_backlog = more_group || more_unicast;
        d.endpoint.handle_timeout(now);
        let _ = d.on_events();
        d.warn_auth_failures();
    }

    if let Some(cb) = progress {
        let p = d.progress();
        cb(p);
    }
    if let Some(cb) = serve {
        // What ended in the last pass and was not handed on yet.
        d.serve_step(clock.now(), cb, &mut true);
        return Ok(Vec::new());
    }
    let untaken = d.untaken_sessions();
    let mut results: Vec<_> = d
        .endpoint
        .iter()
        .map(|(h, machine)| match d.drivers[h.0].report(machine) {
            Err(Error::Failed(reason)) => Err(Error::Failed(format!("{reason}{untaken}"))),
            Err(Error::NoSession(reason)) => Err(Error::NoSession(format!("{reason}{untaken}"))),
            other => other,
        })
        .collect();
    if sessions > 1 {
        // The listener still waiting for one more session: its timeout is
        // worth reporting only if fewer sessions came than were asked for.
        if let Some((_, last)) = d.endpoint.iter().last()
            && last.session().is_none()
            && d.drivers.len() > 1
            && !matches!(results.last(), Some(Err(Error::Cancelled)))
        {
            let got = d.drivers.len() - 1;
            results.pop();
            results.push(Err(Error::Failed(format!(
                "only {got} of {sessions} sessions were announced"
            ))));
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    //! The driver verifies against the hash in the sender's `Close`.

    use super::*;
    use rmcast_proto::{ObjectInfo, Sender, SenderConfig, Seq};

    /// Runs a sender machine announcing `announced` for `data` against one
    /// receiving driver storing into `dir`, datagrams passed by hand.
    fn transfer<'a>(
        cfg: &'a RecvConfig,
        dir: &std::path::Path,
        data: &[u8],
        announced: [u8; 32],
    ) -> (Driver<'a>, Sender) {
        let mut d = Sessions::new(cfg, Target::Dir(dir.to_owned()), 1, None, None);
        let clock = Clock;
        let object = ObjectInfo {
            size: data.len() as u64,
            name: "obj.bin".into(),
            hash: Some(announced),
        };
        let config = SenderConfig {
            receivers: 1,
            ..SenderConfig::default()
        };
        let mut sender = Sender::new(
            config,
            rmcast_proto::SessionId(3),
            Seq(0),
            object,
            clock.now(),
        )
        .unwrap();
        let (s_addr, r_addr): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5000".parse().unwrap(),
            "127.0.0.1:6000".parse().unwrap(),
        );
        let mut buf = vec![0u8; rmcast_proto::MAX_DATAGRAM];
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !sender.is_finished() && std::time::Instant::now() < deadline {
            let now = clock.now();
            while let Some(t) = sender.poll_transmit(now, data, &mut buf) {
                d.on_datagram(now, s_addr, &mut buf[..t.len]);
            }
            d.verify();
            while let Some((_, t)) = d.endpoint.poll_transmit(now, &mut buf) {
                sender.handle_datagram(now, r_addr, &mut buf[..t.len]);
            }
            if sender.poll_timeout().is_some_and(|t| clock.now() >= t) {
                sender.handle_timeout(clock.now());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        (d.drivers.remove(0), sender)
    }

    fn object() -> Vec<u8> {
        (0..50_000u32).map(|i| (i * 13 % 251) as u8).collect()
    }

    #[test]
    fn bytes_matching_the_close_hash_are_stored() {
        let dir = tempfile::tempdir().unwrap();
        let data = object();
        let cfg = RecvConfig::default();
        let (driver, sender) = transfer(&cfg, dir.path(), &data, *blake3::hash(&data).as_bytes());
        assert!(driver.verified);
        assert!(sender.outcome().is_some_and(|o| o.ok));
        assert_eq!(std::fs::read(dir.path().join("obj.bin")).unwrap(), data);
    }

    #[test]
    fn a_close_hash_that_does_not_match_is_a_hash_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let data = object();
        let cfg = RecvConfig::default();
        let (driver, sender) = transfer(&cfg, dir.path(), &data, [0xEE; 32]);
        assert!(!driver.verified);
        let Some(End::Failed(why)) = &driver.end else {
            panic!("{:?}", driver.end.is_some());
        };
        assert!(why.contains("eeeeeeee"), "{why}");
        let outcome = sender.outcome().expect("finished");
        assert!(!outcome.ok);
        let reason = outcome.members[0].reason.as_deref().unwrap_or("");
        assert!(reason.contains("HashMismatch"), "{reason}");
        // Nothing stored, not even the part file.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
