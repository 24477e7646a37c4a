//! Wire-format tests: fixed byte layouts, every rejection path, and
//! property tests (round trips, canonical decoding, no panics on any input).

use super::*;
use proptest::prelude::*;

/// Session id used by the fixed-layout tests.
const SID: SessionId = SessionId(0x0102_0304_0506_0708);

/// The 16 header bytes for `kind` sent by `rank` in session [`SID`].
fn head(kind: u8, rank: u16) -> Vec<u8> {
    let [r0, r1] = rank.to_be_bytes();
    vec![
        b'R', b'M', 0x02, kind, 0x00, 0x00, r0, r1, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
    ]
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn encode_vec(p: &Packet<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; 2 * MAX_DATAGRAM];
    let n = p.encode(&mut buf).expect("packet encodes");
    buf.truncate(n);
    buf
}

/// `bytes` decodes to `packet` and `packet` encodes to `bytes`.
fn assert_wire(bytes: &[u8], packet: &Packet<'_>) {
    assert_eq!(Packet::decode(bytes), Ok(*packet), "decode of {bytes:02x?}");
    assert_eq!(encode_vec(packet), bytes, "encode of {packet:?}");
}

const CLOSE_HASH: [u8; HASH_LEN] = [0xAA; HASH_LEN];
const COMPLETE_HASH: [u8; HASH_LEN] = [0x55; HASH_LEN];

