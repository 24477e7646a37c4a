//! The pure bookkeeping of batched UDP I/O, kept apart from the system calls
//! so that it can be tested without sockets: which datagrams may share one
//! GSO send ([`TxBatch`]), and how a GRO buffer splits back into the
//! datagrams it coalesced ([`gro_split`]).

use rmcast_proto::MAX_DATAGRAM;
use std::net::SocketAddr;
use std::ops::Range;

/// Most segments the kernel accepts in one GSO send (`UDP_MAX_SEGMENTS`).
pub(crate) const GSO_MAX_SEGMENTS: usize = 64;
/// Most payload bytes one GSO send may carry: an IPv4 datagram holds at most
/// 65,507 bytes of UDP payload, less a margin.
pub(crate) const GSO_MAX_BYTES: usize = 65_000;

/// What became of a datagram handed to [`TxBatch::push`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// It joined the batch, which may take more.
    Joined,
    /// It joined (or started) the batch, which can take no more: send it.
    Full,
    /// It cannot share the batch; it waits behind it until the batch is sent.
    Behind,
}

/// One datagram written behind the batch, waiting for the batch to go.
#[derive(Clone, Copy, Debug)]
struct Tail {
    to: SocketAddr,
    len: usize,
    batchable: bool,
}

/// A run of datagrams to one destination, all of one size except perhaps a
/// shorter last one, laid end to end in one buffer: exactly what one
/// `sendmsg` with `UDP_SEGMENT` carries (or one `sendmmsg` without GSO).
///
/// The producer writes each datagram into [`TxBatch::slot`] (always
/// [`MAX_DATAGRAM`] bytes, right behind the batch) and then calls
/// [`TxBatch::push`]; a datagram that cannot join waits there as the tail
/// and becomes the next batch once [`TxBatch::advance`] has consumed this one.
pub(crate) struct TxBatch {
    buf: Box<[u8]>,
    to: Option<SocketAddr>,
    /// Size of every segment but the last.
    segment: usize,
    /// Datagrams in the batch.
    count: usize,
    /// Datagrams of the batch already sent (a short `sendmmsg`).
    sent: usize,
    /// Bytes in the batch: `buf[..end]`.
    end: usize,
    /// Whether another datagram may still join.
    open: bool,
    tail: Option<Tail>,
    max_segments: usize,
}

impl TxBatch {
    /// An empty batch of at most `max_segments` datagrams (1..=64).
    pub(crate) fn new(max_segments: usize) -> Self {
        assert!((1..=GSO_MAX_SEGMENTS).contains(&max_segments));
        Self {
            buf: vec![0u8; GSO_MAX_BYTES + MAX_DATAGRAM].into_boxed_slice(),
            to: None,
            segment: 0,
            count: 0,
            sent: 0,
            end: 0,
            open: false,
            tail: None,
            max_segments,
        }
    }

    /// True when nothing waits to be sent.
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Where the next datagram goes: [`MAX_DATAGRAM`] bytes right behind
    /// the batch. `None` while a datagram waits behind it (send first).
    pub(crate) fn slot(&mut self) -> Option<&mut [u8]> {
        if self.tail.is_some() {
            return None;
        }
        Some(&mut self.buf[self.end..self.end + MAX_DATAGRAM])
    }

    /// Takes the `len` bytes just written into the slot, bound for `to`.
    /// Only `batchable` datagrams (data packets) share a batch with others.
    pub(crate) fn push(&mut self, to: SocketAddr, len: usize, batchable: bool) -> Pushed {
        assert!(self.tail.is_none(), "push without a free slot");
        assert!((1..=MAX_DATAGRAM).contains(&len));
        if self.count == 0 {
            self.start(to, len, batchable);
        } else if self.open && batchable && self.to == Some(to) && len <= self.segment {
            // Checked by `is_full` after the previous push.
            debug_assert!(self.count < self.max_segments && self.end + len <= GSO_MAX_BYTES);
            self.count += 1;
            self.end += len;
            // Only the last segment may be shorter than the others.
            self.open = len == self.segment;
        } else {
            self.tail = Some(Tail { to, len, batchable });
            return Pushed::Behind;
        }
        if self.is_full() {
            Pushed::Full
        } else {
            Pushed::Joined
        }
    }

