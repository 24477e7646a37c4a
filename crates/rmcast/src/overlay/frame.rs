//! Reading the overlay's control frames (`rmcast_wire::overlay`) from a
//! blocking socket: the I/O half of the framing, which the wire crate
//! leaves to its users. On a keyed connection every control frame travels
//! in a sealed frame (`rmcast_proto::security::frames`), opened here.

use rmcast_proto::security::{FrameKind, Opener, parse_frame_header};
use rmcast_wire::overlay::{HEADER_LEN, MAX_PAYLOAD, Msg, MsgKind};
use std::io::{self, Read};

/// Largest sealed control frame: the largest plain frame, sealed.
const MAX_SEALED_CONTROL: usize = HEADER_LEN + MAX_PAYLOAD;
// Both framings start with an 8-byte header: the first read serves either.
const _: () = assert!(rmcast_proto::security::FRAME_HEADER_LEN == HEADER_LEN);

/// Reads frames from a blocking socket with a read timeout, keeping a
/// partly read frame across timeouts.
#[derive(Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    have: usize,
    want: usize,
    /// The type of the frame whose payload is being read, once its header is in.
    kind: Option<MsgKind>,
    /// Keyed: opens the sealed frames (their header read: `body`).
    opener: Option<Opener>,
    body: bool,
}

fn invalid(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl FrameReader {
    /// A reader of sealed control frames, opened with `opener`.
    pub(crate) fn sealed(opener: Opener) -> Self {
        Self {
            opener: Some(opener),
            ..Self::default()
        }
    }

    /// The opener back (a data connection's segments follow its hello).
    pub(crate) fn into_opener(self) -> Option<Opener> {
        self.opener
    }

    /// Reads until a whole frame arrived (`Ok(Some)`), the read timed out
    /// (`Ok(None)`), or the connection ended or sent garbage (`Err`; a
    /// frame that fails authentication is `InvalidData` with the
    /// [`rmcast_proto::security::FrameError`] inside, a sealed frame on a
    /// plain reader `InvalidData` with `DecodeError::Sealed`).
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
            if let Some(opener) = self.opener.as_mut() {
                if !self.body {
                    let h = parse_frame_header(&self.buf).map_err(invalid)?;
                    if h.kind != FrameKind::Control {
                        return Err(invalid(
                            "a sealed frame other than control on a control stream",
                        ));
                    }
                    if h.len > MAX_SEALED_CONTROL {
                        return Err(invalid(rmcast_proto::security::FrameError::TooLong(h.len)));
                    }
                    self.want = h.frame_len();
                    self.buf.resize(self.want, 0);
                    self.body = true;
                    continue;
                }
                self.body = false;
                let n = std::mem::take(&mut self.want);
                let msg = opener.open_msg(&mut self.buf[..n]).map_err(invalid)?;
                return Ok(Some(msg));
            }
            let kind = match self.kind.take() {
                Some(kind) => kind,
                None => {
                    let (kind, len) = Msg::parse_header(&self.buf).map_err(invalid)?;
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
            let msg = Msg::parse_payload(kind, &self.buf[HEADER_LEN..]).map_err(invalid)?;
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

    /// Both ends of a keyed connection (initiator, responder).
    fn channels() -> (
        rmcast_proto::security::Channel,
        rmcast_proto::security::Channel,
    ) {
        use rmcast_proto::security::{GroupKey, Initiator, respond};
        let key = std::sync::Arc::new(GroupKey::from_secret([3; 32]));
        let i = Initiator::new(key.clone(), Some(5), [1; 16]);
        let (r, reply) = respond(&key, 5, i.hello(), [2; 16]).unwrap();
        (i.finish(&reply).unwrap(), r)
    }

    #[test]
    fn sealed_frames_are_read_whole_back_to_back_and_across_timeouts() {
        let (mut i, r) = channels();
        let msgs = sample_messages();
        let stream: Vec<u8> = msgs
            .iter()
            .flat_map(|m| i.sealer.seal_msg(m).unwrap())
            .collect();
        let mut reader = FrameReader::sealed(r.opener);
        let mut src = TrickleEvery {
            data: &stream,
            calls: 0,
        };
        let mut got = Vec::new();
        for _ in 0..4 * stream.len() {
            match reader.read(&mut src) {
                Ok(Some(m)) => got.push(m),
                Ok(None) => {}
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
                    break;
                }
            }
        }
        assert_eq!(got, msgs);
    }

    /// Hands out up to 7 bytes a call, every third call a timeout.
    struct TrickleEvery<'a> {
        data: &'a [u8],
        calls: usize,
    }
    impl Read for TrickleEvery<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(3) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(7).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_tampered_sealed_frame_is_invalid_data_naming_the_failure() {
        let (mut i, r) = channels();
        let mut frame = i.sealer.seal_msg(&Msg::Start).unwrap();
        let last = frame.len() - 1;
        frame[last] ^= 1;
        let e = FrameReader::sealed(r.opener)
            .read(&mut &frame[..])
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let inner = e
            .get_ref()
            .and_then(|i| i.downcast_ref::<rmcast_proto::security::FrameError>());
        assert_eq!(inner, Some(&rmcast_proto::security::FrameError::Forged));
    }

    #[test]
    fn plain_and_sealed_readers_tell_the_other_framing() {
        let (mut i, r) = channels();
        let sealed = i.sealer.seal_msg(&Msg::Heartbeat).unwrap();
        let e = FrameReader::default().read(&mut &sealed[..]).unwrap_err();
        let inner = e
            .get_ref()
            .and_then(|i| i.downcast_ref::<rmcast_wire::overlay::DecodeError>());
        assert_eq!(inner, Some(&rmcast_wire::overlay::DecodeError::Sealed));
        let plain = Msg::Heartbeat.to_frame();
        let e = FrameReader::sealed(r.opener)
            .read(&mut &plain[..])
            .unwrap_err();
        let inner = e
            .get_ref()
            .and_then(|i| i.downcast_ref::<rmcast_proto::security::FrameError>());
        assert_eq!(inner, Some(&rmcast_proto::security::FrameError::Unsealed));
    }

    #[test]
    fn sealed_reader_survives_arbitrary_bytes() {
        let mut rng = StdRng::seed_from_u64(0x5ea1);
        let (mut i, _) = channels();
        let good = i.sealer.seal_msg(&sample_messages()[2]).unwrap();
        for round in 0..20_000 {
            let (_, r) = channels();
            let bytes: Vec<u8> = if round % 2 == 0 {
                let mut v = vec![0u8; rng.random_range(0..120usize)];
                rng.fill_bytes(&mut v);
                if v.len() >= 8 {
                    v[..2].copy_from_slice(b"RS");
                    v[2] = 1;
                    v[3] = 2;
                }
                v
            } else {
                let mut v = good.clone();
                let i = rng.random_range(0..v.len());
                v[i] = rng.random();
                v
            };
            let _ = FrameReader::sealed(r.opener).read(&mut &bytes[..]);
        }
    }
}
