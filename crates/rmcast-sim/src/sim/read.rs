//! A host reading one datagram: the part of a `Cpu` event that changes no
//! host but the reader, so that several hosts may read at once
//! (`batch.rs`), and the probe that asks a receiver's machine, on the
//! reader's thread, what the event's rest would ask it first.

use super::app::{Stored, deliver, held_now};
use super::*;
use rmcast_proto::{SessionHandle, Transmit};

/// What a host reads a datagram with, beside itself: shared and read-only,
/// so several hosts may read at once (`batch.rs`).
pub(super) struct ReadCtx<'a> {
    pub(super) now: u64,
    pub(super) sc: &'a Scenario,
    pub(super) pool: &'a Pool,
    pub(super) sides: &'a [SenderSide],
    pub(super) cpu_jitter: u64,
}

/// The datagram a host read (its reference still held), the CPU time
/// its reading ended, and what its machine owed then if the reader's
/// thread asked ([`probe`]).
pub(super) struct Read {
    pub(super) pkt: u32,
    pub(super) t: u64,
    pub(super) probe: Probe,
}

/// What a receiver's machine owed right after a read, asked on the
/// reader's thread (`batch.rs`) with the questions [`Sim::service`] asks
/// first, so that the event's rest on the event loop's thread need not
/// ask them again.
pub(super) enum Probe {
    /// Not asked: the rest asks the machine itself.
    No,
    /// Its first transmit; the bytes are in reader thread `thread`'s
    /// `sent` buffer from `at`.
    Sent {
        t: Transmit,
        thread: usize,
        at: usize,
    },
    /// No transmit; its first event.
    Event(SessionHandle, ReceiverEvent),
    /// No transmit, no event: only its timer is left, and this is the
    /// machine's deadline.
    Quiet(Option<Instant>),
}

/// A reader thread's buffers: its copy of the datagram it reads
/// (`Sim::scratch`'s role), the transmit buffer its probes write into
/// (`Sim::tx_buf`'s), and the transmits its probes found, one after
/// another.
#[derive(Default)]
pub(super) struct ReaderBufs {
    pub(super) read: Vec<u8>,
    pub(super) tx: Vec<u8>,
    pub(super) sent: Vec<u8>,
}

impl ReaderBufs {
    pub(super) fn new() -> Self {
        Self {
            read: Vec::with_capacity(MAX_DATAGRAM),
            tx: vec![0; MAX_DATAGRAM],
            sent: Vec::new(),
        }
    }
}

/// Whether a host may hand its machine's next datagram to its uplink.
pub(super) enum SendRoom {
    /// It may: sends do not block, or the uplink has room.
    Free,
    /// A datagram is held back already (its wake-up is armed).
    Held,
    /// A blocking send waits until the uplink has room for the largest
    /// datagram the host sends, at this time.
    FullUntil(u64),
}

/// [`SendRoom`] of `host` at `now` (a socket is writable when a full-size
/// send fits).
pub(super) fn send_room(host: &mut Host, sc: &Scenario, is_sender: bool, now: u64) -> SendRoom {
    if !sc.blocking_send {
        return SendRoom::Free;
    }
    if host.pending_send.is_some() {
        return SendRoom::Held;
    }
    let largest = if is_sender {
        sc.config.packet_size
    } else {
        sc.mtu.saturating_sub(28).max(1)
    };
    match host
        .uplink
        .room_at(now, sc.wire_bytes(largest))
        .filter(|&at| at > now)
    {
        Some(at) => SendRoom::FullUntil(at),
        None => SendRoom::Free,
    }
}

/// Asks receiver host `host`, right after its read ended at `read.t`, what
/// [`Sim::service`] would ask it first: a transmit, else an event, else
/// its deadline. Like the read, this changes no host but `host`. A host
/// whose uplink would hold a send back is not asked ([`Probe::No`]):
/// `service` then arms the uplink's wake-up, which the queues hold.
pub(super) fn probe(
    host: &mut Host,
    cx: &ReadCtx<'_>,
    read: &mut Read,
    bufs: &mut ReaderBufs,
    thread: usize,
) {
    let now = read.t;
    if !matches!(send_room(host, cx.sc, false, now), SendRoom::Free) {
        return;
    }
    let Machine::Receivers(rxs) = &mut host.machine else {
        return;
    };
    let at = Instant::from_nanos(now);
    read.probe = if let Some((_, t)) = rxs.endpoint.poll_transmit(at, &mut bufs.tx) {
        let start = bufs.sent.len();
        bufs.sent.extend_from_slice(&bufs.tx[..t.len]);
        Probe::Sent {
            t,
            thread,
            at: start,
        }
    } else if let Some((s, e)) = rxs.endpoint.poll_event() {
        Probe::Event(s, e)
    } else {
        Probe::Quiet(rxs.endpoint.poll_timeout())
    };
}