    fn start(&mut self, to: SocketAddr, len: usize, batchable: bool) {
        self.to = Some(to);
        self.segment = len;
        self.count = 1;
        self.sent = 0;
        self.end = len;
        self.open = batchable;
    }

    /// True when no further datagram can join the batch.
    fn is_full(&self) -> bool {
        !self.open || self.count >= self.max_segments || self.end + self.segment > GSO_MAX_BYTES
    }

    /// The unsent part of the batch: destination, bytes, segment size.
    pub(crate) fn unsent(&self) -> Option<(SocketAddr, &[u8], usize)> {
        if self.count == 0 {
            return None;
        }
        let to = self.to.expect("a non-empty batch has a destination");
        let from = self.sent * self.segment;
        Some((to, &self.buf[from..self.end], self.segment))
    }

    /// Datagrams of the batch not yet sent.
    pub(crate) fn unsent_count(&self) -> usize {
        self.count - self.sent
    }

    /// Records that the first `datagrams` unsent datagrams are gone (sent,
    /// or dropped on an error). Once the whole batch is gone, the datagram
    /// waiting behind it becomes the next batch. True when the batch is gone.
    pub(crate) fn advance(&mut self, datagrams: usize) -> bool {
        assert!(datagrams <= self.count - self.sent);
        self.sent += datagrams;
        if self.sent < self.count {
            return false;
        }
        let tail_at = self.end;
        self.count = 0;
        self.sent = 0;
        self.end = 0;
        self.to = None;
        if let Some(t) = self.tail.take() {
            self.buf.copy_within(tail_at..tail_at + t.len, 0);
            self.start(t.to, t.len, t.batchable);
        }
        true
    }
}

