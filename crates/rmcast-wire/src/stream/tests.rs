//! PRMP wire tests: fixed layouts, rejections, and property tests (round
//! trips, no panics on any input).

use super::*;
use crate::{Packet, RANK_SENDER, SessionId};
use proptest::prelude::*;

const SID: SessionId = SessionId(0x0102_0304_0506_0708);

fn head(kind: u8, rank: u16) -> Vec<u8> {
    let [r0, r1] = rank.to_be_bytes();
    vec![
        b'R', b'M', 0x04, kind, 0x00, 0x00, r0, r1, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
    ]
}

fn encode_vec(p: &StreamPacket<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; 70_000];
    let n = p.encode(&mut buf).expect("packet encodes");
    buf.truncate(n);
    buf
}

fn assert_wire(bytes: &[u8], packet: &StreamPacket<'_>) {
    assert_eq!(
        StreamPacket::decode(bytes),
        Ok(*packet),
        "decode of {bytes:02x?}"
    );
    assert_eq!(encode_vec(packet), bytes, "encode of {packet:?}");
}

#[test]
fn data_with_piggybacked_poll_has_documented_layout() {
    let entries = [
        0x00, 0x03, 0x00, 0x00, 0x01, 0xF4, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00,
    ];
    let bytes = [
        head(0x60, RANK_SENDER),
        vec![0xDE, 0xAD, 0xBE, 0xEF], // seq
        vec![0x03],                   // flags: first | last
        vec![0x02],                   // two poll entries
        vec![0x00, 0x00, 0x00, 0x2A], // poll id
        vec![0x00, 0x01, 0x02, 0x03], // ts
        entries.to_vec(),
        b"abc".to_vec(),
    ]
    .concat();
    let p = StreamPacket {
        header: Header::new(SID, RANK_SENDER),
        body: StreamBody::Data(StreamData {
            seq: Seq(0xDEAD_BEEF),
            flags: DATA_FIRST | DATA_LAST,
            poll: Some(PollRequest {
                poll_id: 42,
                ts_us: 0x0001_0203,
                entries: PollEntries::from_raw(&entries).unwrap(),
            }),
            payload: b"abc",
        }),
    };
    assert_wire(&bytes, &p);
    let StreamBody::Data(d) = StreamPacket::decode(&bytes).unwrap().body else {
        unreachable!()
    };
    let got: Vec<_> = d.poll.unwrap().entries.iter().collect();
    assert_eq!(
        got,
        [
            PollEntry {
                rank: 3,
                delay_us: 500
            },
            PollEntry {
                rank: 7,
                delay_us: 0
            }
        ]
    );
    assert_eq!(bytes.len(), STREAM_DATA_OVERHEAD + poll_request_len(2) + 3);
}

#[test]
fn response_has_documented_layout() {
    let bytes = [
        head(0x62, 3),
        vec![0, 0, 0, 9],              // poll id
        vec![0, 0, 0x10, 0],           // echo ts
        vec![0, 0, 0, 5],              // held
        vec![0, 0, 0, 100],            // cumulative
        vec![0, 0, 0, 64],             // window
        vec![0, 2, 0b0000_0101, 0x80], // bitmap
    ]
    .concat();
    let bitmap = [0b0000_0101, 0x80];
    let r = Response {
        poll_id: 9,
        echo_ts_us: 0x1000,
        held_us: 5,
        cumulative: Seq(100),
        window_packets: 64,
        bitmap: &bitmap,
    };
    assert_wire(
        &bytes,
        &StreamPacket {
            header: Header::new(SID, 3),
            body: StreamBody::Response(r),
        },
    );
    assert!(r.holds(Seq(99)));
    assert!(!r.holds(Seq(100)));
    assert!(r.holds(Seq(101)));
    assert!(!r.holds(Seq(102)));
    assert!(r.holds(Seq(103)));
    assert!(r.holds(Seq(116)));
    assert!(!r.holds(Seq(117)));
    assert_eq!(r.window_end(), Seq(164));
}

#[test]
fn handshake_packets_have_documented_layouts() {
    assert_wire(
        &[
            head(0x52, RANK_SENDER),
            vec![0, 0, 0, 0, 0, 0, 0x12, 0x34], // nonce
            vec![0, 4],                         // rank
            vec![0x04, 0xB0],                   // payload 1200
            vec![0, 0, 0, 7],                   // isn
            vec![0, 0, 0, 2],                   // message packets
        ]
        .concat(),
        &StreamPacket {
            header: Header::new(SID, RANK_SENDER),
            body: StreamBody::Invite(Invite {
                nonce: 0x1234,
                rank: 4,
                payload_size: 1200,
                isn: Seq(7),
                message_packets_max: 2,
            }),
        },
    );
    assert_wire(
        &[
            head(0x53, 4),
            vec![0, 0, 0, 0, 0, 0, 0x12, 0x34],
            vec![0, 0, 0, 0, 0, 0, 0, 0x99],
            vec![0, 0, 1, 0],
            vec![2, b'r', b'4'],
        ]
        .concat(),
        &StreamPacket {
            header: Header::new(SID, 4),
            body: StreamBody::Accept(Accept {
                nonce: 0x1234,
                receiver_id: 0x99,
                buffer_packets: 256,
                name: "r4",
            }),
        },
    );
    assert_wire(
        &[head(0x59, RANK_SENDER), vec![3]].concat(),
        &StreamPacket {
            header: Header::new(SID, RANK_SENDER),
            body: StreamBody::Reset {
                reason: ResetReason::Removed,
            },
        },
    );
}

