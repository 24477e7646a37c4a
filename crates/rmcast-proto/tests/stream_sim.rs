//! PRMP scenarios on the seeded in-memory network (`stream_net`).

mod stream_net;

use rmcast_proto::stream::{StreamEvent, StreamReceiverEvent};
use stream_net::{Rng, Scenario, messages, run};

/// Every live receiver got exactly the messages sent, in order.
fn assert_delivered_all(
    out: &stream_net::Outcome,
    sent: &[Vec<u8>],
    who: impl Iterator<Item = usize>,
) {
    for i in who {
        assert_eq!(
            out.delivered[i].len(),
            sent.len(),
            "seed {}: receiver {i} got {} of {} messages",
            out.seed,
            out.delivered[i].len(),
            sent.len()
        );
        for (k, (got, want)) in out.delivered[i].iter().zip(sent).enumerate() {
            assert_eq!(
                got, want,
                "seed {}: receiver {i} message {k} differs",
                out.seed
            );
        }
    }
}

#[test]
fn invitation_handshake_admits_everyone_and_delivers_a_small_stream() {
    let mut sc = Scenario::new(1, 4);
    let mut rng = Rng::new(1);
    let msgs = messages(&mut rng, 50, 3000);
    sc.messages = msgs.clone();
    let out = run(sc);
    let joined = out
        .sender_events
        .iter()
        .filter(|(_, e)| matches!(e, StreamEvent::Joined(_)))
        .count();
    assert_eq!(joined, 4, "seed {}: {:?}", out.seed, out.sender_events);
    assert!(
        out.closed,
        "seed {}: not closed: {:?}",
        out.seed, out.sender_events
    );
    assert_delivered_all(&out, &msgs, 0..4);
    for i in 0..4 {
        assert!(
            out.receiver_events[i]
                .iter()
                .any(|(_, e)| *e == StreamReceiverEvent::Closed),
            "seed {}: receiver {i}: {:?}",
            out.seed,
            out.receiver_events[i]
        );
    }
}
