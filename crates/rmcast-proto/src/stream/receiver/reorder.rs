//! The receiver's bounded reorder buffer: packet slots allocated once at
//! the invitation, a cumulative point, and whole messages read out in
//! order, each once. Its size is the window the receiver advertises, so a
//! sender that respects the window never finds it full.

use rmcast_wire::Seq;
use rmcast_wire::stream::{DATA_FIRST, DATA_LAST};

/// What became of an arriving data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stored {
    /// New: stored.
    New,
    /// Held already, or read already.
    Duplicate,
    /// At or past the window's right edge (the sender broke flow control).
    BeyondWindow,
    /// Larger than the packets this session carries.
    Malformed,
}

/// What [`ReorderBuffer::read`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Read {
    /// A whole message of this many bytes was appended.
    Message(usize),
    /// The next message is not complete yet.
    NotYet,
    /// The next packet does not start a message (only a broken sender does
    /// that): it was dropped rather than deliver a torn message.
    Torn,
}

/// Packets `read_seq .. read_seq + capacity`, in slots by sequence number.
#[derive(Debug)]
pub(super) struct ReorderBuffer {
    capacity: u32,
    payload_size: usize,
    /// `capacity × payload_size` bytes.
    data: Vec<u8>,
    len: Vec<u16>,
    flags: Vec<u8>,
    held: Vec<bool>,
    isn: Seq,
    /// Next packet the application reads.
    read_seq: Seq,
    /// First packet not held.
    cum: Seq,
    /// One past the highest packet known to exist.
    high: Seq,
}

impl ReorderBuffer {
    /// An empty buffer of `capacity` packets with no storage yet.
    pub(super) fn new(capacity: u32) -> Self {
        Self {
            capacity,
            payload_size: 0,
            data: Vec::new(),
            len: Vec::new(),
            flags: Vec::new(),
            held: Vec::new(),
            isn: Seq(0),
            read_seq: Seq(0),
            cum: Seq(0),
            high: Seq(0),
        }
    }

    /// Allocates the slots for a stream that starts at `isn` with packets
    /// of up to `payload_size` bytes.
    pub(super) fn start(&mut self, isn: Seq, payload_size: usize) {
        let b = self.capacity as usize;
        self.isn = isn;
        self.read_seq = isn;
        self.cum = isn;
        self.high = isn;
        self.payload_size = payload_size;
        self.data = vec![0; b * payload_size];
        self.len = vec![0; b];
        self.flags = vec![0; b];
        self.held = vec![false; b];
    }

    /// Next packet the application reads.
    pub(super) fn read_seq(&self) -> Seq {
        self.read_seq
    }

    /// First packet not held: the cumulative acknowledgement.
    pub(super) fn cum(&self) -> Seq {
        self.cum
    }

    /// Packets held and not yet read.
    pub(super) fn buffered(&self) -> u32 {
        self.cum.since(self.read_seq)
    }

    /// Packets from the cumulative point it can still take.
    pub(super) fn window(&self) -> u32 {
        self.capacity - self.buffered()
    }

    /// The exclusive right edge of the window.
    pub(super) fn window_end(&self) -> Seq {
        self.read_seq.add(self.capacity)
    }

    /// The sender says packets up to `next_seq` exist.
    pub(super) fn note_high(&mut self, next_seq: Seq) {
        if next_seq > self.high {
            self.high = next_seq;
        }
    }

    /// Stores packet `seq` and advances the cumulative point.
    pub(super) fn insert(&mut self, seq: Seq, flags: u8, payload: &[u8]) -> Stored {
        if payload.len() > self.payload_size {
            return Stored::Malformed;
        }
        if seq < self.cum {
            return Stored::Duplicate;
        }
        if seq.since(self.read_seq) >= self.capacity {
            return Stored::BeyondWindow;
        }
        let w = self.slot(seq);
        if self.held[w] {
            return Stored::Duplicate;
        }
        let p = self.payload_size;
        self.data[w * p..w * p + payload.len()].copy_from_slice(payload);
        self.len[w] = payload.len() as u16;
        self.flags[w] = flags;
        self.held[w] = true;
        if seq >= self.high {
            self.high = seq.add(1);
        }
        while self.cum.since(self.read_seq) < self.capacity && self.held[self.slot(self.cum)] {
            self.cum = self.cum.add(1);
        }
        Stored::New
    }

    /// Appends the next whole message to `out`, freeing its slots.
    pub(super) fn read(&mut self, out: &mut Vec<u8>) -> Read {
        if self.held.is_empty() || self.read_seq == self.cum {
            return Read::NotYet;
        }
        let first = self.slot(self.read_seq);
        if self.flags[first] & DATA_FIRST == 0 {
            self.free(self.read_seq);
            self.read_seq = self.read_seq.add(1);
            return Read::Torn;
        }
        let mut end = self.read_seq;
        loop {
            if end >= self.cum {
                return Read::NotYet;
            }
            if self.flags[self.slot(end)] & DATA_LAST != 0 {
                break;
            }
            end = end.add(1);
        }
        let start = out.len();
        let mut s = self.read_seq;
        while s <= end {
            let w = self.slot(s);
            let p = self.payload_size;
            out.extend_from_slice(&self.data[w * p..w * p + usize::from(self.len[w])]);
            self.free(s);
            s = s.add(1);
        }
        self.read_seq = end.add(1);
        Read::Message(out.len() - start)
    }

