//! Property tests: round trips, canonical decoding, no panics on any input.

use super::*;
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------

/// An owned packet, so the strategy can hold the strings and byte vectors
/// that a [`Packet`] borrows.
#[derive(Debug, Clone)]
struct OwnedPacket {
    header: Header,
    body: OwnedBody,
}

#[derive(Debug, Clone)]
enum OwnedBody {
    Hello(Hello),
    Join(u64, String),
    Welcome(Welcome),
    /// The offer with an empty name, and the name it is sent with.
    Offer(Offer<'static>, String),
    OfferReply(Status, String),
    Data(Seq, u16, u16, Vec<u8>),
    Ack(Seq, Seq, u8, Vec<u8>),
    Nak(Seq, Seq, u8, Vec<u8>),
    Close([u8; HASH_LEN], Option<[u8; 64]>),
    Complete(Status, [u8; HASH_LEN], String),
    Bye(bool, String),
    Leave(String),
    Behind(u16, String),
    Move(u16, u16),
    Welcomes(Vec<u8>),
    Have(u16, u16, Vec<u8>),
    Parity(Seq, u32, u16, u16, Vec<u8>),
    Rate(Body<'static>),
}

impl OwnedPacket {
    fn packet(&self) -> Packet<'_> {
        let body = match &self.body {
            OwnedBody::Hello(h) => Body::Hello(*h),
            OwnedBody::Join(receiver_id, name) => Body::Join(Join {
                receiver_id: *receiver_id,
                name,
            }),
            OwnedBody::Welcome(w) => Body::Welcome(*w),
            OwnedBody::Offer(offer, name) => Body::Offer(Offer { name, ..*offer }),
            OwnedBody::OfferReply(status, text) => Body::OfferReply(OfferReply {
                status: *status,
                text,
            }),
            OwnedBody::Data(seq, poll, copy, payload) => Body::Data(Data {
                seq: *seq,
                poll: *poll,
                copy: *copy,
                payload,
            }),
            OwnedBody::Ack(cumulative, echo, echo_copy, bitmap) => Body::Ack(Feedback {
                cumulative: *cumulative,
                echo: *echo,
                echo_copy: *echo_copy,
                aggregate: false,
                bitmap,
            }),
            OwnedBody::Nak(cumulative, echo, echo_copy, bitmap) => Body::Nak(Feedback {
                cumulative: *cumulative,
                echo: *echo,
                echo_copy: *echo_copy,
                aggregate: true,
                bitmap,
            }),
            OwnedBody::Close(hash, signature) => Body::Close(Close {
                hash: *hash,
                signature: *signature,
            }),
            OwnedBody::Complete(status, hash, text) => Body::Complete(Complete {
                status: *status,
                hash: *hash,
                text,
            }),
            OwnedBody::Bye(aborted, text) => Body::Bye(Bye {
                aborted: *aborted,
                text,
            }),
            OwnedBody::Leave(text) => Body::Leave(Leave { text }),
            OwnedBody::Behind(receivers, names) => Body::Behind(Behind {
                receivers: *receivers,
                names,
            }),
            OwnedBody::Move(rank, port) => Body::Move(Move {
                rank: *rank,
                port: *port,
            }),
            OwnedBody::Welcomes(entries) => Body::Welcomes(Welcomes { entries }),
            OwnedBody::Have(part, parts, ranges) => Body::Have(Have {
                part: *part,
                parts: *parts,
                ranges,
            }),
            OwnedBody::Parity(seq, block, index, poll, payload) => Body::Parity(Parity {
                seq: *seq,
                block: *block,
                index: *index,
                poll: *poll,
                payload,
            }),
            OwnedBody::Rate(body) => *body,
        };
        Packet {
            header: self.header,
            body,
        }
    }
}

/// Arbitrary UTF-8 text of at most 255 bytes (the limit is in bytes, not chars).
fn arb_text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..=255).prop_map(|chars| {
        let mut s = String::new();
        for c in chars {
            if s.len() + c.len_utf8() > 255 {
                break;
            }
            s.push(c);
        }
        s
    })
}

