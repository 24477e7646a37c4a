//! Wire-format tests: fixed byte layouts, every rejection path, and
//! property tests (round trips, canonical decoding, no panics on any input).

use crate::*;

mod fields;
mod layout;
mod props;

/// Session id used by the fixed-layout tests.
const SID: SessionId = SessionId(0x0102_0304_0506_0708);

/// The 16 header bytes for `kind` sent by `rank` in session [`SID`].
fn head(kind: u8, rank: u16) -> Vec<u8> {
    let [r0, r1] = rank.to_be_bytes();
    vec![
        b'R', b'M', 0x04, kind, 0x00, 0x00, r0, r1, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
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
                0x04, // version
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
                &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // no FEC
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
                    fec: None,
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
                0x04, // version
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
            cat(&[&head(0x09, RANK_SENDER), &CLOSE_HASH, &[0x00]]),
            Packet {
                header: sender,
                body: Body::Close(Close {
                    hash: CLOSE_HASH,
                    signature: None,
                }),
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
            cat(&[
                &head(0x0D, 3),
                &[0x00, 0x01, 0x00, 0x02, 0x00, 0x02], // part 1 of 2, 2 ranges
                &[0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x03], // packets 5..8
                &[0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01], // packet 65,536
            ]),
            Packet {
                header: rank3,
                body: Body::Have(Have {
                    part: 1,
                    parts: 2,
                    ranges: &[0, 0, 0, 5, 0, 0, 0, 3, 0, 1, 0, 0, 0, 0, 0, 1],
                }),
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
        (
            cat(&[
                &head(0x0E, RANK_SENDER),
                &[0x00, 0x00, 0x01, 0x00], // seq 256
                &[0x00, 0x00, 0x00, 0x03], // block 3
                &[0x00, 0x05],             // parity packet 5
                &[0xFF, 0xFF],             // poll all
                &[0xAB, 0xCD],             // parity bytes
            ]),
            Packet {
                header: sender,
                body: Body::Parity(Parity {
                    seq: Seq(256),
                    block: 3,
                    index: 5,
                    poll: POLL_ALL,
                    payload: &[0xAB, 0xCD],
                }),
            },
        ),
        (
            // 12 receivers behind, two names given.
            cat(&[&head(0x0F, 3), &[0x00, 0x0C, 0x05], b"b1,b2"]),
            Packet {
                header: rank3,
                body: Body::Behind(Behind {
                    receivers: 12,
                    names: "b1,b2",
                }),
            },
        ),
        (
            // Rank 3 is to catch up over TCP at port 7702 (0x1E16).
            cat(&[&head(0x10, 0xFFFF), &[0x00, 0x03, 0x1E, 0x16]]),
            Packet {
                header: sender,
                body: Body::Move(Move {
                    rank: 3,
                    port: 7702,
                }),
            },
        ),
        (
            // Two admissions: id 7 as rank 3 under 10.0.0.2:4000, id 9
            // turned away (rank 0xFFFE, no upstream).
            cat(&[&head(0x11, 0xFFFF), &[2], WELCOMES_SAMPLE]),
            Packet {
                header: sender,
                body: Body::Welcomes(Welcomes {
                    entries: WELCOMES_SAMPLE,
                }),
            },
        ),
    ]
}

/// The entries of the `Welcomes` sample.
const WELCOMES_SAMPLE: &[u8] = &[
    0, 0, 0, 0, 0, 0, 0, 7, 0x00, 0x03, 10, 0, 0, 2, 0x0F, 0xA0, //
    0, 0, 0, 0, 0, 0, 0, 9, 0xFF, 0xFE, 0, 0, 0, 0, 0x00, 0x00,
];

/// Offset of the Offer body field at `body_offset`.
const fn offer_at(body_offset: usize) -> usize {
    HEADER_LEN + body_offset
}