    /// Writes the bitmap of packets held past the cumulative point, up to
    /// the highest known (at most the buffer), into `bitmap`; returns its
    /// length in bytes.
    pub(super) fn held_bitmap(&self, bitmap: &mut [u8]) -> usize {
        let span = self
            .high
            .since(self.cum)
            .saturating_sub(1)
            .min(self.capacity);
        let bytes = (span as usize).div_ceil(8);
        bitmap[..bytes].fill(0);
        for i in 0..span {
            let s = self.cum.add(1 + i);
            if s.since(self.read_seq) < self.capacity && self.held[self.slot(s)] {
                bitmap[(i / 8) as usize] |= 1 << (i % 8);
            }
        }
        bytes
    }

    fn slot(&self, s: Seq) -> usize {
        (s.since(self.isn) % self.capacity) as usize
    }

    fn free(&mut self, s: Seq) {
        let w = self.slot(s);
        self.held[w] = false;
        self.flags[w] = 0;
        self.len[w] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(capacity: u32, isn: Seq) -> ReorderBuffer {
        let mut b = ReorderBuffer::new(capacity);
        b.start(isn, 4);
        b
    }

    fn read_all(b: &mut ReorderBuffer) -> Vec<Vec<u8>> {
        let mut msgs = Vec::new();
        loop {
            let mut out = Vec::new();
            match b.read(&mut out) {
                Read::Message(n) => {
                    assert_eq!(n, out.len());
                    msgs.push(out);
                }
                Read::NotYet => return msgs,
                Read::Torn => panic!("torn"),
            }
        }
    }

    #[test]
    fn out_of_order_fragments_make_whole_messages_in_order_once() {
        let mut b = buffer(8, Seq(10));
        // Message A = 10..=11, message B = 12 alone; arrival 12, 11, 10.
        assert_eq!(
            b.insert(Seq(12), DATA_FIRST | DATA_LAST, b"bb"),
            Stored::New
        );
        assert_eq!(b.insert(Seq(11), DATA_LAST, b"a2"), Stored::New);
        assert_eq!(b.cum(), Seq(10));
        assert!(read_all(&mut b).is_empty());
        assert_eq!(b.insert(Seq(10), DATA_FIRST, b"a1a1"), Stored::New);
        assert_eq!(b.cum(), Seq(13));
        assert_eq!(read_all(&mut b), [b"a1a1a2".to_vec(), b"bb".to_vec()]);
        assert_eq!(b.insert(Seq(11), DATA_LAST, b"a2"), Stored::Duplicate);
        assert_eq!(b.buffered(), 0);
    }

    #[test]
    fn the_window_closes_as_unread_packets_pile_up_and_reopens_on_read() {
        let mut b = buffer(4, Seq(u32::MAX - 1)); // across the wrap
        for k in 0..4 {
            let s = Seq(u32::MAX - 1).add(k);
            assert_eq!(b.insert(s, DATA_FIRST | DATA_LAST, &[k as u8]), Stored::New);
        }
        assert_eq!((b.buffered(), b.window()), (4, 0));
        assert_eq!(
            b.insert(Seq(u32::MAX - 1).add(4), DATA_FIRST | DATA_LAST, b"x"),
            Stored::BeyondWindow
        );
        let mut out = Vec::new();
        assert_eq!(b.read(&mut out), Read::Message(1));
        assert_eq!((b.window(), b.window_end()), (1, Seq(u32::MAX - 1).add(5)));
        assert_eq!(b.insert(Seq(1), 0, b"toolong"), Stored::Malformed);
    }

    #[test]
    fn a_message_without_its_first_fragment_is_dropped_not_torn() {
        let mut b = buffer(4, Seq(0));
        b.insert(Seq(0), DATA_LAST, b"zz");
        b.insert(Seq(1), DATA_FIRST | DATA_LAST, b"ok");
        let mut out = Vec::new();
        assert_eq!(b.read(&mut out), Read::Torn);
        assert_eq!(b.read(&mut out), Read::Message(2));
        assert_eq!(out, b"ok");
    }

    #[test]
    fn the_bitmap_names_what_is_held_past_the_cumulative_point() {
        let mut b = buffer(16, Seq(0));
        b.insert(Seq(2), 0, b"");
        b.insert(Seq(4), 0, b"");
        b.note_high(Seq(12));
        let mut bitmap = [0xffu8; 2];
        // Past cum = 0: seq 1 (bit 0) missing, 2 held, 3 missing, 4 held, up to 11.
        assert_eq!(b.held_bitmap(&mut bitmap), 2);
        assert_eq!(bitmap, [0b1010, 0]);
    }

    #[test]
    fn nothing_is_read_before_the_stream_starts() {
        let mut b = ReorderBuffer::new(4);
        assert_eq!(b.read(&mut Vec::new()), Read::NotYet);
        assert_eq!((b.buffered(), b.window()), (0, 4));
    }
}