fn arb_protocol() -> impl Strategy<Value = ProtocolId> {
    prop_oneof![
        Just(ProtocolId::Ack),
        Just(ProtocolId::NakPoll),
        Just(ProtocolId::Ring),
        Just(ProtocolId::Tree),
    ]
}

fn arb_status() -> impl Strategy<Value = Status> {
    prop_oneof![
        Just(Status::Ok),
        Just(Status::NoSpace),
        Just(Status::UnsafeName),
        Just(Status::Io),
        Just(Status::HashMismatch),
        Just(Status::TooLarge),
        Just(Status::Other),
    ]
}

fn arb_seq() -> impl Strategy<Value = Seq> {
    any::<u32>().prop_map(Seq)
}

fn arb_header() -> impl Strategy<Value = Header> {
    (any::<u16>(), any::<u64>()).prop_map(|(rank, session)| Header::new(SessionId(session), rank))
}

fn arb_body() -> impl Strategy<Value = OwnedBody> {
    let bytes = |max: usize| prop::collection::vec(any::<u8>(), 0..=max);
    prop_oneof![
        (any::<u16>(), arb_protocol()).prop_map(|(receivers_wanted, protocol)| {
            OwnedBody::Hello(Hello {
                receivers_wanted,
                protocol,
            })
        }),
        (any::<u64>(), arb_text()).prop_map(|(id, name)| OwnedBody::Join(id, name)),
        (
            any::<u64>(),
            any::<u16>(),
            proptest::option::of((1..=u32::MAX, 1..=u16::MAX))
        )
            .prop_map(|(receiver_id, rank, up)| OwnedBody::Welcome(Welcome {
                receiver_id,
                rank,
                upstream: up.map(|(ip, port)| std::net::SocketAddrV4::new(ip.into(), port)),
            })),
        (
            (
                any::<u64>(),
                arb_seq(),
                1..=u16::MAX,
                1..=u32::MAX,
                arb_protocol(),
                any::<u16>(),
                any::<u16>(),
                prop_oneof![Just(0), 0..=1_000_000u32, Just(1_000_000)],
            ),
            proptest::option::of(
                (1..=FEC_MAX_BLOCK, 1..=FEC_MAX_BLOCK, 1..=FEC_MAX_DEPTH).prop_flat_map(
                    |(data, space, depth)| (Just(data), 0..=space, Just(space), Just(depth))
                )
            ),
            arb_text(),
        )
            .prop_map(
                |(
                    (
                        object_size,
                        isn,
                        payload_size,
                        window,
                        protocol,
                        protocol_param,
                        receivers,
                        test_loss_ppm,
                    ),
                    fec,
                    name,
                )| {
                    OwnedBody::Offer(
                        Offer {
                            object_size,
                            isn,
                            payload_size,
                            window,
                            protocol,
                            protocol_param,
                            receivers,
                            test_loss_ppm,
                            fec: fec.map(|(data, proactive, space, depth)| FecShape {
                                data,
                                proactive,
                                space,
                                depth,
                            }),
                            name: "",
                        },
                        name,
                    )
                }
            ),
        (arb_status(), arb_text()).prop_map(|(s, t)| OwnedBody::OfferReply(s, t)),
        (arb_seq(), any::<u16>(), any::<u16>(), bytes(2000))
            .prop_map(|(s, p, c, d)| OwnedBody::Data(s, p, c, d)),
        (arb_seq(), arb_seq(), 0..=ECHO_COPY_MAX, bytes(600))
            .prop_map(|(c, e, k, b)| OwnedBody::Ack(c, e, k, b)),
        (arb_seq(), arb_seq(), 0..=ECHO_COPY_MAX, bytes(600))
            .prop_map(|(c, e, k, b)| OwnedBody::Nak(c, e, k, b)),
        (
            any::<[u8; HASH_LEN]>(),
            proptest::option::of(any::<[u8; 64]>())
        )
            .prop_map(|(h, s)| OwnedBody::Close(h, s)),
        (arb_status(), any::<[u8; HASH_LEN]>(), arb_text())
            .prop_map(|(s, h, t)| OwnedBody::Complete(s, h, t)),
        (any::<bool>(), arb_text()).prop_map(|(a, t)| OwnedBody::Bye(a, t)),
        arb_text().prop_map(OwnedBody::Leave),
        (any::<u16>(), arb_text()).prop_map(|(n, t)| OwnedBody::Behind(n, t)),
        (any::<u16>(), 1..=u16::MAX).prop_map(|(r, p)| OwnedBody::Move(r, p)),
        prop::collection::vec(
            (
                any::<u64>(),
                any::<u16>(),
                proptest::option::of((1..=u32::MAX, 1..=u16::MAX))
            ),
            1..=WELCOMES_MAX
        )
        .prop_map(|entries| {
            let mut bytes = Vec::new();
            for (receiver_id, rank, up) in entries {
                let upstream = up.map(|(ip, port)| std::net::SocketAddrV4::new(ip.into(), port));
                let w = Welcome {
                    receiver_id,
                    rank,
                    upstream,
                };
                encode_welcome_entry(&w, &mut bytes).expect("a full upstream or none");
            }
            OwnedBody::Welcomes(bytes)
        }),
        (
            (1..=u16::MAX).prop_flat_map(|parts| (0..parts, Just(parts))),
            prop::collection::vec((0..1000u32, 1..1000u32), 0..HAVE_MAX_RANGES)
        )
            .prop_map(|((part, parts), steps)| {
                // Gaps and lengths from the draw, so ranges ascend, disjoint.
                let mut ranges = Vec::new();
                let mut at = 0u32;
                for (gap, len) in steps {
                    ranges.push((at + gap, len));
                    at += gap + len;
                }
                let mut bytes = Vec::new();
                encode_have_ranges(&ranges, &mut bytes);
                OwnedBody::Have(part, parts, bytes)
            }),
        Just(OwnedBody::Have(0, 0, Vec::new())),
        (
            arb_seq(),
            any::<u32>(),
            any::<u16>(),
            any::<u16>(),
            bytes(2000)
        )
            .prop_map(|(s, b, i, p, d)| OwnedBody::Parity(s, b, i, p, d)),
        arb_rate_body().prop_map(OwnedBody::Rate),
    ]
}

