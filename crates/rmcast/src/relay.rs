//! `rmcast relay`: an asynchronous forwarder between two groups (Hunt's
//! cascade, §5.3, done with the two halves his thesis asked for).
//!
//! The upstream half is a receiver in one group (the receiving driver, as
//! `recv` runs it); the downstream half is a sender in another (the
//! sending driver, as `send` runs it, on its own thread). Between them is
//! the object's storage: an in-memory file, or the part file under
//! `--out`. Each half has its own sockets, machine and event loop:
//!
//! ```text
//!   upstream group ──▶ Receiver ──pwrite──▶ file ──read──▶ Sender ──▶ downstream group
//!        ▲                │   stored prefix (Feed.available), hash    │
//!        └── Complete ◀───┘ ◀──────────── verdict ────────────────────┘
//! ```
//!
//! - The downstream session starts when the upstream `Offer` arrives (it
//!   names the object), and registers its receivers while the upstream
//!   data already flows.
//! - Data goes on as soon as it is stored in order
//!   ([`rmcast_proto::Sender::set_available`]): the relay lags its
//!   upstream by the bytes it stages per write (256 KiB) and repairs its
//!   own group from its copy, not from the sender's.
//! - The hash (and the sender's signature) go on once the relay's own copy
//!   verified; the relay's `Complete` upstream waits for the downstream
//!   verdict, so the sender's success means every receiver behind every
//!   relay verified. Until then the relay acks the sender's `Close`s, so
//!   it is not timed out. A downstream failure is the relay's `Complete`
//!   status, its text naming the receivers that failed; a downstream group
//!   that fails before the end makes the relay leave at once, saying why.
//! - An upstream failure aborts the downstream session with the reason,
//!   so every receiver behind it fails cleanly and says why.

use crate::receiver::recv_relayed;
use crate::sender::{Feed, HASH_TOKEN, Hashed, send_streamed};
use crate::storage::{Sink, Target};
use crate::{Error, Progress, RecvConfig, RecvReport, SendConfig, SendReport};
use mio::{Poll, Waker};
use rmcast_proto::{HASH_LEN, OfferInfo};
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// What `rmcast relay` runs.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// The upstream half: a receiver in this group, on this interface,
    /// under this name in the sender's report. `out_dir` is used only
    /// when `keep` is set.
    pub upstream: RecvConfig,
    /// Also keep a verified copy in `upstream.out_dir` (as `recv` stores
    /// it); without it the relay holds the object in memory only. A
    /// directory tree needs a copy on disk.
    pub keep: bool,
    /// The downstream half: a sender to `proto.receivers` receivers in
    /// this group, on this interface, with these protocol settings. Its
    /// `name` and `signing_key` are not used: the object keeps its
    /// upstream name, and the upstream sender's signature travels on.
    pub downstream: SendConfig,
}

/// What a relay reports.
#[derive(Clone, Debug)]
pub struct RelayReport {
    /// The upstream half: the relay's own copy.
    pub upstream: RecvReport,
    /// The downstream half's session, if it ran.
    pub downstream: Option<SendReport>,
    /// The relay's copy and every receiver behind it verified.
    pub ok: bool,
    /// Why not, if not.
    pub error: Option<String>,
}

/// The object the upstream half took, for the downstream half.
pub(crate) struct Offered {
    name: String,
    size: u64,
    file: File,
}

/// The upstream half's side of the link between the halves.
pub(crate) struct Upstream {
    offer: RefCell<Option<mpsc::Sender<Offered>>>,
    feed: Arc<Feed>,
    waker: Arc<Waker>,
    hash: mpsc::Sender<Hashed>,
    verdict: mpsc::Receiver<Result<(), String>>,
    behind: mpsc::Receiver<Vec<String>>,
    published: Cell<u64>,
    /// Wakes the upstream half's event loop when the downstream half sends
    /// it something (its receivers' names, the verdict).
    up_waker: Arc<UpWaker>,
}

/// The upstream event loop's waker, installed once that loop exists.
#[derive(Default)]
struct UpWaker(std::sync::OnceLock<Waker>);

impl UpWaker {
    fn wake(&self) {
        if let Some(w) = self.0.get() {
            let _ = w.wake();
        }
    }
}

impl Upstream {
    /// The upstream offer was accepted into `sink`: start the downstream
    /// session for it. `Err` says why the relay cannot forward it.
    pub(crate) fn offered(&self, info: &OfferInfo, sink: &Sink) -> Result<(), String> {
        let file = sink
            .reader()
            .map_err(|e| format!("the relay cannot read its copy back: {e}"))?;
        let Some(tx) = self.offer.borrow_mut().take() else {
            return Err("the relay forwards one object".into());
        };
        tx.send(Offered {
            name: info.name.clone(),
            size: info.size,
            file,
        })
        .map_err(|_| "the relay's downstream half has ended".to_owned())
    }

