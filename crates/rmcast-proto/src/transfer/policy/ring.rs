//! Ring-based: receivers take turns, rank `s mod N` acknowledges packet `s`
//! (cumulatively) and everyone the last packet: one control packet per
//! data packet. The engine's release rule (min over cumulative acks) is
//! exactly the ring's, so the ring is this poll rule alone; its window
//! must exceed N.

use rmcast_wire::POLL_ALL;

/// The poll field of data packet `index` of `packets`.
pub(super) fn poll_for(index: u32, packets: u32, receivers: u16) -> u16 {
    if index + 1 == packets {
        POLL_ALL
    } else {
        (index % u32::from(receivers)) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::super::FeedbackPolicy;
    use rmcast_wire::POLL_ALL;

    #[test]
    fn ring_rotates_the_token_and_everyone_acks_the_last_packet() {
        let p = FeedbackPolicy::Ring { receivers: 3 };
        let polls: Vec<u16> = (0..7).map(|i| p.poll_for(i, 7)).collect();
        assert_eq!(polls, vec![0, 1, 2, 0, 1, 2, POLL_ALL]);
    }
}