/// A valid `RateNak`, `RateReport` or `RateSync` body.
fn arb_rate_body() -> impl Strategy<Value = Body<'static>> {
    prop_oneof![
        (any::<bool>(), arb_seq()).prop_map(|(exp, seq)| Body::RateNak(RateNak {
            kind: if exp {
                RateNakKind::Exp
            } else {
                RateNakKind::Last
            },
            seq,
        })),
        (any::<u32>(), 0..3u8, 1..=u64::MAX, any::<u64>()).prop_map(
            |(epoch, phase, spacing_ns, messages)| Body::RateReport(RateReport {
                epoch,
                phase: [RatePhase::Idle, RatePhase::Sending, RatePhase::Leaving]
                    [usize::from(phase)],
                spacing_ns,
                messages,
            })
        ),
        (
            any::<u32>(),
            proptest::option::of((1..=u64::MAX, any::<u16>()))
        )
            .prop_map(|(epoch, set)| Body::RateSync(RateSync {
                epoch,
                op: set.map_or(RateSyncOp::Request, |(spacing_ns, members)| {
                    RateSyncOp::Set {
                        spacing_ns,
                        members,
                    }
                }),
            })),
    ]
}

fn arb_packet() -> impl Strategy<Value = OwnedPacket> {
    (arb_header(), arb_body()).prop_map(|(header, body)| OwnedPacket { header, body })
}

