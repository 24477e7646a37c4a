//! Helpers for the sender's unit tests: a machine driven by hand in virtual
//! time, with the datagrams a receiver would send.

use super::member::PollState;
use super::{Admission, StreamEvent, StreamSender, StreamSenderConfig};
use crate::{Dest, Instant};
use rmcast_wire::stream::{Accept, ConnectRequest, Response, StreamBody, StreamKind, StreamPacket};
use rmcast_wire::{Header, MAX_DATAGRAM, RANK_UNASSIGNED, Seq, SessionId};
use std::net::SocketAddr;
use std::time::Duration;

pub(super) const SESSION: SessionId = SessionId(7);
pub(super) const ISN: Seq = Seq(100);

pub(super) fn ms(x: u64) -> Instant {
    Instant::from_nanos(x * 1_000_000)
}

pub(super) fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 1, 1 + i as u8], 6000))
}

/// Invitation of `n` receivers, a 64-packet send buffer, messages up to 4
/// packets of 100 bytes.
pub(super) fn invite_config(n: usize) -> StreamSenderConfig {
    StreamSenderConfig {
        admission: Admission::Invite {
            receivers: (0..n).map(addr).collect(),
            concurrency: 8,
        },
        payload_size: 100,
        message_bytes_max: 400,
        send_buffer_packets: 64,
        ..StreamSenderConfig::default()
    }
}

pub(super) fn announce_config(duration: Duration) -> StreamSenderConfig {
    StreamSenderConfig {
        admission: Admission::Announce {
            duration,
            interval: Duration::from_millis(20),
            receivers_max: 4,
        },
        ..StreamSenderConfig::default()
    }
}

pub(super) fn sender(config: StreamSenderConfig) -> StreamSender {
    StreamSender::new(config, SESSION, ISN, 42, [0x42; 16], Instant::ZERO)
        .expect("a valid configuration")
}

/// Every datagram the sender has to send at `now`: destination, kind, bytes.
pub(super) fn drain(s: &mut StreamSender, now: Instant) -> Vec<(Dest, StreamKind, Vec<u8>)> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut out = Vec::new();
    while let Some(t) = s.poll_transmit(now, &mut buf) {
        out.push((t.dest, t.kind, buf[..t.len].to_vec()));
        assert!(out.len() < 10_000, "transmits forever");
    }
    out
}

pub(super) fn kinds(out: &[(Dest, StreamKind, Vec<u8>)]) -> Vec<StreamKind> {
    out.iter().map(|o| o.1).collect()
}

pub(super) fn events(s: &mut StreamSender) -> Vec<StreamEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn deliver(s: &mut StreamSender, now: Instant, from: SocketAddr, rank: u16, body: StreamBody<'_>) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let packet = StreamPacket {
        header: Header::new(SESSION, rank),
        body,
    };
    let n = packet.encode(&mut buf).expect("encodes");
    s.handle_datagram(now, from, &mut buf[..n]);
}

/// Member `i` answers its invitation with a buffer of `buffer_packets`.
pub(super) fn accept(s: &mut StreamSender, i: usize, now: Instant, buffer_packets: u32) {
    let nonce = s.members[i].nonce;
    let from = s.members[i].addr;
    let body = StreamBody::Accept(Accept {
        nonce,
        receiver_id: 1000 + i as u64,
        buffer_packets,
        name: "r",
    });
    deliver(s, now, from, i as u16, body);
}

/// A stranger at `from` asks to join (announcement model).
pub(super) fn connect_request(s: &mut StreamSender, now: Instant, from: SocketAddr, id: u64) {
    let body = StreamBody::ConnectRequest(ConnectRequest {
        receiver_id: id,
        buffer_packets: 1024,
        name: "late",
    });
    deliver(s, now, from, RANK_UNASSIGNED, body);
}

/// Member `i` answers its outstanding poll: it holds everything before
/// `cumulative` and the packets the `bitmap` names, with `window` free.
pub(super) fn respond(
    s: &mut StreamSender,
    i: usize,
    now: Instant,
    cumulative: Seq,
    window: u32,
    bitmap: &[u8],
    close: bool,
) {
    let PollState::Outstanding { poll_id, .. } = s.members[i].poll else {
        panic!(
            "member {i} has no outstanding poll: {:?}",
            s.members[i].poll
        );
    };
    let from = s.members[i].addr;
    let r = Response {
        poll_id,
        echo_ts_us: crate::stream::ts_us(now),
        held_us: 0,
        cumulative,
        window_packets: window,
        bitmap,
    };
    let body = if close {
        StreamBody::CloseAck(r)
    } else {
        StreamBody::Response(r)
    };
    deliver(s, now, from, i as u16, body);
}

/// Member `i` leaves.
pub(super) fn leave(s: &mut StreamSender, i: usize, now: Instant) {
    let from = s.members[i].addr;
    deliver(s, now, from, i as u16, StreamBody::Leave { text: "bye" });
}

/// A sender whose `n` invitees all joined at 1 ms with `buffer_packets`;
/// its events and handshake packets are drained.
pub(super) fn joined(n: usize, buffer_packets: u32) -> StreamSender {
    let mut s = sender(invite_config(n));
    drain(&mut s, Instant::ZERO);
    for i in 0..n {
        accept(&mut s, i, ms(1), buffer_packets);
    }
    drain(&mut s, ms(1));
    let ev = events(&mut s);
    assert_eq!(
        ev.last(),
        Some(&StreamEvent::Established { members: n }),
        "{ev:?}"
    );
    s
}

/// Steps the machine's timers (draining its output) until every member in
/// `who` has a poll outstanding; returns the time then.
pub(super) fn until_polled(s: &mut StreamSender, who: &[usize]) -> Instant {
    let mut now = Instant::ZERO;
    for _ in 0..1000 {
        if who
            .iter()
            .all(|&i| matches!(s.members[i].poll, PollState::Outstanding { .. }))
        {
            return now;
        }
        now = s.poll_timeout().expect("a timer");
        s.handle_timeout(now);
        drain(s, now);
    }
    panic!("members {who:?} never polled");
}

/// Runs the machine's timers up to `until` in steps of its own wake-ups,
/// draining its output at each; returns everything it sent.
pub(super) fn run_until(s: &mut StreamSender, until: Instant) -> Vec<(Instant, Dest, StreamKind)> {
    let mut sent = Vec::new();
    let mut steps = 0;
    while let Some(t) = s.poll_timeout() {
        if t > until {
            break;
        }
        steps += 1;
        assert!(steps < 100_000, "timers never settle");
        s.handle_timeout(t);
        for (dest, kind, _) in drain(s, t) {
            sent.push((t, dest, kind));
        }
    }
    sent
}
