//! Reading the overlay's control frames (`rmcast_wire::overlay`) from a
//! blocking socket: the I/O half of the framing, which the wire crate
//! leaves to its users.

use rmcast_wire::overlay::{HEADER_LEN, Msg, MsgKind};
use std::io::{self, Read};

/// Reads frames from a blocking socket with a read timeout, keeping a
/// partly read frame across timeouts.
#[derive(Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    have: usize,
    want: usize,
    /// The type of the frame whose payload is being read, once its header is in.
    kind: Option<MsgKind>,
}

impl FrameReader {
    /// Reads until a whole frame arrived (`Ok(Some)`), the read timed out
    /// (`Ok(None)`), or the connection ended or sent garbage (`Err`).
    pub(crate) fn read(&mut self, r: &mut impl Read) -> io::Result<Option<Msg>> {
        loop {
            if self.want == 0 {
                self.want = HEADER_LEN;
                self.have = 0;
                self.buf.resize(HEADER_LEN, 0);
            }
            while self.have < self.want {
                match r.read(&mut self.buf[self.have..self.want]) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connection closed",
                        ));
                    }
                    Ok(n) => self.have += n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        return Ok(None);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            let kind = match self.kind.take() {
                Some(kind) => kind,
                None => {
                    let (kind, len) = Msg::parse_header(&self.buf)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    self.want = HEADER_LEN + len;
                    self.buf.resize(self.want, 0);
                    if len > 0 {
                        self.kind = Some(kind);
                        continue;
                    }
                    kind
                }
            };
            self.want = 0;
            let msg = Msg::parse_payload(kind, &self.buf[HEADER_LEN..])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            return Ok(Some(msg));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, RngCore, SeedableRng};
    use rmcast_wire::overlay::{MAGIC, VERSION, sample_messages};

    #[test]
    fn frame_reader_reads_every_message_whole() {
        for m in sample_messages() {
            let frame = m.to_frame();
            let mut r = FrameReader::default();
            assert_eq!(r.read(&mut &frame[..]).unwrap(), Some(m));
        }
    }

    #[test]
    fn frame_reader_reads_frames_back_to_back() {
        let msgs = sample_messages();
        let stream: Vec<u8> = msgs.iter().flat_map(Msg::to_frame).collect();
        let mut src = &stream[..];
        let mut r = FrameReader::default();
        for m in msgs {
            assert_eq!(r.read(&mut src).unwrap(), Some(m));
        }
        assert_eq!(
            r.read(&mut src).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn frame_reader_survives_arbitrary_bytes() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let samples: Vec<Vec<u8>> = sample_messages().iter().map(Msg::to_frame).collect();
        for round in 0..200_000 {
            let bytes: Vec<u8> = if round % 2 == 0 {
                // Random garbage behind a plausible header.
                let len = rng.random_range(0..200usize);
                let mut v = vec![0u8; HEADER_LEN + len];
                rng.fill_bytes(&mut v);
                v[0..2].copy_from_slice(&MAGIC);
                v[2] = VERSION;
                v[3] = rng.random_range(0..=MsgKind::Hash.to_u8() + 1);
                v[4..8].copy_from_slice(&(len as u32).to_be_bytes());
                v
            } else {
                // A valid frame with a few bytes flipped.
                let mut v = samples[round % samples.len()].clone();
                for _ in 0..rng.random_range(1..4) {
                    let i = rng.random_range(0..v.len());
                    v[i] = rng.random();
                }
                v
            };
            let _ = FrameReader::default().read(&mut &bytes[..]);
        }
    }

    #[test]
    fn frame_reader_keeps_a_partial_frame_across_timeouts() {
        struct Trickle<'a> {
            data: &'a [u8],
            calls: usize,
        }
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.calls += 1;
                if self.calls.is_multiple_of(2) {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                if self.data.is_empty() {
                    return Ok(0);
                }
                buf[0] = self.data[0];
                self.data = &self.data[1..];
                Ok(1)
            }
        }
        let m = sample_messages()[2].clone();
        let frame = m.to_frame();
        let mut src = Trickle {
            data: &frame,
            calls: 0,
        };
        let mut r = FrameReader::default();
        let mut got = None;
        for _ in 0..10 * frame.len() {
            if let Some(msg) = r.read(&mut src).unwrap() {
                got = Some(msg);
                break;
            }
        }
        assert_eq!(got, Some(m));
        assert!(r.read(&mut src).is_err() || r.read(&mut src).is_err());
    }
}
