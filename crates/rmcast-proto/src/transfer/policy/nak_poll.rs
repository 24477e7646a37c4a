//! NAK-based with polling: receivers stay silent except for NAKs; every
//! `poll_interval`-th packet and the last one are acknowledged by all,
//! N / i control packets per data packet.

use rmcast_wire::{POLL_ALL, POLL_NONE};

/// The poll field of data packet `index` of `packets`.
pub(super) fn poll_for(index: u32, packets: u32, poll_interval: u32) -> u16 {
    let last = index + 1 == packets;
    if last || (index + 1).is_multiple_of(poll_interval) {
        POLL_ALL
    } else {
        POLL_NONE
    }
}

#[cfg(test)]
mod tests {
    use super::super::FeedbackPolicy;
    use rmcast_wire::POLL_ALL;

    #[test]
    fn nak_poll_polls_every_ith_and_the_last_packet() {
        let p = FeedbackPolicy::NakPoll { poll_interval: 4 };
        let polled: Vec<u32> = (0..10).filter(|&i| p.poll_for(i, 10) == POLL_ALL).collect();
        assert_eq!(polled, vec![3, 7, 9]);
    }
}