#[test]
fn close_without_poll_is_five_bytes() {
    assert_wire(
        &[head(0x57, RANK_SENDER), vec![0, 0, 1, 0, 0]].concat(),
        &StreamPacket {
            header: Header::new(SID, RANK_SENDER),
            body: StreamBody::Close(PollBody {
                next_seq: Seq(256),
                poll: None,
            }),
        },
    );
}

#[test]
fn rejects_bad_fields() {
    let bad_flags = [head(0x60, RANK_SENDER), vec![0, 0, 0, 1, 0x04, 0]].concat();
    assert_eq!(
        StreamPacket::decode(&bad_flags),
        Err(DecodeError::BadField("data.flags"))
    );
    let too_many = [head(0x61, RANK_SENDER), vec![0, 0, 0, 1, 65]].concat();
    assert_eq!(
        StreamPacket::decode(&too_many),
        Err(DecodeError::BadField("poll.count"))
    );
    let bad_reason = [head(0x59, RANK_SENDER), vec![0]].concat();
    assert_eq!(
        StreamPacket::decode(&bad_reason),
        Err(DecodeError::BadField("reset.reason"))
    );
    let zero_payload = [
        head(0x52, RANK_SENDER),
        vec![0; 8],
        vec![0, 1],
        vec![0, 0],
        vec![0; 8],
    ]
    .concat();
    assert_eq!(
        StreamPacket::decode(&zero_payload),
        Err(DecodeError::BadField("payload_size"))
    );
    let trailing = [head(0x56, RANK_SENDER), vec![0]].concat();
    assert_eq!(
        StreamPacket::decode(&trailing),
        Err(DecodeError::TrailingBytes)
    );
    let mut auth = head(0x56, RANK_SENDER);
    auth[4] = crate::FLAG_AUTH;
    assert_eq!(
        StreamPacket::decode(&auth),
        Err(DecodeError::UnsupportedFlags(crate::FLAG_AUTH))
    );
    // FLAG_ALONE is the object transfer's; PRMP never sends it.
    let mut alone = head(0x56, RANK_SENDER);
    alone[4] = crate::FLAG_ALONE;
    assert_eq!(
        StreamPacket::decode(&alone),
        Err(DecodeError::UnsupportedFlags(crate::FLAG_ALONE))
    );
    let short_entries = [
        head(0x61, RANK_SENDER),
        vec![0, 0, 0, 1, 2],
        vec![0; 8],
        vec![0; 6],
    ]
    .concat();
    assert_eq!(
        StreamPacket::decode(&short_entries),
        Err(DecodeError::Truncated)
    );
}

#[test]
fn object_and_stream_decoders_refuse_each_others_kinds() {
    let leave_ack = head(0x56, RANK_SENDER);
    assert_eq!(
        Packet::decode(&leave_ack),
        Err(DecodeError::UnknownKind(0x56))
    );
    let object_close = head(0x09, RANK_SENDER);
    assert_eq!(
        StreamPacket::decode(&object_close),
        Err(DecodeError::UnknownKind(0x09))
    );
    for reserved in 0x40..=0x4F {
        assert_eq!(
            StreamPacket::decode(&head(reserved, RANK_SENDER)),
            Err(DecodeError::UnknownKind(reserved))
        );
    }
}

#[test]
fn poll_entries_write_refuses_too_many_or_short_buffer() {
    let entries = [PollEntry::default(); MAX_POLL_ENTRIES + 1];
    let mut out = [0u8; (MAX_POLL_ENTRIES + 1) * POLL_ENTRY_LEN];
    assert_eq!(PollEntries::write(&entries, &mut out), None);
    assert_eq!(PollEntries::write(&entries[..2], &mut out[..11]), None);
    assert_eq!(PollEntries::write(&entries[..2], &mut out), Some(12));
}

/// An owned packet for property tests.
#[derive(Clone, Debug)]
struct Owned {
    header: Header,
    kind: u8,
    a: u64,
    b: u64,
    c: u32,
    d: u32,
    e: u32,
    f: u16,
    g: u16,
    flags: u8,
    text: String,
    entries: Vec<u8>,
    bytes: Vec<u8>,
}