    /// The first `bytes` of the object are stored: the downstream half
    /// may send them.
    pub(crate) fn publish(&self, bytes: u64) {
        if bytes > self.published.get() {
            self.published.set(bytes);
            self.feed.available.store(bytes, Ordering::Release);
            let _ = self.waker.wake();
        }
    }

    /// Our copy verified: its hash, and the sender's signature, go on.
    pub(crate) fn verified(
        &self,
        hash: [u8; HASH_LEN],
        signature: Option<[u8; rmcast_wire::SIGNATURE_LEN]>,
    ) {
        let _ = self.hash.send(Hashed {
            hash,
            took: Duration::ZERO,
            signature,
        });
        let _ = self.waker.wake();
    }

    /// The upstream session failed: the downstream one ends, saying why.
    pub(crate) fn failed(&self, reason: String) {
        if let Ok(mut a) = self.feed.abort.lock() {
            a.get_or_insert(reason);
        }
        let _ = self.waker.wake();
    }

    /// The names of the receivers behind the relay, once they all
    /// registered.
    pub(crate) fn behind(&self) -> Option<Vec<String>> {
        self.behind.try_recv().ok()
    }

    /// The downstream verdict, once it came.
    pub(crate) fn verdict(&self) -> Option<Result<(), String>> {
        self.verdict.try_recv().ok()
    }

    /// The upstream half's event loop: the downstream half wakes it under
    /// `token` when it has something for [`Upstream::behind`] or
    /// [`Upstream::verdict`] (a channel, not a socket). What came before
    /// is found on the loop's next pass.
    pub(crate) fn wake_upstream(
        &self,
        registry: &mio::Registry,
        token: mio::Token,
    ) -> Result<(), Error> {
        let w = Waker::new(registry, token).map_err(|source| Error::Io {
            context: "cannot create the relay's upstream waker".into(),
            source,
        })?;
        let _ = self.up_waker.0.set(w);
        Ok(())
    }
}

