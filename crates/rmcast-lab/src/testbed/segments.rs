//! Segmented LANs (issue #23): several bridges joined only by relay hosts
//! that have one interface on each, with no IP forwarding or multicast
//! routing between them, so a session reaches another segment only through
//! `rmcast relay`.
//!
//! A scenario's `segments = [10, 10, 10]` gives the receivers per segment:
//! segment 0 holds the sender h0 and the first 10 receivers, and the
//! receivers of segment s follow those of segment s − 1 in host order
//! (h1..h10 on segment 0, h11..h20 on 1, h21..h30 on 2). Relay k (k ≥ 1)
//! feeds segment k: it has `eth0` on the segment it receives from and
//! `eth1` on segment k. By default that is segment k − 1 (a chain);
//! `relay_from = [0, 0]` hangs both relays off segment 0 instead (a tree:
//! each relay's upstream segment must come before its own). Everything
//! here is arithmetic (no root), so the plan can be tested anywhere.
//!
//! Addresses: segment s is 10.77.s.0/24. Its upstream host (h0 on segment
//! 0, relay s's `eth1` on the others) is 10.77.s.1, its j-th receiver
//! (j = 0, 1, …) 10.77.s.(j + 2), and relay k's `eth0` on the segment it
//! leaves 10.77.from.(255 − k).

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

/// Most segments a testbed may have.
pub const MAX_SEGMENTS: usize = 16;
/// Most receivers on one segment (addresses .2 ..= .231 of its /24; relays'
/// upstream ends take .239 ..= .254).
pub const MAX_PER_SEGMENT: u16 = 230;

/// Receivers per segment, segment 0 (the sender's) first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segments {
    receivers: Vec<u16>,
    /// The segment relay k receives from, at index k − 1.
    from: Vec<usize>,
}

/// A relay host of a testbed: `eth0` on its upstream segment, `eth1` on its
/// downstream one (loopback: both 127.0.0.1, no namespace).
#[derive(Clone, Debug)]
pub struct RelayHost {
    /// Namespace (`<id>-rK`; None on loopback).
    pub ns: Option<String>,
    /// Its address on the upstream segment (`eth0`).
    pub up_addr: Ipv4Addr,
    /// Its address on the downstream segment (`eth1`).
    pub down_addr: Ipv4Addr,
    /// The segment it receives from.
    pub from: usize,
    /// The segment it sends to.
    pub to: usize,
}

impl Segments {
    /// A chain: relay k from segment k − 1 ([`Segments::with_relays`]).
    pub fn new(receivers: &[u16]) -> Result<Segments, String> {
        let chain: Vec<usize> = (0..receivers.len().saturating_sub(1)).collect();
        Segments::with_relays(receivers, &chain)
    }

    /// Checks a scenario's `segments` and `relay_from`: 1..=16 segments,
    /// each with at most 230 receivers; one upstream segment per relay
    /// (relay k feeds segment k), each before k; and every segment with a
    /// member (a segment without receivers is only a transit for relays).
    pub fn with_relays(receivers: &[u16], from: &[usize]) -> Result<Segments, String> {
        if receivers.is_empty() || receivers.len() > MAX_SEGMENTS {
            return Err(format!(
                "segments must list 1..={MAX_SEGMENTS} receiver counts, not {}",
                receivers.len()
            ));
        }
        if let Some(n) = receivers.iter().find(|&&n| n > MAX_PER_SEGMENT) {
            return Err(format!(
                "a segment holds at most {MAX_PER_SEGMENT} receivers, not {n}"
            ));
        }
        if from.len() + 1 != receivers.len() {
            return Err(format!(
                "relay_from names the upstream segment of each relay 1..{}: {} values, not {}",
                receivers.len(),
                receivers.len() - 1,
                from.len()
            ));
        }
        if let Some((k, f)) = from.iter().enumerate().find(|&(k, &f)| f > k) {
            return Err(format!(
                "relay {} feeds segment {} and must receive from an earlier segment, not {f}",
                k + 1,
                k + 1
            ));
        }
        let seg = Segments {
            receivers: receivers.to_vec(),
            from: from.to_vec(),
        };
        if let Some(s) = (0..seg.count()).find(|&s| seg.members_of(s) == 0) {
            return Err(format!("segment {s} holds no receiver and feeds no relay"));
        }
        Ok(seg)
    }

