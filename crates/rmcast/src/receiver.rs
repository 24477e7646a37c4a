//! The receiving driver: a multicast and a unicast socket, one `mio` loop,
//! one `rmcast_proto::Receiver`, and the object's storage.

use crate::net::{self, Clock, MAX_WAIT, Outgoing, Port, Ticker};
use crate::storage::{Sink, Target, prepare};
use crate::{Error, Progress, RecvConfig, RecvReport, check_group, check_loss, goodput_mbps};
use mio::{Events, Poll, Token};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rmcast_proto::{
    Dest, Instant, Kind, OfferInfo, Receiver, ReceiverConfig, ReceiverEvent, Status,
};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How long a finished receiver keeps answering (a repeated Offer or Close)
/// so that its last words reach the sender.
const LINGER: Duration = Duration::from_millis(200);

/// Receives the next object announced on `cfg.group` into `cfg.out_dir`.
///
/// The object is written to a hidden partial file (`.{name}.rmcast-part-{session}`)
/// and renamed to its offered name only after its BLAKE3 hash matched; on
/// every failure the partial file is removed. Returns `Err(Error::Failed)`
/// when the transfer failed and `Err(Error::Refused)` when this receiver
/// refused the offer (unsafe name, no space, too large).
pub fn recv_to_dir(
    cfg: &RecvConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<RecvReport, Error> {
    std::fs::create_dir_all(&cfg.out_dir).map_err(|source| Error::Io {
        context: format!("cannot create output directory {}", cfg.out_dir.display()),
        source,
    })?;
    run(cfg, Target::Dir(cfg.out_dir.clone()), progress).map(|(report, _)| report)
}

/// Receives the next object announced on `cfg.group` into memory (see [`recv_to_dir`]).
pub fn recv_to_vec(
    cfg: &RecvConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<(RecvReport, Vec<u8>), Error> {
    run(cfg, Target::Memory, progress)
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

/// The machine plus everything the driver knows about the transfer.
struct Driver<'a> {
    cfg: &'a RecvConfig,
    target: Target,
    machine: Receiver,
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
    all_data: bool,
    /// Every byte is in: hash and confirm after the next transmit pass.
    verify_pending: bool,
    end: Option<End>,
    clock: Clock,
}

impl Driver<'_> {
    /// Feeds one datagram to the machine and stores the bytes it yields.
    fn on_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        if self.loss > 0.0
            && matches!(rmcast_wire::peek_header(bytes), Ok((Kind::Data, _)))
            && self.rng.random_bool(self.loss)
        {
            self.dropped += 1;
            return;
        }
        if let Some(chunk) = self.machine.handle_datagram(now, from, bytes)
            && let Err(e) = self
                .sink
                .write(chunk.offset, chunk.bytes)
                .and_then(|()| self.sink.hash_ahead(self.machine.received_bytes()))
        {
            let text = format!("cannot write the object: {e}");
            tracing::error!("{text}");
            self.sink.discard();
            self.end.get_or_insert(End::Failed(text.clone()));
            self.machine.leave(&text);
        }
        self.on_events();
    }

    /// Reacts to the machine's events; true if there were any (a reaction
    /// may owe a datagram, so the caller transmits again before sleeping).
    fn on_events(&mut self) -> bool {
        let mut any = false;
        while let Some(e) = self.machine.poll_event() {
            any = true;
            match e {
                ReceiverEvent::Admitted {
                    session,
                    rank,
                    sender,
                } => {
                    tracing::info!("joined session {session} of {sender} with rank {rank}");
                    self.rng = StdRng::seed_from_u64(mix(self.cfg.seed ^ mix(u64::from(rank))));
                }
                ReceiverEvent::Offer(info) => self.on_offer(info),
                // Verified after the next transmit pass, so the ack for the
                // last packet is not held back by hashing the object.
                ReceiverEvent::AllData => self.verify_pending = true,
                ReceiverEvent::Finished => {
                    self.end.get_or_insert(End::Finished);
                }
                ReceiverEvent::Failed(reason) => {
                    if !self.verified {
                        self.sink.discard();
                    }
                    tracing::warn!("transfer failed: {reason}");
                    self.end.get_or_insert(End::Failed(reason));
                }
            }
        }
        any
    }

    fn on_offer(&mut self, info: OfferInfo) {
        let offered = f64::from(info.test_loss_ppm) / 1e6;
        self.loss = self.cfg.loss.max(offered).clamp(0.0, 1.0);
        let session = self.machine.session().unwrap_or_default();
        tracing::info!(
            "offered {:?} ({} bytes, {} packets, protocol {:?})",
            info.name,
            info.size,
            info.packets,
            info.protocol
        );
        match prepare(&self.target, &info, session, self.cfg.max_bytes) {
            Ok(sink) => {
                self.sink = sink;
                self.accepted_at = Some(self.clock.now());
                self.offer = Some(info);
                self.machine.accept_offer();
            }
            Err((status, text)) => {
                tracing::warn!("refusing {:?}: {text}", info.name);
                self.offer = Some(info);
                self.end = Some(End::Refused(text.clone()));
                self.machine.refuse_offer(status, &text);
            }
        }
    }

    fn on_all_data(&mut self) {
        self.all_data = true;
        let expected = self.offer.as_ref().map(|o| o.hash).unwrap_or_default();
        match self.sink.hash() {
            Ok(hash) if hash == expected => match self.sink.commit() {
                Ok(path) => {
                    self.verified = true;
                    self.verified_at = Some(self.clock.now());
                    if let Some(p) = &path {
                        tracing::info!("verified and stored {}", p.display());
                    }
                    self.path = path;
                    self.machine.confirm(Status::Ok, hash, "");
                }
                Err(e) => {
                    self.sink.discard();
                    self.machine.confirm(
                        Status::Io,
                        hash,
                        &format!("cannot store the object: {e}"),
                    );
                }
            },
            Ok(hash) => {
                self.sink.discard();
                let text = format!(
                    "received bytes hash to {}, the offer says {}",
                    hex(&hash[..8]),
                    hex(&expected[..8])
                );
                self.machine.confirm(Status::HashMismatch, hash, &text);
            }
            Err(e) => {
                self.sink.discard();
                self.machine.confirm(
                    Status::Io,
                    [0; rmcast_proto::HASH_LEN],
                    &format!("cannot read the object back: {e}"),
                );
            }
        }
        self.on_events();
    }

    fn progress(&self) -> Progress {
        let phase = if self.verified {
            "done"
        } else if self.all_data {
            "verifying"
        } else if self.offer.is_some() {
            "receiving"
        } else if self.machine.session().is_some() {
            "joining"
        } else {
            "listening"
        };
        Progress {
            done_bytes: self.machine.received_bytes(),
            total_bytes: self.offer.as_ref().map_or(0, |o| o.size),
            phase,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn run(
    cfg: &RecvConfig,
    target: Target,
    mut progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<(RecvReport, Vec<u8>), Error> {
    check_group(cfg.group)?;
    check_loss(cfg.loss)?;
    let mut poll = Poll::new().map_err(|source| Error::Io {
        context: "cannot create an event loop".into(),
        source,
    })?;
    let group_socket = net::group_socket(cfg.group, cfg.iface, cfg.socket_buffer_bytes)?;
    // Data arrives here, GRO-coalesced where the kernel can.
    let mut group_port = Port::new(&poll, group_socket, Token(0), "multicast socket", 16)?;
    let feedback = net::feedback_socket(cfg.iface, cfg.ttl, cfg.socket_buffer_bytes)?;
    // Control packets and the odd unicast repair.
    let mut unicast = Port::new(&poll, feedback, Token(1), "feedback socket", 8)?;
    let group = SocketAddr::V4(cfg.group);

    let clock = Clock;
    let machine_cfg = ReceiverConfig {
        receiver_id: rand::random(),
        name: cfg.name.clone(),
        session: cfg.session,
        sender_timeout: cfg.sender_timeout,
        listen_timeout: cfg.listen_timeout,
        ..ReceiverConfig::default()
    };
    let mut d = Driver {
        cfg,
        target,
        machine: Receiver::new(machine_cfg, clock.now()),
        sink: Sink::None,
        offer: None,
        loss: cfg.loss,
        rng: StdRng::seed_from_u64(mix(cfg.seed)),
        dropped: 0,
        accepted_at: None,
        verified_at: None,
        path: None,
        verified: false,
        all_data: false,
        verify_pending: false,
        end: None,
        clock,
    };
    tracing::info!("{:?} listening on {group} via {}", cfg.name, cfg.iface);

    let mut events = Events::with_capacity(16);
    let mut ticker = Ticker::new();
    let mut linger_until: Option<Instant> = None;
    let mut cancel_seen = false;
    let mut rx_backlog = false;

    loop {
        let now = clock.now();
        if !cancel_seen && net::is_cancelled(cfg.cancel.as_ref()) {
            cancel_seen = true;
            if d.verified {
                // The copy is verified and stored: nothing to take back. A
                // Leave would turn a verified member into a failed one, so
                // only flush the confirmation (below) and stop.
                d.end.get_or_insert(End::Finished);
            } else {
                tracing::warn!("interrupted; leaving the session");
                d.end = Some(End::Cancelled);
                d.sink.discard();
                d.machine.leave("interrupted");
                let _ = d.on_events();
            }
        }

        let mut tx_more = unicast.transmit(|buf| {
            let t = d.machine.poll_transmit(now, buf)?;
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
        if d.on_events() {
            tx_more = true;
        }
        if d.verify_pending {
            d.verify_pending = false;
            d.on_all_data();
            tx_more = true;
        }

        if d.end.is_some() && linger_until.is_none() {
            linger_until = Some(now + LINGER);
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
            .machine
            .poll_timeout()
            .map_or(MAX_WAIT, |t| t.saturating_since(now))
            .min(MAX_WAIT);
        if let Some(until) = linger_until {
            wait = wait.min(until.saturating_since(now));
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
        if d.machine.poll_timeout().is_some_and(|t| now >= t) {
            d.machine.handle_timeout(now);
            let _ = d.on_events();
        }
    }

    if let Some(cb) = progress {
        let p = d.progress();
        cb(p);
    }
    let bytes = d.offer.as_ref().map_or(0, |o| o.size);
    let seconds = match (d.accepted_at, d.verified_at) {
        (Some(a), Some(v)) => net::secs_between(a, v),
        _ => 0.0,
    };
    let report = RecvReport {
        path: d.path.clone(),
        name: d
            .offer
            .as_ref()
            .map_or_else(String::new, |o| o.name.clone()),
        bytes,
        seconds,
        goodput_mbps: goodput_mbps(bytes, seconds),
        rank: d.machine.rank(),
        session: d.machine.session(),
        verified: d.verified,
        stats: d.machine.stats().clone(),
        test_dropped_packets: d.dropped,
    };
    match d.end.take() {
        _ if d.verified => Ok((report, d.sink.take_vec())),
        Some(End::Cancelled) => Err(Error::Cancelled),
        Some(End::Refused(text)) => Err(Error::Refused(text)),
        Some(End::Failed(reason)) => Err(Error::Failed(reason)),
        Some(End::Finished) | None => Err(Error::Failed(
            "the session ended without a verified copy".into(),
        )),
    }
}