/// The datagrams of one received buffer of `len` bytes that GRO coalesced
/// with segment size `stride` (every one `stride` bytes but a shorter last
/// one). A `stride` of zero means no coalescing: one datagram. An empty
/// datagram stays one empty datagram (the machine counts it as malformed).
pub(crate) fn gro_split(len: usize, stride: usize) -> impl Iterator<Item = Range<usize>> {
    let stride = if stride == 0 { len.max(1) } else { stride };
    let count = len.div_ceil(stride).max(1);
    (0..count).map(move |i| i * stride..((i + 1) * stride).min(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([239, 77, 0, 1], port))
    }

    /// Writes `len` bytes of `fill` into the slot and pushes them.
    fn put(b: &mut TxBatch, to: SocketAddr, len: usize, fill: u8, batchable: bool) -> Pushed {
        b.slot().expect("a free slot")[..len].fill(fill);
        b.push(to, len, batchable)
    }

    #[test]
    fn equal_data_datagrams_to_one_destination_share_a_batch() {
        let mut b = TxBatch::new(64);
        for i in 0..5u8 {
            assert_eq!(put(&mut b, addr(1), 1000, i, true), Pushed::Joined);
        }
        let (to, bytes, segment) = b.unsent().unwrap();
        assert_eq!((to, bytes.len(), segment), (addr(1), 5000, 1000));
        assert!(bytes[..1000].iter().all(|&x| x == 0));
        assert!(bytes[4000..].iter().all(|&x| x == 4));
    }

    #[test]
    fn a_shorter_datagram_ends_the_batch_as_its_last_segment() {
        let mut b = TxBatch::new(64);
        put(&mut b, addr(1), 1000, 1, true);
        assert_eq!(put(&mut b, addr(1), 300, 2, true), Pushed::Full);
        assert_eq!(put(&mut b, addr(1), 1000, 3, true), Pushed::Behind);
        assert_eq!(b.unsent().unwrap().1.len(), 1300);
        assert!(b.slot().is_none(), "no slot while a datagram waits behind");
    }

    #[test]
    fn a_longer_datagram_or_another_destination_waits_behind() {
        let mut b = TxBatch::new(64);
        put(&mut b, addr(1), 1000, 1, true);
        assert_eq!(put(&mut b, addr(1), 1001, 2, true), Pushed::Behind);
        b.advance(1);
        assert_eq!(b.unsent().unwrap().1, &[2u8; 1001][..]);
        assert_eq!(put(&mut b, addr(2), 1001, 3, true), Pushed::Behind);
        b.advance(1);
        let (to, bytes, _) = b.unsent().unwrap();
        assert_eq!((to, bytes), (addr(2), &[3u8; 1001][..]));
    }

    #[test]
    fn control_datagrams_travel_alone() {
        let mut b = TxBatch::new(64);
        assert_eq!(put(&mut b, addr(1), 100, 1, false), Pushed::Full);
        assert_eq!(put(&mut b, addr(1), 100, 2, false), Pushed::Behind);
        b.advance(1);
        assert_eq!(b.unsent().unwrap().1, &[2u8; 100][..]);
        // A data packet does not join a control packet either.
        assert_eq!(put(&mut b, addr(1), 100, 3, true), Pushed::Behind);
    }

    #[test]
    fn a_batch_holds_at_most_44_full_ethernet_packets() {
        let mut b = TxBatch::new(64);
        let mut n = 1;
        while put(&mut b, addr(1), 1472, 0, true) == Pushed::Joined {
            n += 1;
        }
        assert_eq!(n, 44);
        assert_eq!(b.unsent().unwrap().1.len(), 44 * 1472);
        assert!(b.unsent().unwrap().1.len() <= GSO_MAX_BYTES);
    }

    #[test]
    fn a_batch_holds_at_most_max_segments() {
        let mut b = TxBatch::new(4);
        for _ in 0..3 {
            assert_eq!(put(&mut b, addr(1), 100, 0, true), Pushed::Joined);
        }
        assert_eq!(put(&mut b, addr(1), 100, 0, true), Pushed::Full);
        let mut b = TxBatch::new(64);
        for _ in 0..63 {
            assert_eq!(put(&mut b, addr(1), 100, 0, true), Pushed::Joined);
        }
        assert_eq!(put(&mut b, addr(1), 100, 0, true), Pushed::Full);
    }

    #[test]
    fn partial_sends_leave_the_rest_of_the_batch() {
        let mut b = TxBatch::new(64);
        for i in 0..4u8 {
            put(&mut b, addr(1), 10, i, true);
        }
        assert!(!b.advance(3));
        assert_eq!(b.unsent_count(), 1);
        assert_eq!(b.unsent().unwrap().1, &[3u8; 10][..]);
        assert!(b.advance(1));
        assert!(b.is_empty() && b.unsent().is_none());
        assert_eq!(put(&mut b, addr(1), 10, 9, true), Pushed::Joined);
    }

    #[test]
    fn the_datagram_behind_becomes_an_open_batch() {
        let mut b = TxBatch::new(64);
        put(&mut b, addr(1), 50, 1, false);
        assert_eq!(put(&mut b, addr(1), 1000, 2, true), Pushed::Behind);
        b.advance(1);
        assert_eq!(put(&mut b, addr(1), 1000, 3, true), Pushed::Joined);
        let bytes = b.unsent().unwrap().1;
        assert_eq!(bytes.len(), 2000);
        assert!(bytes[..1000].iter().all(|&x| x == 2));
        assert!(bytes[1000..].iter().all(|&x| x == 3));
    }

    #[test]
    fn gro_buffer_splits_into_stride_sized_datagrams_and_a_short_last() {
        let parts: Vec<_> = gro_split(3500, 1000).collect();
        assert_eq!(parts, vec![0..1000, 1000..2000, 2000..3000, 3000..3500]);
        let parts: Vec<_> = gro_split(3000, 1000).collect();
        assert_eq!(parts, vec![0..1000, 1000..2000, 2000..3000]);
    }

    #[test]
    fn gro_buffer_without_stride_is_one_datagram() {
        assert_eq!(gro_split(1472, 0).collect::<Vec<_>>(), vec![0..1472]);
        // A single datagram no longer than the stride.
        assert_eq!(gro_split(700, 1472).collect::<Vec<_>>(), vec![0..700]);
    }

    #[test]
    fn empty_datagram_stays_one_empty_datagram() {
        assert_eq!(gro_split(0, 0).collect::<Vec<_>>(), vec![0..0]);
        assert_eq!(gro_split(0, 1000).collect::<Vec<_>>(), vec![0..0]);
    }
}