/// Decodes `bytes`; when that succeeds, checks that the packet re-encodes to
/// exactly `bytes` (decoding is canonical) and that `peek_header` agrees
/// (so whenever `peek_header` fails, decoding failed too).
fn check_any_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    let decoded = Packet::decode(bytes);
    let peeked = peek_header(bytes);
    // On failure there is nothing more to check: `peek_header` may name a
    // different error (it reports `Truncated` for short input before looking
    // at the magic), and a header it accepts may still be refused by `decode`.
    if let Ok(p) = decoded {
        prop_assert_eq!(encode_vec(&p), bytes);
        prop_assert_eq!(peeked, Ok((p.body.kind(), p.header)));
    }
    Ok(())
}

/// One edit of a valid encoding.
#[derive(Debug, Clone)]
enum Mutation {
    Set(prop::sample::Index, u8),
    Xor(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    Append(Vec<u8>),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        4 => (any::<prop::sample::Index>(), 1..=u8::MAX).prop_map(|(i, b)| Mutation::Xor(i, b)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..8).prop_map(Mutation::Append),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Set(_, _) | Mutation::Xor(_, _) | Mutation::Truncate(_) if bytes.is_empty() => {}
        Mutation::Set(i, b) => {
            let i = i.index(bytes.len());
            bytes[i] = *b;
        }
        Mutation::Xor(i, b) => {
            let i = i.index(bytes.len());
            bytes[i] ^= *b;
        }
        Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len())),
        Mutation::Append(extra) => bytes.extend_from_slice(extra),
    }
}

/// Bytes that start like an rmcast header, so decoding gets into the bodies.
fn arb_plausible_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![1u8..=0x0C, 0x40u8..=0x42],
        any::<u16>(),
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(kind, rank, session, body)| {
            let mut v = vec![b'R', b'M', VERSION, kind, 0, 0];
            v.extend_from_slice(&rank.to_be_bytes());
            v.extend_from_slice(&session.to_be_bytes());
            v.extend_from_slice(&body);
            v
        })
}

proptest! {
    #[test]
    fn valid_packets_round_trip(owned in arb_packet()) {
        let p = owned.packet();
        let bytes = encode_vec(&p);
        prop_assert_eq!(Packet::decode(&bytes), Ok(p));
    }

    #[test]
    fn encoded_length_is_exact(owned in arb_packet()) {
        let p = owned.packet();
        let n = encode_vec(&p).len();
        let mut exact = vec![0u8; n];
        prop_assert_eq!(p.encode(&mut exact), Ok(n));
        let mut short = vec![0u8; n - 1];
        prop_assert_eq!(p.encode(&mut short), Err(EncodeError::BufferTooSmall));
    }

    #[test]
    fn peek_header_agrees_with_decode_on_valid_packets(owned in arb_packet()) {
        let p = owned.packet();
        let bytes = encode_vec(&p);
        prop_assert_eq!(peek_header(&bytes), Ok((p.body.kind(), p.header)));
    }

    #[test]
    fn data_header_plus_payload_equals_packet_encode(
        header in arb_header(),
        seq in arb_seq(),
        poll in any::<u16>(),
        copy in any::<u16>(),
        payload in prop::collection::vec(any::<u8>(), 0..2000),
    ) {
        let whole = encode_vec(&Packet {
            header,
            body: Body::Data(Data { seq, poll, copy, payload: &payload }),
        });
        let mut buf = vec![0u8; DATA_HEADER_LEN + payload.len()];
        prop_assert_eq!(
            encode_data_header(&mut buf, &header, seq, poll, copy),
            Ok(DATA_HEADER_LEN)
        );
        buf[DATA_HEADER_LEN..].copy_from_slice(&payload);
        prop_assert_eq!(buf, whole);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        check_any_bytes(&bytes)?;
    }

    #[test]
    fn decoding_plausible_headers_never_panics(bytes in arb_plausible_bytes()) {
        check_any_bytes(&bytes)?;
    }

    #[test]
    fn decoding_mutated_packets_never_panics(
        owned in arb_packet(),
        mutations in prop::collection::vec(arb_mutation(), 1..6),
    ) {
        let mut bytes = encode_vec(&owned.packet());
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check_any_bytes(&bytes)?;
    }

    #[test]
    fn truncated_valid_packets_never_decode_except_data(owned in arb_packet()) {
        let p = owned.packet();
        let bytes = encode_vec(&p);
        let must_fail = match p.body.kind() {
            Kind::Data => DATA_HEADER_LEN,
            Kind::Parity => PARITY_HEADER_LEN,
            _ => bytes.len(),
        };
        for len in 0..must_fail {
            prop_assert!(Packet::decode(&bytes[..len]).is_err(), "cut to {}", len);
        }
    }

    #[test]
    fn feedback_holds_matches_bitmap_model(
        cumulative in arb_seq(),
        bitmap in prop::collection::vec(any::<u8>(), 0..64),
        back in 1u32..(1 << 31),
    ) {
        let fb = Feedback { cumulative, echo: cumulative, echo_copy: 0, aggregate: false, bitmap: &bitmap };
        prop_assert!(fb.holds(Seq(cumulative.0.wrapping_sub(back))));
        prop_assert!(!fb.holds(cumulative));
        let bits = bitmap.len() * 8;
        for i in 0..bits + 16 {
            let want = i < bits && bitmap[i / 8] & (1 << (i % 8)) != 0;
            let seq = cumulative.add(1 + u32::try_from(i).unwrap());
            prop_assert_eq!(fb.holds(seq), want, "bit {}", i);
        }
    }
}