/// Relays the next object announced on `cfg.upstream.group` to
/// `cfg.downstream.proto.receivers` receivers on `cfg.downstream.group`
/// (see the module's documentation). Returns `Ok` once both halves
/// ended, with `report.ok` only when the relay's copy and every receiver
/// behind it verified; `Err` when the relay got no verified copy (nothing
/// announced, the upstream session failed, a local problem).
pub fn relay(
    cfg: &RelayConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<RelayReport, Error> {
    let (up, down) = (&cfg.upstream, &cfg.downstream);
    if up.group == down.group {
        return Err(Error::Invalid(format!(
            "the relay would forward {} into itself: give --to another group or port than --from",
            up.group
        )));
    }
    if down.proto.receivers == 0 {
        return Err(Error::Invalid(
            "a relay serves at least one receiver downstream (--receivers)".into(),
        ));
    }
    let target = if cfg.keep {
        std::fs::create_dir_all(&up.out_dir).map_err(|source| Error::Io {
            context: format!("cannot create output directory {}", up.out_dir.display()),
            source,
        })?;
        Target::Dir(up.out_dir.clone())
    } else {
        Target::Memfd
    };
    // Fail on the downstream settings now, not after the upstream offer.
    crate::sender::session_config(down, None)?;

    let poll = Poll::new().map_err(|source| Error::Io {
        context: "cannot create an event loop".into(),
        source,
    })?;
    let waker = Arc::new(
        Waker::new(poll.registry(), HASH_TOKEN).map_err(|source| Error::Io {
            context: "cannot create the event loop's waker".into(),
            source,
        })?,
    );
    let feed = Arc::new(Feed::default());
    let (offer_tx, offer_rx) = mpsc::channel::<Offered>();
    let (hash_tx, hash_rx) = mpsc::channel();
    let (verdict_tx, verdict_rx) = mpsc::channel();
    let (behind_tx, behind_rx) = mpsc::channel();
    let up_waker = Arc::new(UpWaker::default());
    let mut down = down.clone();
    down.on_event = Some(behind_hook(
        down.on_event.take(),
        behind_tx,
        up_waker.clone(),
    ));
    let down = &down;
    let upstream = Upstream {
        offer: RefCell::new(Some(offer_tx)),
        feed: feed.clone(),
        waker: waker.clone(),
        hash: hash_tx,
        verdict: verdict_rx,
        behind: behind_rx,
        published: Cell::new(0),
        up_waker: up_waker.clone(),
    };

    std::thread::scope(|scope| {
        let feed = &feed;
        let downstream = std::thread::Builder::new()
            .name("rmcast-relay-down".into())
            .spawn_scoped(scope, move || -> Option<Result<SendReport, Error>> {
                // No offer: the upstream half ended first; nothing to send.
                let offered = offer_rx.recv().ok()?;
                let result = forward(&offered, down, poll, &hash_rx, feed);
                let _ = verdict_tx.send(match &result {
                    Ok(r) if r.ok => Ok(()),
                    Ok(r) => Err(failure_text(&up.name, r)),
                    Err(e) => Err(format!("relay {:?}: {e}", up.name)),
                });
                up_waker.wake();
                Some(result)
            })
            .map_err(|source| Error::Io {
                context: "cannot start the relay's downstream thread".into(),
                source,
            })?;
        let received = recv_relayed(up, target, &upstream, progress);
        if let Err(e) = &received {
            upstream.failed(format!("the relay's upstream session failed: {e}"));
        }
        // Without an offer the downstream half is still waiting for one.
        drop(upstream);
        let sent = downstream
            .join()
            .map_err(|_| Error::Invalid("the relay's downstream thread panicked".into()))?;
        let received = received?;
        let (downstream, error) = match sent {
            Some(Ok(r)) => {
                let error = (!r.ok).then(|| failure_text(&up.name, &r));
                (Some(r), error)
            }
            Some(Err(e)) => (None, Some(format!("the downstream session failed: {e}"))),
            None => (None, Some("the downstream session never started".into())),
        };
        Ok(RelayReport {
            ok: received.verified && error.is_none(),
            upstream: received,
            downstream,
            error,
        })
    })
}

/// The downstream sender's event hook: `user`'s, and the names of the
/// receivers that joined, handed up once all are in (the relay tells its
/// sender, which names them if the relay dies).
fn behind_hook(
    user: Option<crate::EventHook>,
    to_upstream: mpsc::Sender<Vec<String>>,
    wake: Arc<UpWaker>,
) -> crate::EventHook {
    let names = std::sync::Mutex::new(Vec::new());
    let to_upstream = std::sync::Mutex::new(to_upstream);
    crate::EventHook(Arc::new(move |e| {
        match e {
            rmcast_proto::SenderEvent::Joined { name, .. } => {
                if let Ok(mut n) = names.lock() {
                    n.push(name.clone());
                }
            }
            rmcast_proto::SenderEvent::AllJoined => {
                if let (Ok(n), Ok(tx)) = (names.lock(), to_upstream.lock()) {
                    let _ = tx.send(n.clone());
                    wake.wake();
                }
            }
            _ => {}
        }
        if let Some(hook) = &user {
            (hook.0)(e);
        }
    }))
}

/// The downstream half: the stored object, mapped, sent as it fills.
fn forward(
    offered: &Offered,
    cfg: &SendConfig,
    poll: Poll,
    hashed: &mpsc::Receiver<Hashed>,
    feed: &Feed,
) -> Result<SendReport, Error> {
    tracing::info!(
        "relaying {:?} ({} bytes) to {} on {} via {}",
        offered.name,
        offered.size,
        cfg.proto.receivers,
        cfg.group,
        cfg.iface
    );
    let map = if offered.size == 0 {
        None
    } else {
        // SAFETY: the file is this relay's own (an anonymous memfd, or a
        // part file it created with O_EXCL and holds locked) and was sized
        // to the object before the offer was accepted; nothing truncates
        // it while it is mapped. Pages the receiver has not written yet
        // read as zeros and are never sent: the sender reads only the
        // prefix the feed says is stored.
        Some(
            unsafe { memmap2::Mmap::map(&offered.file) }.map_err(|source| Error::Io {
                context: "cannot map the relay's copy".into(),
                source,
            })?,
        )
    };
    let data: &[u8] = map.as_deref().unwrap_or(&[]);
    if data.len() as u64 != offered.size {
        return Err(Error::Invalid(format!(
            "the relay's copy holds {} bytes, the object {}",
            data.len(),
            offered.size
        )));
    }
    send_streamed(&offered.name, data, cfg, poll, hashed, feed)
}

/// The relay's `Complete` text when its group did not verify: who failed
/// behind it and why, within the 255 bytes a `Complete` carries.
fn failure_text(relay: &str, r: &SendReport) -> String {
    let failed: Vec<&crate::MemberOutcome> = r.members.iter().filter(|m| !m.verified).collect();
    let wanted = usize::from(r.receivers) + usize::from(r.missing);
    let mut text = format!(
        "relay {relay:?}: {} of {wanted} receivers behind it did not verify",
        failed.len() + usize::from(r.missing)
    );
    if !failed.is_empty() {
        let names: Vec<String> = failed
            .iter()
            .take(4)
            .map(|m| {
                format!(
                    "{:?} ({})",
                    m.name,
                    m.reason.as_deref().unwrap_or("no reason given")
                )
            })
            .collect();
        text.push_str(&format!(": {}", names.join(", ")));
    } else if r.missing > 0 {
        text.push_str(&format!(" ({} never joined)", r.missing));
    } else if let Some(e) = &r.error {
        text.push_str(&format!(": {e}"));
    }
    text
}