/// One valid packet of every kind, with the exact bytes it is on the wire.
fn samples() -> Vec<(Vec<u8>, Packet<'static>)> {
    let sender = Header::new(SID, RANK_SENDER);
    let rank3 = Header::new(SID, 3);
    vec![
        (
            vec![
                b'R', b'M', // magic
                0x02, // version
                0x01, // type: Hello
                0x00, // flags
                0x00, // key epoch
                0xFF, 0xFF, // rank: sender
                0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // session
                0x00, 0x05, // receivers wanted
                0x02, // protocol: NakPoll
            ],
            Packet {
                header: sender,
                body: Body::Hello(Hello {
                    receivers_wanted: 5,
                    protocol: ProtocolId::NakPoll,
                }),
            },
        ),
        (
            cat(&[
                &head(0x02, RANK_UNASSIGNED),
                &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88],
                &[0x02, b'a', b'b'],
            ]),
            Packet {
                header: Header::new(SID, RANK_UNASSIGNED),
                body: Body::Join(Join {
                    receiver_id: 0x1122_3344_5566_7788,
                    name: "ab",
                }),
            },
        ),
        (
            cat(&[
                &head(0x03, RANK_SENDER),
                &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88],
                &[0x00, 0x07],
                &[10, 0, 0, 3, 0x1F, 0x90], // upstream 10.0.0.3:8080
            ]),
            Packet {
                header: sender,
                body: Body::Welcome(Welcome {
                    receiver_id: 0x1122_3344_5566_7788,
                    rank: 7,
                    upstream: Some("10.0.0.3:8080".parse().unwrap()),
                }),
            },
        ),
        (
            cat(&[
                &head(0x04, RANK_SENDER),
                &[0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00], // object size 1 MiB
                &[0x80, 0x00, 0x00, 0x00],                         // isn
                &[0x05, 0x78],                                     // payload size 1400
                &[0x00, 0x00, 0x00, 0x40],                         // window 64
                &[0x01],                                           // protocol: Ack
                &[0x00, 0x00],                                     // protocol param
                &[0x00, 0x03],                                     // receivers
                &[0x00, 0x00, 0x27, 0x10],                         // test loss 10,000 ppm
                &[0x05, b'f', b'.', b'b', b'i', b'n'],
            ]),
            Packet {
                header: sender,
                body: Body::Offer(Offer {
                    object_size: 1 << 20,
                    isn: Seq(0x8000_0000),
                    payload_size: 1400,
                    window: 64,
                    protocol: ProtocolId::Ack,
                    protocol_param: 0,
                    receivers: 3,
                    test_loss_ppm: 10_000,
                    name: "f.bin",
                }),
            },
        ),
        (
            cat(&[&head(0x05, 3), &[0x01], &[0x04, b'f', b'u', b'l', b'l']]),
            Packet {
                header: rank3,
                body: Body::OfferReply(OfferReply {
                    status: Status::NoSpace,
                    text: "full",
                }),
            },
        ),
        (
            vec![
                b'R', b'M', // magic
                0x02, // version
                0x06, // type: Data
                0x00, // flags
                0x00, // key epoch
                0xFF, 0xFF, // rank: sender
                0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // session
                0xDE, 0xAD, 0xBE, 0xEF, // seq
                0x00, 0x03, // poll: rank 3
                0x00, 0x02, // copy: the second resend
                b'a', b'b', b'c', // payload
            ],
            Packet {
                header: sender,
                body: Body::Data(Data {
                    seq: Seq(0xDEAD_BEEF),
                    poll: 3,
                    copy: 2,
                    payload: b"abc",
                }),
            },
        ),
        (
            cat(&[
                &head(0x07, 3),
                &[0x00, 0x00, 0x00, 0x0A], // cumulative
                &[0x00, 0x00, 0x00, 0x0C], // echo
                &[0x0B],                   // aggregate, echo copy 5
                &[0x00, 0x01],             // bitmap length
                &[0b0000_0010],            // holds 12
            ]),
            Packet {
                header: rank3,
                body: Body::Ack(Feedback {
                    cumulative: Seq(10),
                    echo: Seq(12),
                    echo_copy: 5,
                    aggregate: true,
                    bitmap: &[0b0000_0010],
                }),
            },
        ),
        (
            cat(&[
                &head(0x08, 3),
                &[0xFF, 0xFF, 0xFF, 0xFF],
                &[0x00, 0x00, 0x00, 0x01],
                &[0x00],
                &[0x00, 0x00],
            ]),
            Packet {
                header: rank3,
                body: Body::Nak(Feedback {
                    cumulative: Seq(u32::MAX),
                    echo: Seq(1),
                    echo_copy: 0,
                    aggregate: false,
                    bitmap: &[],
                }),
            },
        ),
        (
            cat(&[&head(0x09, RANK_SENDER), &CLOSE_HASH]),
            Packet {
                header: sender,
                body: Body::Close(Close { hash: CLOSE_HASH }),
            },
        ),
        (
            cat(&[&head(0x0A, 3), &[0x04], &COMPLETE_HASH, &[0x00]]),
            Packet {
                header: rank3,
                body: Body::Complete(Complete {
                    status: Status::HashMismatch,
                    hash: COMPLETE_HASH,
                    text: "",
                }),
            },
        ),
        (
            cat(&[&head(0x0B, RANK_SENDER), &[0x01], &[0x02, 0xC3, 0xA9]]),
            Packet {
                header: sender,
                body: Body::Bye(Bye {
                    aborted: true,
                    text: "é",
                }),
            },
        ),
        (
            cat(&[&head(0x0C, 3), &[0x03, b'b', b'y', b'e']]),
            Packet {
                header: rank3,
                body: Body::Leave(Leave { text: "bye" }),
            },
        ),
        (
            cat(&[&head(0x40, 3), &[0x01], &[0x00, 0x00, 0x01, 0x02]]),
            Packet {
                header: rank3,
                body: Body::RateNak(RateNak {
                    kind: RateNakKind::Exp,
                    seq: Seq(0x102),
                }),
            },
        ),
        (
            cat(&[
                &head(0x41, RANK_SENDER),
                &[0x00, 0x00, 0x00, 0x07],                         // epoch
                &[0x01],                                           // phase: sending
                &[0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0xA0], // spacing 100,000 ns
                &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xE8], // 1000 messages
            ]),
            Packet {
                header: sender,
                body: Body::RateReport(RateReport {
                    epoch: 7,
                    phase: RatePhase::Sending,
                    spacing_ns: 100_000,
                    messages: 1000,
                }),
            },
        ),
        (
            cat(&[
                &head(0x42, RANK_SENDER),
                &[0x00, 0x00, 0x00, 0x08],                         // epoch
                &[0x01],                                           // op: set
                &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x20], // spacing 800 ns
                &[0x00, 0x04],                                     // 4 members
            ]),
            Packet {
                header: sender,
                body: Body::RateSync(RateSync {
                    epoch: 8,
                    op: RateSyncOp::Set {
                        spacing_ns: 800,
                        members: 4,
                    },
                }),
            },
        ),
    ]
}

// ---------------------------------------------------------------------------
// Fixed layouts
// ---------------------------------------------------------------------------

