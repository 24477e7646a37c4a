//! The PRMP network scenarios of tests/stream_sim.rs, one builder each,
//! shared with the golden file (tests/stream_golden.rs). Each builds its
//! messages from its own seed; a test reads them back from
//! `StreamScenario::messages`.

#![allow(dead_code)]

use rmcast_proto::stream::{Admission, CongestionControl};
use rmcast_sim::stream::{Rng, StreamScenario, messages, secs};
use std::time::Duration;

/// A scenario of `receivers` with `count` messages of 0..=`max` bytes,
/// both drawn from `seed`.
fn with_messages(seed: u64, receivers: usize, count: usize, max: usize) -> StreamScenario {
    let mut sc = StreamScenario::new(seed, receivers);
    sc.messages = messages(&mut Rng::new(seed), count, max);
    sc
}

/// Four invitees, 50 small messages.
pub fn handshake() -> StreamScenario {
    with_messages(1, 4, 50, 3000)
}

/// Receiver 1's reader stops for 10 s (0.2 s to 10.2 s) under 1 % loss.
pub fn paused_reader() -> StreamScenario {
    let mut sc = with_messages(7, 3, 1500, 2500);
    sc.receiver.buffer_packets = 48;
    sc.sender.message_bytes_max = 8000;
    sc.sender.send_buffer_packets = 256;
    sc.down.jitter = Duration::from_micros(300);
    sc.down.loss = 0.01;
    sc.pauses = vec![(1, secs(0.2), secs(10.2))];
    sc.deadline = secs(60.0);
    sc
}

/// Receiver 2 of 5 crashes at 5 ms.
pub fn crash() -> StreamScenario {
    let mut sc = with_messages(11, 5, 3000, 2000);
    sc.crashes = vec![(2, secs(0.005))];
    sc
}

/// 100 invitees, a response rate of 2000/s in 5 ms epochs, jitter both
/// ways and 0.1 % loss.
pub fn response_rate_100() -> StreamScenario {
    let mut sc = with_messages(23, 100, 4000, 1200);
    sc.sender.response_rate = 2000;
    sc.sender.epoch = Duration::from_millis(5);
    sc.sender.admission = Admission::Invite {
        receivers: Vec::new(),
        concurrency: 16,
    };
    sc.down.jitter = Duration::from_micros(200);
    sc.up.jitter = Duration::from_micros(200);
    sc.down.loss = 0.001;
    sc
}

/// A 300 ms announcement for at most 5; six ask.
pub fn announce() -> StreamScenario {
    let mut sc = with_messages(31, 6, 100, 4000);
    sc.sender.admission = Admission::Announce {
        duration: Duration::from_millis(300),
        interval: Duration::from_millis(50),
        receivers_max: 5,
    };
    sc
}

/// Receiver 3 of 4 leaves at 4 ms.
pub fn leave() -> StreamScenario {
    let mut sc = with_messages(41, 4, 2000, 2000);
    sc.leaves = vec![(3, secs(0.004))];
    sc
}

/// Invitee 4 of 6 never starts; invitations two at a time.
pub fn absent_invitee() -> StreamScenario {
    let mut sc = with_messages(43, 6, 50, 1000);
    sc.absent = vec![4];
    sc.sender.admission = Admission::Invite {
        receivers: Vec::new(),
        concurrency: 2,
    };
    sc
}

/// Idle for 8 s with a 0.5 s keepalive; receiver 0 crashes at 2 s.
pub fn keepalive_idle_crash() -> StreamScenario {
    let mut sc = StreamScenario::new(47, 3);
    sc.messages = vec![b"late".to_vec()];
    sc.send_from = secs(8.0);
    sc.crashes = vec![(0, secs(2.0))];
    sc.sender.keepalive = Duration::from_millis(500);
    sc.receiver.sender_timeout = Duration::from_secs(3);
    sc
}

/// TCP-like congestion control under 0.5 % loss.
pub fn cwnd_collapse() -> StreamScenario {
    let mut sc = with_messages(53, 4, 3000, 1200);
    sc.sender.congestion = CongestionControl::TcpLike;
    sc.down.loss = 0.005;
    sc
}

/// TCP-like congestion control without loss.
pub fn cwnd_grows() -> StreamScenario {
    let mut sc = with_messages(59, 3, 500, 1200);
    sc.sender.congestion = CongestionControl::TcpLike;
    sc
}

/// Eight receivers, 1 % loss on every downlink.
pub fn repairs() -> StreamScenario {
    let mut sc = with_messages(61, 8, 2000, 1200);
    sc.down.loss = 0.01;
    sc
}

/// A case's name and builder.
pub type Case = (&'static str, fn() -> StreamScenario);

/// Every case, by name.
pub fn all() -> Vec<Case> {
    vec![
        ("handshake", handshake),
        ("paused_reader", paused_reader),
        ("crash", crash),
        ("response_rate_100", response_rate_100),
        ("announce", announce),
        ("leave", leave),
        ("absent_invitee", absent_invitee),
        ("keepalive_idle_crash", keepalive_idle_crash),
        ("cwnd_collapse", cwnd_collapse),
        ("cwnd_grows", cwnd_grows),
        ("repairs", repairs),
    ]
}