    /// Receivers per segment, as given.
    pub fn per_segment(&self) -> &[u16] {
        &self.receivers
    }

    /// The segment each relay 1.. receives from (`relay_from`).
    pub fn upstreams(&self) -> &[usize] {
        &self.from
    }

    /// Whether the relays form the default chain (relay k from k − 1).
    pub fn is_chain(&self) -> bool {
        self.from.iter().enumerate().all(|(k, &f)| f == k)
    }

    /// How many segments (bridges).
    pub fn count(&self) -> usize {
        self.receivers.len()
    }

    /// How many relays: one per segment after the first.
    pub fn relays(&self) -> usize {
        self.count() - 1
    }

    /// Receivers on all segments together (hosts h1..hN).
    pub fn total(&self) -> usize {
        self.receivers.iter().map(|&n| usize::from(n)).sum()
    }

    /// The receiver host indices on segment `s` (empty when it has none).
    pub fn hosts_on(&self, s: usize) -> RangeInclusive<usize> {
        let before: usize = self.receivers[..s].iter().map(|&n| usize::from(n)).sum();
        before + 1..=before + usize::from(self.receivers[s])
    }

    /// The segment host `i` sits on (h0, the sender, on segment 0).
    pub fn segment_of(&self, i: usize) -> usize {
        if i == 0 {
            return 0;
        }
        let mut last = 0;
        for s in 0..self.count() {
            last += usize::from(self.receivers[s]);
            if i <= last {
                return s;
            }
        }
        panic!("host h{i} is beyond the {} receivers", self.total())
    }

    /// The segment relay `k` (1..count) receives from.
    pub fn relay_from(&self, k: usize) -> usize {
        self.from[k - 1]
    }

    /// The relays that receive from segment `s`.
    pub fn relays_from(&self, s: usize) -> Vec<usize> {
        (1..self.count())
            .filter(|&k| self.relay_from(k) == s)
            .collect()
    }

    /// Members the sender of segment `s` waits for (`--receivers`): its
    /// receivers plus each relay hanging off it, which registers as one.
    pub fn members_of(&self, s: usize) -> usize {
        usize::from(self.receivers[s]) + self.relays_from(s).len()
    }

    /// Host `i`'s address (h0 = 10.77.0.1; the j-th receiver of segment s
    /// = 10.77.s.(j + 2)).
    pub fn host_addr(&self, i: usize) -> Ipv4Addr {
        if i == 0 {
            return Ipv4Addr::new(10, 77, 0, 1);
        }
        let s = self.segment_of(i);
        let j = i - self.hosts_on(s).start();
        Ipv4Addr::new(10, 77, s as u8, (j + 2) as u8)
    }

    /// Relay `k`'s addresses: (`eth0` on the segment it receives from,
    /// `eth1` on segment k).
    pub fn relay_addrs(&self, k: usize) -> (Ipv4Addr, Ipv4Addr) {
        let from = self.relay_from(k);
        (
            Ipv4Addr::new(10, 77, from as u8, (255 - k) as u8),
            Ipv4Addr::new(10, 77, k as u8, 1),
        )
    }

