//! What crosses the wire and the report files: the blast datagram header
//! and the JSON reports the sender and each receiver write.

use serde::{Deserialize, Serialize};

/// `RMBL`.
pub const MAGIC: [u8; 4] = *b"RMBL";
/// Header bytes at the start of every datagram (the smallest `--size`).
pub const HEADER_LEN: usize = 24;
/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65507;
/// IPv4 + UDP header bytes, for bit rates on the wire.
pub const IP_UDP_OVERHEAD: usize = 28;

/// What a datagram is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Payload; `seq` is its sequence number.
    Data,
    /// End of the blast; `seq` is the number of data datagrams sent.
    End,
}

/// The blast header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Data or end marker.
    pub kind: Kind,
    /// Sequence number (data) or count sent (end).
    pub seq: u64,
    /// Send time, ns since the Unix epoch.
    pub stamp_ns: u64,
}

impl Header {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`HEADER_LEN`].
    pub fn encode(&self, buf: &mut [u8]) {
        buf[..4].copy_from_slice(&MAGIC);
        buf[4] = match self.kind {
            Kind::Data => 0,
            Kind::End => 1,
        };
        buf[5..8].fill(0);
        buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        buf[16..24].copy_from_slice(&self.stamp_ns.to_be_bytes());
    }

    /// Reads a header; `None` for anything that is not a blast datagram.
    pub fn decode(buf: &[u8]) -> Option<Header> {
        if buf.len() < HEADER_LEN || buf[..4] != MAGIC || buf[5..8] != [0, 0, 0] {
            return None;
        }
        let kind = match buf[4] {
            0 => Kind::Data,
            1 => Kind::End,
            _ => return None,
        };
        let u64_at = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().unwrap_or([0; 8]));
        Some(Header {
            kind,
            seq: u64_at(8),
            stamp_ns: u64_at(16),
        })
    }
}

/// What the sender did (one JSON line on stdout).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SendReport {
    /// Always `blast-send`.
    pub role: String,
    /// Data datagrams the kernel accepted (= sequence numbers used).
    pub sent: u64,
    /// Send attempts that failed (ENOBUFS, EAGAIN, others).
    pub errors: u64,
    /// Of which ENOBUFS.
    pub enobufs: u64,
    /// Of which EAGAIN/EWOULDBLOCK.
    pub eagain: u64,
    /// UDP payload bytes per datagram.
    pub size: usize,
    /// The rate asked for (0: unpaced).
    pub target_pps: f64,
    /// Datagrams sent per second, first to last send.
    pub pps: f64,
    /// Payload bytes per second.
    pub bytes_per_s: f64,
    /// First to last send, seconds.
    pub seconds: f64,
}

/// What one receiver saw (one JSON line on stdout).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RecvReport {
    /// Always `blast-recv`.
    pub role: String,
    /// Distinct data datagrams received.
    pub received: u64,
    /// Datagrams sent, from the end marker (or highest sequence + 1 without one).
    pub expected: u64,
    /// Whether an end marker arrived.
    pub end_seen: bool,
    /// 1 − received / expected.
    pub loss: f64,
    /// Datagrams whose sequence number had been seen already.
    pub duplicates: u64,
    /// Datagrams older than the highest sequence number seen.
    pub reordered: u64,
    /// Datagrams without a blast header.
    pub foreign: u64,
    /// Payload bytes received (distinct data datagrams).
    pub bytes: u64,
    /// Payload bytes per second, first to last datagram.
    pub bytes_per_s: f64,
    /// Datagrams per second, first to last datagram.
    pub pps: f64,
    /// First to last datagram, seconds.
    pub seconds: f64,
    /// Median one-way delay (send stamp to arrival), ms; same clock only.
    pub delay_ms_median: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let mut buf = [0u8; 64];
        for h in [
            Header {
                kind: Kind::Data,
                seq: 0,
                stamp_ns: 1,
            },
            Header {
                kind: Kind::End,
                seq: u64::MAX,
                stamp_ns: u64::MAX,
            },
        ] {
            h.encode(&mut buf);
            assert_eq!(Header::decode(&buf), Some(h));
            assert_eq!(Header::decode(&buf[..HEADER_LEN]), Some(h));
            assert_eq!(Header::decode(&buf[..HEADER_LEN - 1]), None);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_bad_headers_are_refused() {
        // A small xorshift: deterministic, no extra dependency.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Half the time, a valid magic so the later checks are reached.
            if len >= 4 && next() % 2 == 0 {
                b[..4].copy_from_slice(&MAGIC);
            }
            if let Some(h) = Header::decode(&b) {
                assert!(b.len() >= HEADER_LEN && b[..4] == MAGIC);
                let mut again = vec![0u8; HEADER_LEN];
                h.encode(&mut again);
                assert_eq!(again[..], b[..HEADER_LEN]);
            }
        }
        let mut b = [0u8; HEADER_LEN];
        Header {
            kind: Kind::Data,
            seq: 7,
            stamp_ns: 0,
        }
        .encode(&mut b);
        b[4] = 2;
        assert_eq!(Header::decode(&b), None, "unknown kind");
        b[4] = 0;
        b[6] = 1;
        assert_eq!(Header::decode(&b), None, "reserved bytes must be zero");
    }
}