#[test]
fn hello_layout_matches_fixed_bytes() {
    let (bytes, packet) = &samples()[0];
    assert_eq!(bytes.len(), HEADER_LEN + 3);
    assert_wire(bytes, packet);
}

#[test]
fn data_layout_matches_fixed_bytes() {
    let (bytes, packet) = &samples()[5];
    assert_eq!(packet.body.kind(), Kind::Data);
    assert_eq!(bytes.len(), DATA_HEADER_LEN + 3);
    assert_wire(bytes, packet);
}

#[test]
fn every_kind_matches_its_fixed_bytes() {
    let samples = samples();
    let kinds: Vec<Kind> = samples.iter().map(|(_, p)| p.body.kind()).collect();
    assert_eq!(
        kinds,
        [
            Kind::Hello,
            Kind::Join,
            Kind::Welcome,
            Kind::Offer,
            Kind::OfferReply,
            Kind::Data,
            Kind::Ack,
            Kind::Nak,
            Kind::Close,
            Kind::Complete,
            Kind::Bye,
            Kind::Leave,
            Kind::RateNak,
            Kind::RateReport,
            Kind::RateSync,
        ]
    );
    for (bytes, packet) in &samples {
        assert_eq!(bytes[3], packet.body.kind() as u8);
        assert_wire(bytes, packet);
    }
}

#[test]
fn body_lengths_match_the_documented_layout() {
    // Fixed part of each body (text and bitmap contents excluded), as in
    // docs/wire-format.md.
    let fixed = |p: &Packet<'_>| -> usize {
        match p.body {
            Body::Hello(_) => 3,
            Body::Join(j) => 9 + j.name.len(),
            Body::Welcome(_) => 16,
            Body::Offer(o) => 28 + o.name.len(),
            Body::OfferReply(x) => 2 + x.text.len(),
            Body::Data(d) => 8 + d.payload.len(),
            Body::Ack(f) | Body::Nak(f) => 11 + f.bitmap.len(),
            Body::Close(_) => 32,
            Body::Complete(c) => 34 + c.text.len(),
            Body::Bye(b) => 2 + b.text.len(),
            Body::Leave(l) => 1 + l.text.len(),
            Body::RateNak(_) => 5,
            Body::RateReport(_) => 21,
            Body::RateSync(_) => 15,
        }
    };
    for (bytes, packet) in samples() {
        assert_eq!(bytes.len(), HEADER_LEN + fixed(&packet), "{packet:?}");
    }
}

#[test]
fn text_of_255_bytes_round_trips() {
    let name = "é".repeat(127) + "x"; // 255 bytes
    assert_eq!(name.len(), 255);
    let p = Packet {
        header: Header::new(SID, 0),
        body: Body::Leave(Leave { text: &name }),
    };
    let bytes = encode_vec(&p);
    assert_eq!(bytes[HEADER_LEN], 255);
    assert_eq!(Packet::decode(&bytes), Ok(p));
}

// ---------------------------------------------------------------------------
// Header rejections
// ---------------------------------------------------------------------------

#[test]
fn wrong_magic_is_bad_magic() {
    for (bytes, _) in samples() {
        for (i, b) in [(0, b'X'), (1, b'X'), (0, b'r'), (1, 0x00)] {
            let mut bad = bytes.clone();
            bad[i] = b;
            assert_eq!(Packet::decode(&bad), Err(DecodeError::BadMagic));
            assert_eq!(peek_header(&bad), Err(DecodeError::BadMagic));
        }
    }
}

#[test]
fn inputs_shorter_than_the_magic_are_bad_magic() {
    assert_eq!(Packet::decode(&[]), Err(DecodeError::BadMagic));
    assert_eq!(Packet::decode(b"R"), Err(DecodeError::BadMagic));
    assert_eq!(Packet::decode(b"RM"), Err(DecodeError::Truncated));
}

#[test]
fn wrong_version_is_bad_version() {
    for (bytes, _) in samples() {
        // Version 1 (hash in the Offer) included: its Offer would misparse.
        for v in [0u8, 1, 3, 0x7F, 0xFF] {
            let mut bad = bytes.clone();
            bad[2] = v;
            assert_eq!(Packet::decode(&bad), Err(DecodeError::BadVersion(v)));
            assert_eq!(peek_header(&bad), Err(DecodeError::BadVersion(v)));
        }
    }
}