/// Host `h` reads the next datagram of its socket (there is one) and hands
/// it to its machine; what the machine delivers is checked against the
/// object. The part of a `Cpu` event that changes no host but `h`: its
/// sends, events and timer are [`Sim::cpu_done`]'s.
pub(super) fn read_datagram(
    host: &mut Host,
    h: usize,
    cx: &ReadCtx<'_>,
    scratch: &mut Vec<u8>,
) -> Result<Read, Fail> {
    let pkt = host
        .socket
        .pop_front()
        .expect("read_datagram is called with a datagram queued");
    let slot = &cx.pool.slots[pkt as usize];
    // The application read it: the socket buffer frees the space now.
    host.socket_bytes -= slot.bytes.len();
    let jitter = if cx.cpu_jitter > 0 {
        host.cpu_rng.random_range(0..=cx.cpu_jitter)
    } else {
        0
    };
    let t = cx.now + cx.sc.cost_of(h).recv_ns(slot.bytes.len()) + jitter;
    let from = if slot.src == INTRUDER {
        intruder_addr()
    } else {
        host_addr(usize::from(slot.src))
    };
    if slot.kind.is_none() {
        host.counters.garbage_seen += 1;
    }
    let at = Instant::from_nanos(t);
    scratch.clear();
    scratch.extend_from_slice(&slot.bytes);
    match &mut host.machine {
        Machine::Sender(s) => s.handle_datagram(at, from, scratch),
        Machine::Receivers(rxs) => {
            // The endpoint routes it, as the runtime's does. A machine that
            // keeps no copy of its data reads it back from what its
            // application was delivered.
            let routed = rxs.endpoint.route(from, scratch).map(|s| {
                let side = side_of(cx.sides, rxs.endpoint.session(s));
                let chunk = match (rxs.apps.get(s.0), side) {
                    (Some(app), Some(k)) => {
                        let object = &cx.sides[k].object;
                        let mut store = Stored { app, object };
                        rxs.endpoint
                            .deliver_reading(s, at, from, scratch, &mut store)
                    }
                    _ => rxs.endpoint.deliver(s, at, from, scratch),
                };
                (s, chunk)
            });
            rxs.sync_apps();
            if let Some((s, chunk)) = routed {
                let side = side_of(cx.sides, rxs.endpoint.session(s));
                let mut delivered = false;
                if let Some(chunk) = chunk {
                    let Some(k) = side else {
                        return Err(invariant(
                            t,
                            format!("host {h}: data of no sender's session delivered"),
                        ));
                    };
                    delivered = true;
                    if let Err(what) = deliver(&mut rxs.apps[s.0], &cx.sides[k].object, chunk) {
                        return Err(invariant(t, format!("host {h}: {what}")));
                    }
                }
                if let Some(k) = side {
                    // Packets the FEC rebuilt, checked as the received ones.
                    while let Some(chunk) = rxs.endpoint.poll_repaired(s) {
                        delivered = true;
                        if let Err(what) = deliver(&mut rxs.apps[s.0], &cx.sides[k].object, chunk) {
                            return Err(invariant(t, format!("host {h}: rebuilt {what}")));
                        }
                    }
                    let app = &mut rxs.apps[s.0];
                    if delivered && let Some(ranges) = held_now(app, &cx.sides[k].object) {
                        let barrier = app.held.take().map_or(0, |(b, _)| b);
                        rxs.endpoint
                            .session_mut(s)
                            .report_held(at, barrier, &ranges);
                    }
                }
            }
        }
    }
    Ok(Read {
        pkt,
        t,
        probe: Probe::No,
    })
}