    /// Segment `s`'s multicast group and port in a run whose first group
    /// is `group:port`: the group's last octet + s, the port + 2s (distinct
    /// ports too, so that loopback runs, where every segment shares one
    /// namespace, cannot cross either).
    pub fn group_of(&self, s: usize, group: Ipv4Addr, port: u16) -> (Ipv4Addr, u16) {
        let [a, b, c, d] = group.octets();
        (
            Ipv4Addr::new(a, b, c, d.wrapping_add(s as u8)),
            port + 2 * s as u16,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ten3() -> Segments {
        Segments::new(&[10, 10, 10]).unwrap()
    }

    #[test]
    fn hosts_sit_on_their_segments_in_order() {
        let s = ten3();
        assert_eq!((s.count(), s.relays(), s.total()), (3, 2, 30));
        assert_eq!(s.hosts_on(0), 1..=10);
        assert_eq!(s.hosts_on(1), 11..=20);
        assert_eq!(s.hosts_on(2), 21..=30);
        assert_eq!(s.segment_of(0), 0);
        assert_eq!(s.segment_of(10), 0);
        assert_eq!(s.segment_of(11), 1);
        assert_eq!(s.segment_of(30), 2);
        let uneven = Segments::new(&[0, 3, 1]).unwrap();
        assert!(uneven.hosts_on(0).is_empty());
        assert_eq!(uneven.hosts_on(1), 1..=3);
        assert_eq!(uneven.segment_of(4), 2);
    }

    #[test]
    fn every_segment_has_its_own_subnet_and_the_relays_straddle_two() {
        let s = ten3();
        assert_eq!(s.host_addr(0), Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(s.host_addr(1), Ipv4Addr::new(10, 77, 0, 2));
        assert_eq!(s.host_addr(10), Ipv4Addr::new(10, 77, 0, 11));
        assert_eq!(s.host_addr(11), Ipv4Addr::new(10, 77, 1, 2));
        assert_eq!(s.host_addr(30), Ipv4Addr::new(10, 77, 2, 11));
        assert_eq!(
            s.relay_addrs(1),
            (Ipv4Addr::new(10, 77, 0, 254), Ipv4Addr::new(10, 77, 1, 1))
        );
        assert_eq!(
            s.relay_addrs(2),
            (Ipv4Addr::new(10, 77, 1, 253), Ipv4Addr::new(10, 77, 2, 1))
        );
        let mut all: Vec<Ipv4Addr> = (0..=30).map(|i| s.host_addr(i)).collect();
        for k in 1..=2 {
            let (u, d) = s.relay_addrs(k);
            all.extend([u, d]);
        }
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "addresses are unique");
    }

    #[test]
    fn members_count_receivers_and_the_relay_to_the_next_segment() {
        let s = ten3();
        assert_eq!(s.members_of(0), 11);
        assert_eq!(s.members_of(1), 11);
        assert_eq!(s.members_of(2), 10);
        assert_eq!(s.relays_from(0), vec![1]);
        assert_eq!(s.relays_from(2), Vec::<usize>::new());
        assert_eq!(s.relay_from(2), 1);
        let transit = Segments::new(&[0, 2]).unwrap();
        assert_eq!(transit.members_of(0), 1);
    }

    #[test]
    fn groups_and_ports_differ_per_segment() {
        let s = ten3();
        let g = Ipv4Addr::new(239, 77, 5, 1);
        assert_eq!(s.group_of(0, g, 20000), (g, 20000));
        assert_eq!(
            s.group_of(2, g, 20000),
            (Ipv4Addr::new(239, 77, 5, 3), 20004)
        );
    }

    #[test]
    fn bad_layouts_are_refused() {
        assert!(Segments::new(&[]).is_err());
        assert!(Segments::new(&[3, 0]).is_err());
        assert!(Segments::new(&[231]).is_err());
        assert!(Segments::with_relays(&[1, 1, 1], &[0]).is_err());
        assert!(Segments::with_relays(&[1, 1, 1], &[0, 2]).is_err());
        // A transit segment must feed a relay.
        assert!(Segments::with_relays(&[1, 0, 1], &[0, 0]).is_err());
        assert!(Segments::with_relays(&[1, 0, 1], &[0, 1]).is_ok());
        assert!(Segments::new(&[1; 17]).is_err());
        assert!(Segments::new(&[0, 1]).is_ok());
    }

    #[test]
    fn a_tree_of_relays_hangs_two_segments_off_the_first() {
        let s = Segments::with_relays(&[4, 3, 2], &[0, 0]).unwrap();
        assert!(!s.is_chain() && ten3().is_chain());
        assert_eq!(s.relays_from(0), vec![1, 2]);
        assert_eq!(s.members_of(0), 6, "4 receivers + r1 + r2");
        assert_eq!(s.members_of(1), 3);
        assert_eq!(s.members_of(2), 2);
        // Both relays' upstream ends are on segment 0, at distinct addresses.
        assert_eq!(s.relay_addrs(1).0, Ipv4Addr::new(10, 77, 0, 254));
        assert_eq!(s.relay_addrs(2).0, Ipv4Addr::new(10, 77, 0, 253));
        assert_eq!(s.relay_addrs(2).1, Ipv4Addr::new(10, 77, 2, 1));
        assert_eq!(s.hosts_on(2), 8..=9);
    }
}
