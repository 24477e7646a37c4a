//! Feedback policies: the only thing in which the reliability protocols differ.
//!
//! The engine around a policy is shared: session setup, the buffer handshake,
//! the sliding window, Go-back-N retransmission, suppression and the close
//! handshake. A policy decides which data packets ask for an acknowledgement
//! and from whom (the `poll` field of the data header). Receivers answer a
//! poll addressed to them with a cumulative `Ack` and send a `Nak` on a
//! sequence gap whatever the policy; the sender frees a packet once every
//! live receiver's cumulative acknowledgement has passed it.
//!
//! That rule already covers the ring protocol (receiver `k` is polled for
//! packets `s ≡ k (mod N)`, so after a full rotation every receiver has
//! reported past `s - N`). The tree protocol adds acknowledgement relaying on
//! the receivers; it extends this enum and the receiver's routing, nothing else.

use rmcast_wire::{POLL_ALL, POLL_NONE, ProtocolId};

/// Which data packets ask which receivers for an acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedbackPolicy {
    /// Every receiver acknowledges every data packet (the paper's ACK-based
    /// protocol): N control packets per data packet.
    Ack,
    /// Receivers stay silent except for NAKs; every `poll_interval`-th packet
    /// and the last one are acknowledged by all (NAK-based with polling):
    /// N / i control packets per data packet.
    NakPoll {
        /// Packets between polls (`i`); at most the window.
        poll_interval: u32,
    },
}

impl FeedbackPolicy {
    /// The protocol this policy implements.
    #[must_use]
    pub fn protocol(&self) -> ProtocolId {
        match self {
            FeedbackPolicy::Ack => ProtocolId::Ack,
            FeedbackPolicy::NakPoll { .. } => ProtocolId::NakPoll,
        }
    }

    /// The poll field for the first transmission of data packet `index` of
    /// an object of `packets` packets.
    #[must_use]
    pub fn poll_for(&self, index: u32, packets: u32) -> u16 {
        let last = index + 1 == packets;
        match *self {
            FeedbackPolicy::Ack => POLL_ALL,
            FeedbackPolicy::NakPoll { poll_interval } => {
                if last || (index + 1).is_multiple_of(poll_interval) {
                    POLL_ALL
                } else {
                    POLL_NONE
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nak_poll_polls_every_ith_and_the_last_packet() {
        let p = FeedbackPolicy::NakPoll { poll_interval: 4 };
        let polled: Vec<u32> = (0..10).filter(|&i| p.poll_for(i, 10) == POLL_ALL).collect();
        assert_eq!(polled, vec![3, 7, 9]);
    }

    #[test]
    fn ack_polls_every_packet() {
        assert!((0..10).all(|i| FeedbackPolicy::Ack.poll_for(i, 10) == POLL_ALL));
    }
}