#[test]
fn close_without_its_hash_is_truncated() {
    // Version 1's Close had an empty body; under version 2 the hash is
    // required, whole.
    let (bytes, _) = &samples()[8];
    assert_eq!(bytes.len(), HEADER_LEN + HASH_LEN);
    for len in HEADER_LEN..bytes.len() {
        assert_eq!(Packet::decode(&bytes[..len]), Err(DecodeError::Truncated));
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(Packet::decode(&longer), Err(DecodeError::TrailingBytes));
}

#[test]
fn a_version_1_offer_is_refused_not_misparsed() {
    // The old layout (hash between receivers and test_loss_ppm) with the
    // old version byte: refused before the body is read.
    let (new, _) = &samples()[3];
    let mut old = new[..offer_at(23)].to_vec();
    old.extend_from_slice(&[0xAA; HASH_LEN]);
    old.extend_from_slice(&new[offer_at(23)..]);
    old[2] = 1;
    assert_eq!(Packet::decode(&old), Err(DecodeError::BadVersion(1)));
    assert_eq!(peek_header(&old), Err(DecodeError::BadVersion(1)));
}

#[test]
fn unknown_type_is_unknown_kind() {
    let (bytes, _) = &samples()[0];
    for t in [0x00u8, 0x0D, 0x0E, 0x7F, 0x80, 0xFF] {
        let mut bad = bytes.clone();
        bad[3] = t;
        assert_eq!(Packet::decode(&bad), Err(DecodeError::UnknownKind(t)));
        assert_eq!(peek_header(&bad), Err(DecodeError::UnknownKind(t)));
    }
}

#[test]
fn auth_flag_is_unsupported_flags() {
    for (bytes, _) in samples() {
        let mut bad = bytes.clone();
        bad[4] = FLAG_AUTH;
        assert_eq!(
            Packet::decode(&bad),
            Err(DecodeError::UnsupportedFlags(FLAG_AUTH))
        );
        // An authenticated packet carries a tag after the body; still refused.
        bad.extend_from_slice(&[0u8; 16]);
        assert_eq!(
            Packet::decode(&bad),
            Err(DecodeError::UnsupportedFlags(FLAG_AUTH))
        );
    }
}

#[test]
fn any_nonzero_flags_are_unsupported_flags() {
    let (bytes, _) = &samples()[0];
    for f in 1..=u8::MAX {
        let mut bad = bytes.clone();
        bad[4] = f;
        assert_eq!(Packet::decode(&bad), Err(DecodeError::UnsupportedFlags(f)));
    }
}

#[test]
fn nonzero_key_epoch_is_rejected() {
    let (bytes, _) = &samples()[0];
    for e in [1u8, 2, 0xFF] {
        let mut bad = bytes.clone();
        bad[5] = e;
        assert_eq!(
            Packet::decode(&bad),
            Err(DecodeError::BadField("key_epoch"))
        );
    }
}

// ---------------------------------------------------------------------------
// Length checks
// ---------------------------------------------------------------------------

#[test]
fn truncated_packets_are_errors_not_panics() {
    for (bytes, packet) in samples() {
        // A data payload runs to the end of the datagram, so cutting into it
        // leaves a valid, shorter Data packet; everything else must fail.
        let must_fail = match packet.body {
            Body::Data(_) => DATA_HEADER_LEN,
            _ => bytes.len(),
        };
        for len in 0..must_fail {
            let want = if len < 2 {
                DecodeError::BadMagic
            } else {
                DecodeError::Truncated
            };
            assert_eq!(
                Packet::decode(&bytes[..len]),
                Err(want),
                "{packet:?} cut to {len}"
            );
        }
    }
}

#[test]
fn truncated_data_payload_decodes_as_a_shorter_payload() {
    let (bytes, packet) = &samples()[5];
    let Body::Data(d) = packet.body else {
        unreachable!()
    };
    for len in DATA_HEADER_LEN..=bytes.len() {
        let got = Packet::decode(&bytes[..len]).expect("data header is whole");
        assert_eq!(
            got.body,
            Body::Data(Data {
                payload: &d.payload[..len - DATA_HEADER_LEN],
                ..d
            })
        );
    }
}

#[test]
fn length_prefixed_fields_longer_than_the_datagram_are_truncated() {
    // Join whose name length says 3 but only 2 bytes follow.
    let mut join = samples()[1].0.clone();
    let len_at = HEADER_LEN + 8;
    join[len_at] = 3;
    assert_eq!(Packet::decode(&join), Err(DecodeError::Truncated));
    // Ack whose bitmap length says 0xFFFF.
    let mut ack = samples()[6].0.clone();
    ack[HEADER_LEN + 9] = 0xFF;
    ack[HEADER_LEN + 10] = 0xFF;
    assert_eq!(Packet::decode(&ack), Err(DecodeError::Truncated));
}

#[test]
fn trailing_bytes_are_rejected() {
    for (bytes, packet) in samples() {
        if packet.body.kind() == Kind::Data {
            continue; // a Data payload takes every remaining byte
        }
        for extra in [&[0u8][..], &[0xFF, 0xFF], &[0u8; 16]] {
            let long = cat(&[&bytes, extra]);
            assert_eq!(
                Packet::decode(&long),
                Err(DecodeError::TrailingBytes),
                "{packet:?} + {extra:?}"
            );
        }
    }
}

#[test]
fn shorter_length_prefix_leaves_trailing_bytes() {
    let mut join = samples()[1].0.clone();
    join[HEADER_LEN + 8] = 1; // name "a", then a stray "b"
    assert_eq!(Packet::decode(&join), Err(DecodeError::TrailingBytes));
}

// ---------------------------------------------------------------------------
// Field checks
// ---------------------------------------------------------------------------

/// Offset of the Offer body field at `body_offset`.
const fn offer_at(body_offset: usize) -> usize {
    HEADER_LEN + body_offset
}

#[test]
fn offer_with_zero_payload_size_is_bad_field() {
    let mut bad = samples()[3].0.clone();
    bad[offer_at(12)..offer_at(14)].copy_from_slice(&[0, 0]);
    assert_eq!(
        Packet::decode(&bad),
        Err(DecodeError::BadField("payload_size"))
    );
}

#[test]
fn offer_with_zero_window_is_bad_field() {
    let mut bad = samples()[3].0.clone();
    bad[offer_at(14)..offer_at(18)].copy_from_slice(&[0, 0, 0, 0]);
    assert_eq!(Packet::decode(&bad), Err(DecodeError::BadField("window")));
}

#[test]
fn offer_test_loss_above_one_million_ppm_is_bad_field() {
    for (ppm, ok) in [
        (0u32, true),
        (1_000_000, true),
        (1_000_001, false),
        (u32::MAX, false),
    ] {
        let mut offer = samples()[3].0.clone();
        offer[offer_at(23)..offer_at(27)].copy_from_slice(&ppm.to_be_bytes());
        let got = Packet::decode(&offer);
        if ok {
            assert!(
                matches!(got, Ok(Packet { body: Body::Offer(o), .. }) if o.test_loss_ppm == ppm),
                "{ppm}: {got:?}"
            );
        } else {
            assert_eq!(got, Err(DecodeError::BadField("test_loss_ppm")), "{ppm}");
        }
    }
}

#[test]
fn unknown_protocol_is_bad_field() {
    for p in [0u8, 5, 0xFF] {
        let mut hello = samples()[0].0.clone();
        hello[HEADER_LEN + 2] = p;
        assert_eq!(
            Packet::decode(&hello),
            Err(DecodeError::BadField("protocol"))
        );
        let mut offer = samples()[3].0.clone();
        offer[offer_at(18)] = p;
        assert_eq!(
            Packet::decode(&offer),
            Err(DecodeError::BadField("protocol"))
        );
    }
}

#[test]
fn every_protocol_id_round_trips() {
    for (byte, protocol) in [
        (1u8, ProtocolId::Ack),
        (2, ProtocolId::NakPoll),
        (3, ProtocolId::Ring),
        (4, ProtocolId::Tree),
    ] {
        let mut hello = samples()[0].0.clone();
        hello[HEADER_LEN + 2] = byte;
        let p = Packet::decode(&hello).expect("valid protocol");
        assert_eq!(
            p.body,
            Body::Hello(Hello {
                receivers_wanted: 5,
                protocol
            })
        );
        assert_eq!(encode_vec(&p), hello);
    }
}

#[test]
fn unknown_status_is_bad_field() {
    for s in [6u8, 7, 0x80, 0xFE] {
        let mut reply = samples()[4].0.clone();
        reply[HEADER_LEN] = s;
        assert_eq!(Packet::decode(&reply), Err(DecodeError::BadField("status")));
        let mut complete = samples()[9].0.clone();
        complete[HEADER_LEN] = s;
        assert_eq!(
            Packet::decode(&complete),
            Err(DecodeError::BadField("status"))
        );
    }
}

#[test]
fn every_status_round_trips() {
    for (byte, status) in [
        (0u8, Status::Ok),
        (1, Status::NoSpace),
        (2, Status::UnsafeName),
        (3, Status::Io),
        (4, Status::HashMismatch),
        (5, Status::TooLarge),
        (255, Status::Other),
    ] {
        let mut reply = samples()[4].0.clone();
        reply[HEADER_LEN] = byte;
        let p = Packet::decode(&reply).expect("valid status");
        assert_eq!(
            p.body,
            Body::OfferReply(OfferReply {
                status,
                text: "full"
            })
        );
        assert_eq!(encode_vec(&p), reply);
    }
}

#[test]
fn bye_aborted_must_be_zero_or_one() {
    let mut bye = samples()[10].0.clone();
    bye[HEADER_LEN] = 0;
    assert!(matches!(
        Packet::decode(&bye).map(|p| p.body),
        Ok(Body::Bye(Bye { aborted: false, .. }))
    ));
    for v in [2u8, 0x80, 0xFF] {
        bye[HEADER_LEN] = v;
        assert_eq!(
            Packet::decode(&bye),
            Err(DecodeError::BadField("bye.aborted"))
        );
    }
}

#[test]
fn data_copy_takes_any_value() {
    for copy in [0u16, 1, 0x8000, u16::MAX] {
        let mut data = samples()[5].0.clone();
        data[HEADER_LEN + 6..HEADER_LEN + 8].copy_from_slice(&copy.to_be_bytes());
        let Ok(Packet {
            body: Body::Data(d),
            ..
        }) = Packet::decode(&data)
        else {
            panic!("copy {copy} refused")
        };
        assert_eq!(d.copy, copy);
    }
}

#[test]
fn feedback_echo_copy_shares_a_byte_with_aggregate_and_saturates() {
    for (aggregate, copy, byte) in [
        (false, 0u8, 0x00u8),
        (true, 0, 0x01),
        (false, 1, 0x02),
        (true, 127, 0xFF),
    ] {
        let p = Packet {
            header: Header::new(SID, 4),
            body: Body::Ack(Feedback {
                cumulative: Seq(1),
                echo: Seq(2),
                echo_copy: copy,
                aggregate,
                bitmap: &[],
            }),
        };
        let bytes = encode_vec(&p);
        assert_eq!(bytes[HEADER_LEN + 8], byte);
        assert_eq!(Packet::decode(&bytes), Ok(p));
    }
    // Copies past the 7 bits the wire has are sent as "127 or more".
    let p = Packet {
        header: Header::new(SID, 4),
        body: Body::Nak(Feedback {
            cumulative: Seq(1),
            echo: Seq(2),
            echo_copy: 200,
            aggregate: false,
            bitmap: &[],
        }),
    };
    let bytes = encode_vec(&p);
    let Ok(Packet {
        body: Body::Nak(f), ..
    }) = Packet::decode(&bytes)
    else {
        panic!()
    };
    assert_eq!(f.echo_copy, ECHO_COPY_MAX);
}

#[test]
fn non_utf8_text_is_bad_text() {
    // Leave "bye" with its middle byte replaced by invalid UTF-8.
    for junk in [0xFFu8, 0x80, 0xC3] {
        let mut leave = samples()[11].0.clone();
        leave[HEADER_LEN + 2] = junk;
        assert_eq!(Packet::decode(&leave), Err(DecodeError::BadText));
    }
}

// ---------------------------------------------------------------------------
// Encoding errors
// ---------------------------------------------------------------------------

#[test]
fn text_longer_than_255_bytes_is_refused() {
    let name = "é".repeat(128); // 256 bytes, 128 chars
    let p = Packet {
        header: Header::new(SID, RANK_UNASSIGNED),
        body: Body::Join(Join {
            receiver_id: 1,
            name: &name,
        }),
    };
    let mut buf = vec![0u8; 1024];
    assert_eq!(p.encode(&mut buf), Err(EncodeError::TextTooLong));
}

#[test]
fn bitmap_longer_than_65535_bytes_is_refused() {
    let bitmap = vec![0u8; 65_536];
    let p = Packet {
        header: Header::new(SID, 0),
        body: Body::Ack(Feedback {
            cumulative: Seq(0),
            echo: Seq(0),
            echo_copy: 0,
            aggregate: false,
            bitmap: &bitmap,
        }),
    };
    let mut buf = vec![0u8; 70_000];
    assert_eq!(p.encode(&mut buf), Err(EncodeError::BitmapTooLong));
}

#[test]
fn encoding_into_a_short_buffer_is_an_error_not_a_panic() {
    for (bytes, packet) in samples() {
        for len in 0..bytes.len() {
            let mut buf = vec![0u8; len];
            assert_eq!(
                packet.encode(&mut buf),
                Err(EncodeError::BufferTooSmall),
                "{packet:?} into {len}"
            );
        }
        let mut buf = vec![0u8; bytes.len()];
        assert_eq!(packet.encode(&mut buf), Ok(bytes.len()));
        assert_eq!(buf, bytes);
    }
}

// ---------------------------------------------------------------------------
// Feedback::holds
// ---------------------------------------------------------------------------

#[test]
fn feedback_holds_everything_before_cumulative() {
    let fb = Feedback {
        cumulative: Seq(100),
        echo: Seq(100),
        echo_copy: 0,
        aggregate: false,
        bitmap: &[],
    };
    assert!(fb.holds(Seq(99)));
    assert!(fb.holds(Seq(0)));
    assert!(fb.holds(Seq(100).add(1u32 << 31))); // 2^31 away counts as before
    assert!(!fb.holds(Seq(100)));
    assert!(!fb.holds(Seq(101)));
}

#[test]
fn feedback_holds_before_cumulative_across_wraparound() {
    let fb = Feedback {
        cumulative: Seq(2),
        echo: Seq(2),
        echo_copy: 0,
        aggregate: false,
        bitmap: &[],
    };
    assert!(fb.holds(Seq(1)));
    assert!(fb.holds(Seq(0)));
    assert!(fb.holds(Seq(u32::MAX)));
    assert!(fb.holds(Seq(u32::MAX - 1000)));
    assert!(!fb.holds(Seq(2)));
}

#[test]
fn feedback_bitmap_is_lsb_first_after_cumulative() {
    let fb = Feedback {
        cumulative: Seq(u32::MAX - 1), // bitmap spans the wrap
        echo: Seq(0),
        echo_copy: 0,
        // bit 0 -> cum+1, bit 2 -> cum+3; byte 1 bit 7 -> cum+16
        aggregate: false,
        bitmap: &[0b0000_0101, 0b1000_0000],
    };
    let cum = fb.cumulative;
    assert!(!fb.holds(cum));
    assert!(fb.holds(cum.add(1)));
    assert!(!fb.holds(cum.add(2)));
    assert!(fb.holds(cum.add(3)));
    for k in 4..16 {
        assert!(!fb.holds(cum.add(k)), "cum+{k}");
    }
    assert!(fb.holds(cum.add(16)));
    // Past the end of the bitmap nothing is held.
    assert!(!fb.holds(cum.add(17)));
    assert!(!fb.holds(cum.add(1_000_000)));
    assert!(!fb.holds(cum.add((1u32 << 31) - 1)));
}

#[test]
fn feedback_cumulative_is_never_held_even_with_full_bitmap() {
    let fb = Feedback {
        cumulative: Seq(7),
        echo: Seq(7),
        echo_copy: 0,
        aggregate: false,
        bitmap: &[0xFF; 4],
    };
    assert!(!fb.holds(Seq(7)));
    for k in 1..=32 {
        assert!(fb.holds(Seq(7).add(k)));
    }
    assert!(!fb.holds(Seq(7).add(33)));
}

// ---------------------------------------------------------------------------
// peek_header and encode_data_header
// ---------------------------------------------------------------------------

#[test]
fn peek_header_agrees_with_decode() {
    for (bytes, packet) in samples() {
        assert_eq!(
            peek_header(&bytes),
            Ok((packet.body.kind(), packet.header)),
            "{packet:?}"
        );
    }
}

#[test]
fn peek_header_needs_the_whole_header() {
    let (bytes, _) = &samples()[8]; // Close
    for len in 0..HEADER_LEN {
        assert_eq!(peek_header(&bytes[..len]), Err(DecodeError::Truncated));
    }
    assert!(peek_header(&bytes[..HEADER_LEN]).is_ok());
}

#[test]
fn data_header_plus_payload_equals_encoded_data() {
    let (bytes, packet) = &samples()[5];
    let Body::Data(d) = packet.body else {
        unreachable!()
    };
    let mut buf = [0u8; DATA_HEADER_LEN];
    assert_eq!(
        encode_data_header(&mut buf, &packet.header, d.seq, d.poll, d.copy),
        Ok(DATA_HEADER_LEN)
    );
    assert_eq!(cat(&[&buf, d.payload]), *bytes);
}

#[test]
fn data_header_into_a_short_buffer_is_an_error() {
    let h = Header::new(SID, RANK_SENDER);
    for len in 0..DATA_HEADER_LEN {
        let mut buf = vec![0u8; len];
        assert_eq!(
            encode_data_header(&mut buf, &h, Seq(1), POLL_ALL, 0),
            Err(EncodeError::BufferTooSmall)
        );
    }
}

#[test]
fn rate_nak_kind_must_be_exp_or_last() {
    for bad in [0u8, 3, 0xFF] {
        let bytes = cat(&[&head(0x40, 3), &[bad], &[0, 0, 0, 1]]);
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::BadField("rate_nak.kind"))
        );
    }
    let last = cat(&[&head(0x40, RANK_SENDER), &[0x02], &[0, 0, 0, 9]]);
    assert!(matches!(
        Packet::decode(&last),
        Ok(Packet {
            body: Body::RateNak(RateNak {
                kind: RateNakKind::Last,
                seq: Seq(9)
            }),
            ..
        })
    ));
}

