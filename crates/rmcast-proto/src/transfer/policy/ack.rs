//! The paper's ACK-based protocol: every receiver acknowledges every data
//! packet, N control packets per data packet, all at the sender.

use rmcast_wire::POLL_ALL;

/// The poll field of every data packet: everyone.
pub(super) fn poll_for() -> u16 {
    POLL_ALL
}

#[cfg(test)]
mod tests {
    use super::super::FeedbackPolicy;
    use rmcast_wire::POLL_ALL;

    #[test]
    fn ack_polls_every_packet() {
        assert!((0..10).all(|i| FeedbackPolicy::Ack.poll_for(i, 10) == POLL_ALL));
    }
}