impl Owned {
    fn packet(&self) -> StreamPacket<'_> {
        let poll = (!self.entries.is_empty()).then(|| PollRequest {
            poll_id: self.c,
            ts_us: self.d,
            entries: PollEntries::from_raw(&self.entries).unwrap(),
        });
        let response = Response {
            poll_id: self.c,
            echo_ts_us: self.d,
            held_us: self.e,
            cumulative: Seq(self.a as u32),
            window_packets: self.b as u32,
            bitmap: &self.bytes,
        };
        let body = match self.kind % 13 {
            0 => StreamBody::Announce(Announce {
                receivers_max: self.f,
                payload_size: self.g.max(1),
                message_packets_max: self.c,
                admission_left_ms: self.d,
            }),
            1 => StreamBody::ConnectRequest(ConnectRequest {
                receiver_id: self.a,
                buffer_packets: self.c,
                name: &self.text,
            }),
            2 => StreamBody::Invite(Invite {
                nonce: self.a,
                rank: self.f,
                payload_size: self.g.max(1),
                isn: Seq(self.c),
                message_packets_max: self.d,
            }),
            3 => StreamBody::Accept(Accept {
                nonce: self.a,
                receiver_id: self.b,
                buffer_packets: self.c,
                name: &self.text,
            }),
            4 => StreamBody::Confirm { nonce: self.a },
            5 => StreamBody::Leave { text: &self.text },
            6 => StreamBody::LeaveAck,
            7 => StreamBody::Close(PollBody {
                next_seq: Seq(self.e),
                poll,
            }),
            8 => StreamBody::CloseAck(response),
            9 => StreamBody::Reset {
                reason: ResetReason::from_u8(1 + self.flags % 5).unwrap(),
            },
            10 => StreamBody::Data(StreamData {
                seq: Seq(self.e),
                flags: self.flags & 3,
                poll,
                payload: &self.bytes,
            }),
            11 => StreamBody::Poll(PollBody {
                next_seq: Seq(self.e),
                poll,
            }),
            _ => StreamBody::Response(response),
        };
        StreamPacket {
            header: self.header,
            body,
        }
    }
}

fn arb_owned() -> impl Strategy<Value = Owned> {
    (
        (any::<u16>(), any::<u64>(), any::<u8>()),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (any::<u16>(), any::<u16>(), any::<u8>()),
        "[a-z0-9:.é]{0,40}",
        prop::collection::vec(any::<u8>(), 0..=MAX_POLL_ENTRIES).prop_map(|v| {
            v.iter()
                .flat_map(|&x| [0, x, 0, 0, x, 1])
                .collect::<Vec<u8>>()
        }),
        prop::collection::vec(any::<u8>(), 0..600),
    )
        .prop_map(
            |((rank, session, kind), (a, b, c, d, e), (f, g, flags), text, entries, bytes)| Owned {
                header: Header::new(SessionId(session), rank),
                kind,
                a,
                b,
                c,
                d,
                e,
                f,
                g,
                flags,
                text,
                entries,
                bytes,
            },
        )
}

proptest! {
    #[test]
    fn stream_packets_round_trip(owned in arb_owned()) {
        let p = owned.packet();
        let bytes = encode_vec(&p);
        prop_assert_eq!(StreamPacket::decode(&bytes), Ok(p));
        // Exact length: one byte less does not fit.
        let mut short = vec![0u8; bytes.len() - 1];
        prop_assert_eq!(p.encode(&mut short), Err(EncodeError::BufferTooSmall));
        // The header peek of the object decoder refuses PRMP kinds.
        prop_assert!(crate::peek_header(&bytes).is_err());
    }

    #[test]
    fn truncated_stream_packets_never_decode_except_data(owned in arb_owned()) {
        let p = owned.packet();
        let bytes = encode_vec(&p);
        let keep = match p.body {
            StreamBody::Data(d) => bytes.len() - d.payload.len(),
            _ => bytes.len(),
        };
        for len in 0..keep {
            prop_assert!(StreamPacket::decode(&bytes[..len]).is_err(), "cut to {}", len);
        }
    }

    #[test]
    fn stream_decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(p) = StreamPacket::decode(&bytes) {
            prop_assert_eq!(encode_vec(&p), bytes);
        }
    }

    #[test]
    fn stream_decoding_plausible_bytes_never_panics(
        kind in 0x50u8..=0x62,
        rank in any::<u16>(),
        body in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let bytes = [head(kind, rank), body].concat();
        if let Ok(p) = StreamPacket::decode(&bytes) {
            // Canonical: every accepted datagram re-encodes to itself.
            prop_assert_eq!(encode_vec(&p), bytes);
        }
    }

    #[test]
    fn response_holds_matches_bitmap_model(
        cumulative in any::<u32>(),
        bitmap in prop::collection::vec(any::<u8>(), 0..32),
    ) {
        let r = Response { poll_id: 0, echo_ts_us: 0, held_us: 0, cumulative: Seq(cumulative), window_packets: 0, bitmap: &bitmap };
        prop_assert!(r.holds(Seq(cumulative.wrapping_sub(1))));
        prop_assert!(!r.holds(Seq(cumulative)));
        for i in 0..bitmap.len() * 8 + 8 {
            let want = i < bitmap.len() * 8 && bitmap[i / 8] & (1 << (i % 8)) != 0;
            prop_assert_eq!(r.holds(Seq(cumulative).add(1 + i as u32)), want);
        }
    }
}