proptest! {
    /// Interleaved FEC blocks (`FecShape::members`): every data packet of
    /// any object lies in exactly one block, at the position the block's
    /// members give it; blocks hold at most K packets, in order, D apart;
    /// a block's first packet grows with its number, and so does its last
    /// but in the object's last group (whose blocks are shorter); and
    /// `blocks` counts exactly
    /// the blocks that hold a packet.
    #[test]
    fn fec_blocks_partition_the_object(
        k in 1..=40u16,
        d in 1..=12u16,
        packets in 0..2_000u32,
    ) {
        let shape = FecShape::new(k, 0).with_depth(d);
        let blocks = shape.blocks(packets);
        let mut seen = vec![0u8; packets as usize];
        let mut prev: Option<BlockMembers> = None;
        for b in 0..blocks {
            let m = shape.members(b, packets);
            prop_assert!(m.count >= 1 && m.count <= u32::from(k), "block {b}: {m:?}");
            prop_assert_eq!(m.step, u32::from(d));
            prop_assert!(m.last() < packets);
            for (j, i) in m.iter().enumerate() {
                prop_assert_eq!(shape.block_of(i), b);
                let g = shape.group_first_block(i);
                prop_assert!(g <= b && b < g + u32::from(d));
                prop_assert_eq!(u32::from(shape.position(i)), j as u32);
                prop_assert_eq!(shape.locate(i), (shape.block_of(i), shape.position(i)));
                prop_assert_eq!(m.at(j as u32), i);
                seen[i as usize] += 1;
            }
            if let Some(p) = prev {
                let last_group = m.first / shape.group_len() == (packets - 1) / shape.group_len();
                prop_assert!(p.first < m.first, "{p:?} then {m:?}");
                prop_assert!(last_group || p.last() < m.last(), "{p:?} then {m:?}");
            }
            prev = Some(m);
        }
        prop_assert!(seen.iter().all(|&n| n == 1));
        prop_assert_eq!(shape.members(blocks, packets).count, 0);
        // A burst of up to D consecutive packets costs a block one at most.
        for start in (0..packets).step_by(7) {
            let end = (start + u32::from(d)).min(packets);
            let mut hit: Vec<u32> = (start..end).map(|i| shape.block_of(i)).collect();
            hit.sort_unstable();
            hit.dedup();
            prop_assert_eq!(hit.len() as u32, end - start);
        }
        let parsed = FecShape::from_setting(&shape.setting()).map_err(TestCaseError::fail)?;
        prop_assert_eq!(parsed, Some(shape));
    }
}