#[test]
fn rate_report_needs_a_known_phase_and_a_positive_spacing() {
    let report = |phase: u8, spacing: u64| {
        cat(&[
            &head(0x41, RANK_SENDER),
            &[0, 0, 0, 1, phase],
            &spacing.to_be_bytes(),
            &5u64.to_be_bytes(),
        ])
    };
    assert!(Packet::decode(&report(2, 1)).is_ok());
    assert_eq!(
        Packet::decode(&report(3, 1)),
        Err(DecodeError::BadField("rate_report.phase"))
    );
    assert_eq!(
        Packet::decode(&report(1, 0)),
        Err(DecodeError::BadField("rate_report.spacing"))
    );
}

#[test]
fn rate_sync_request_carries_zeros_and_set_a_positive_spacing() {
    let sync = |op: u8, spacing: u64, members: u16| {
        cat(&[
            &head(0x42, RANK_SENDER),
            &[0, 0, 0, 3, op],
            &spacing.to_be_bytes(),
            &members.to_be_bytes(),
        ])
    };
    assert_wire(
        &sync(0, 0, 0),
        &Packet {
            header: Header::new(SID, RANK_SENDER),
            body: Body::RateSync(RateSync {
                epoch: 3,
                op: RateSyncOp::Request,
            }),
        },
    );
    for bad in [sync(0, 1, 0), sync(0, 0, 1), sync(1, 0, 2), sync(2, 5, 1)] {
        assert_eq!(
            Packet::decode(&bad),
            Err(DecodeError::BadField("rate_sync"))
        );
    }
}

#[test]
fn type_codes_between_the_ranges_stay_unknown() {
    for t in [0x0D, 0x0F, 0x3F, 0x43, 0x4F] {
        let bytes = head(t, RANK_SENDER);
        assert_eq!(Packet::decode(&bytes), Err(DecodeError::UnknownKind(t)));
    }
}

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
    Close([u8; HASH_LEN]),
    Complete(Status, [u8; HASH_LEN], String),
    Bye(bool, String),
    Leave(String),
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
            OwnedBody::Close(hash) => Body::Close(Close { hash: *hash }),
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
        any::<[u8; HASH_LEN]>().prop_map(OwnedBody::Close),
        (arb_status(), any::<[u8; HASH_LEN]>(), arb_text())
            .prop_map(|(s, h, t)| OwnedBody::Complete(s, h, t)),
        (any::<bool>(), arb_text()).prop_map(|(a, t)| OwnedBody::Bye(a, t)),
        arb_text().prop_map(OwnedBody::Leave),
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
        let must_fail = if p.body.kind() == Kind::Data { DATA_HEADER_LEN } else { bytes.len() };
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
