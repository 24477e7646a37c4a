//! Overlay frame tests: fixed layouts, rejections, and property tests
//! (round trips, canonical decoding, no panics on any input).

use super::*;
use crate::truncate_utf8;
use proptest::prelude::*;

#[test]
fn every_message_round_trips() {
    for m in sample_messages() {
        let frame = m.to_frame();
        assert_eq!(Msg::decode(&frame), Ok((m.clone(), frame.len())), "{m:?}");
        assert_eq!(frame.len(), m.buffer_len(), "{m:?}");
    }
}

#[test]
fn fixed_bytes_of_a_data_hello() {
    let frame = Msg::DataHello {
        session: 1,
        from: 2,
        to: 3,
        segments: SegmentSet::Even,
        first: 0x0102,
    }
    .to_frame();
    assert_eq!(
        frame,
        [
            b'R', b'O', 5, 9, 0, 0, 0, 21, // header: DataHello, 21 bytes
            0, 0, 0, 0, 0, 0, 0, 1, // session
            0, 2, 0, 3, // from, to
            1, // even segments
            0, 0, 0, 0, 0, 0, 1, 2, // first
        ]
    );
}

#[test]
fn fixed_bytes_of_a_detach_and_an_orphaned() {
    assert_eq!(
        Msg::Detach { rank: 0x0105 }.to_frame(),
        [b'R', b'O', 5, 11, 0, 0, 0, 2, 1, 5]
    );
    let orphaned = Msg::Orphaned {
        from: 7,
        segments: SegmentSet::Residues {
            modulus: 6,
            residues: 0b110,
        },
        have: 9,
    };
    assert_eq!(
        orphaned.to_frame(),
        [
            b'R', b'O', 5, 12, 0, 0, 0, 16, // header: Orphaned, 16 bytes
            0, 7, // from
            3, 6, 0, 0, 0, 6, // segments 1 and 2 of every 6
            0, 0, 0, 0, 0, 0, 0, 9, // have
        ]
    );
}

#[test]
fn fixed_bytes_of_a_probe_an_unheard_and_a_redirect() {
    let probe = Msg::Probe {
        group: "239.77.0.1:7700".parse().unwrap(),
        session: 0x0102,
        wait_ms: 500,
    };
    assert_eq!(
        probe.to_frame(),
        [
            b'R', b'O', 5, 13, 0, 0, 0, 19, // header: Probe, 19 bytes
            4, 239, 77, 0, 1, 0x1e, 0x14, // IPv4 239.77.0.1 port 7700
            0, 0, 0, 0, 0, 0, 1, 2, // session
            0, 0, 1, 0xf4, // wait_ms 500
        ]
    );
    assert_eq!(Msg::Unheard.to_frame(), [b'R', b'O', 5, 14, 0, 0, 0, 0]);
    let catch_up = Msg::CatchUp {
        rank: 3,
        from: 0x0102_0304,
    };
    assert_eq!(
        catch_up.to_frame(),
        [
            b'R', b'O', 5, 16, 0, 0, 0, 10, // header: CatchUp, 10 bytes
            0, 3, // rank
            0, 0, 0, 0, 1, 2, 3, 4, // from
        ]
    );
    let redirect = Msg::Redirect {
        control: "10.0.0.1:7701".parse().unwrap(),
    };
    assert_eq!(
        redirect.to_frame(),
        [
            b'R', b'O', 5, 15, 0, 0, 0, 7, // header: Redirect, 7 bytes
            4, 10, 0, 0, 1, 0x1e, 0x15, // IPv4 10.0.0.1 port 7701
        ]
    );
    let verdict = Msg::Verdict {
        ok: false,
        text: "h2".into(),
    };
    assert_eq!(
        verdict.to_frame(),
        [
            b'R', b'O', 5, 17, 0, 0, 0, 5, // header: Verdict, 5 bytes
            0, // not ok
            0, 2, b'h', b'2', // text
        ]
    );
    let mut bad = verdict.to_frame();
    bad[8] = 2;
    assert_eq!(Msg::decode(&bad), Err(DecodeError::BadField("ok")));
}

#[test]
fn fixed_bytes_of_a_register_and_a_ready() {
    let register = Msg::Register {
        name: "ab".into(),
        data_addr: "10.0.0.1:258".parse().unwrap(),
    };
    assert_eq!(
        register.to_frame(),
        [
            b'R', b'O', 5, 1, 0, 0, 0, 11, // header: Register, 11 bytes
            0, 2, b'a', b'b', // name
            4, 10, 0, 0, 1, 1, 2, // IPv4 10.0.0.1 port 258
        ]
    );
    let ready = Msg::Ready {
        status: Status::TooLarge,
        text: "x".into(),
    };
    assert_eq!(
        ready.to_frame(),
        [b'R', b'O', 5, 3, 0, 0, 0, 4, 5, 0, 1, b'x']
    );
}

/// An assignment of an 8 KiB-segment, 64 KiB object "f" whose one parent
/// is the sender at `addr`, sending `segments`; no children.
fn one_parent(shape: OverlayShape, addr: &str, segments: SegmentSet) -> Assignment {
    Assignment {
        session: 0,
        rank: 1,
        receivers: 1,
        shape,
        segment_size: 0x2000,
        size: 0x10000,
        name: "f".into(),
        inactivity_ms: 5000,
        parents: vec![Peer {
            rank: 0,
            name: String::new(),
            addr: addr.parse().unwrap(),
            segments,
        }],
        children: vec![],
    }
}

#[test]
fn fixed_bytes_of_an_assign() {
    let a = Msg::Assign(Box::new(Assignment {
        session: 0x0102_0304_0506_0708,
        rank: 2,
        receivers: 3,
        ..one_parent(OverlayShape::Bintree, "[::1]:7701", SegmentSet::Odd)
    }));
    #[rustfmt::skip]
    let expected: Vec<u8> = [
        &[b'R', b'O', 5, 2, 0, 0, 0, 64][..],        // header: Assign, 64 bytes
        &[1, 2, 3, 4, 5, 6, 7, 8],                    // session
        &[0, 2, 0, 3],                                // rank, receivers
        &[5, 0, 0, 0, 0],                             // shape bintree, fanout 0
        &[0, 0, 0x20, 0],                             // segment size
        &[0, 0, 0, 0, 0, 1, 0, 0],                    // object size
        &[0, 1, b'f'],                                // name
        &[0, 0, 0x13, 0x88],                          // inactivity 5000 ms
        &[0, 1, 0, 0, 0, 0, 6],                       // 1 parent: rank 0, "", IPv6
        &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        &[0x1e, 0x15, 2],                             // port 7701, odd segments
        &[0, 0],                                      // no children
    ]
    .concat();
    assert_eq!(a.to_frame(), expected);
    assert_eq!(Msg::decode(&expected), Ok((a, expected.len())));
}

#[test]
fn bad_headers_are_refused() {
    let good = Msg::Start.to_frame();
    let mut bad = good.clone();
    bad[0] = b'X';
    assert_eq!(Msg::decode(&bad), Err(DecodeError::Magic));
    let mut sealed = good.clone();
    sealed[..2].copy_from_slice(&SEALED_MAGIC);
    assert_eq!(Msg::decode(&sealed), Err(DecodeError::Sealed));
    let mut bad = good.clone();
    bad[2] = 1;
    assert_eq!(Msg::decode(&bad), Err(DecodeError::Version(1)));
    let last = MsgKind::Verdict.to_u8();
    let mut bad = good.clone();
    bad[3] = last + 1;
    assert_eq!(Msg::decode(&bad), Err(DecodeError::Type(last + 1)));
    let mut bad = good.clone();
    bad[3] = 0;
    assert_eq!(Msg::decode(&bad), Err(DecodeError::Type(0)));
    let mut bad = good;
    bad[4] = 0xff;
    assert!(matches!(Msg::decode(&bad), Err(DecodeError::TooLong(_))));
}

#[test]
fn short_headers_are_truncated_before_anything_else() {
    for cut in 0..HEADER_LEN {
        assert_eq!(
            Msg::parse_header(&[b'X'; 8][..cut]),
            Err(DecodeError::Truncated)
        );
    }
}

#[test]
fn bad_fields_are_refused() {
    // Ready with an undefined status.
    let mut ready = Msg::Ready {
        status: Status::Ok,
        text: String::new(),
    }
    .to_frame();
    ready[HEADER_LEN] = 7;
    assert_eq!(Msg::decode(&ready), Err(DecodeError::BadField("status")));
    // Register with an unknown address family.
    let mut reg = sample_messages()[0].to_frame();
    let family = HEADER_LEN + 2 + "host:1".len();
    reg[family] = 5;
    assert_eq!(
        Msg::decode(&reg),
        Err(DecodeError::BadField("address family"))
    );
    // Register with a name that is not UTF-8.
    let mut reg = sample_messages()[0].to_frame();
    reg[HEADER_LEN + 2] = 0xff;
    assert_eq!(
        Msg::decode(&reg),
        Err(DecodeError::BadField("string is not UTF-8"))
    );
    // Assign: unknown shape, tree without fanout, fanout on a chain, zero
    // segment size, unknown segment set.
    let assign = sample_messages()[2].to_frame();
    let shape_at = HEADER_LEN + 12;
    for (code, fanout) in [(0u8, 0u32), (7, 0), (2, 0), (4, 1), (6, 1)] {
        let mut bad = assign.clone();
        bad[shape_at] = code;
        bad[shape_at + 1..shape_at + 5].copy_from_slice(&fanout.to_be_bytes());
        assert_eq!(
            Msg::decode(&bad),
            Err(DecodeError::BadField("shape")),
            "{code} {fanout}"
        );
    }
    let mut bad = assign.clone();
    bad[shape_at + 5..shape_at + 9].copy_from_slice(&[0; 4]);
    assert_eq!(
        Msg::decode(&bad),
        Err(DecodeError::BadField("segment size"))
    );
    let mut bad = assign.clone();
    let last = bad.len() - 1; // the only child's segment set
    bad[last] = 4;
    assert_eq!(Msg::decode(&bad), Err(DecodeError::BadField("segment set")));
}

/// The Assign of [`fixed_bytes_of_an_assign`] with the parent's set
/// replaced by `set`, as bytes.
fn assign_with_set(set: &[u8]) -> Vec<u8> {
    let mut a = Msg::Assign(Box::new(Assignment {
        session: 1,
        rank: 1,
        receivers: 8,
        ..one_parent(OverlayShape::Pipeline, "10.0.0.1:7701", SegmentSet::All)
    }))
    .to_frame();
    let at = a.len() - 3; // the parent's set, then an empty child list
    a.splice(at..=at, set.iter().copied());
    let len = (a.len() - HEADER_LEN) as u32;
    a[4..8].copy_from_slice(&len.to_be_bytes());
    a
}

#[test]
fn residue_sets_have_fixed_bytes_and_only_canonical_ones_decode() {
    // Segments 1 and 2 of every 6: type 3, modulus, mask.
    let set = SegmentSet::residues(6, 0b00_0110).unwrap();
    assert_eq!(
        set,
        SegmentSet::Residues {
            modulus: 6,
            residues: 0b00_0110
        }
    );
    let bytes = assign_with_set(&[3, 6, 0, 0, 0, 0b00_0110]);
    let Ok((Msg::Assign(a), _)) = Msg::decode(&bytes) else {
        panic!("{:?}", Msg::decode(&bytes))
    };
    assert_eq!(a.parents[0].segments, set);
    assert_eq!(Msg::Assign(a).to_frame(), bytes);
    // The same sets spelt another way, or no set at all, are refused.
    for bad in [
        [3, 4, 0, 0, 0, 0b0101],    // even, period 4
        [3, 6, 0, 0, 0, 0b01_0010], // 1 of every 3, period 6
        [3, 2, 0, 0, 0, 0b10],      // odd
        [3, 1, 0, 0, 0, 1],         // all
        [3, 3, 0, 0, 0, 0b111],     // all, period 3
        [3, 6, 0, 0, 0, 0],         // empty
        [3, 0, 0, 0, 0, 1],         // no period
        [3, 33, 0, 0, 0, 1],        // period too long
        [3, 5, 0, 0, 0, 0b10_0001], // residue 5 of 5
    ] {
        assert_eq!(
            Msg::decode(&assign_with_set(&bad)),
            Err(DecodeError::BadField("segment set")),
            "{bad:?}"
        );
    }
}

#[test]
fn names_are_cut_to_max_name_and_longer_ones_refused() {
    let long = "é".repeat(200); // 400 bytes
    let frame = Msg::Register {
        name: long.clone(),
        data_addr: "127.0.0.1:1".parse().unwrap(),
    }
    .to_frame();
    let (m, _) = Msg::decode(&frame).unwrap();
    let Msg::Register { name, .. } = m else {
        panic!("not a register: {m:?}")
    };
    assert_eq!(name, truncate_utf8(&long, MAX_NAME));
    assert_eq!(name.len(), 254, "cut at a character boundary");
    // A hand-made frame with a 256-byte name: no encoder writes it.
    let mut payload = vec![1, 0];
    payload.extend_from_slice(&[b'a'; 256]);
    payload.extend_from_slice(&[4, 127, 0, 0, 1, 0, 1]);
    assert_eq!(
        Msg::parse_payload(MsgKind::Register, &payload),
        Err(DecodeError::BadField("name"))
    );
}

#[test]
fn peer_counts_the_payload_cannot_hold_are_refused_before_allocating() {
    let mut payload = Msg::Assign(Box::new(Assignment {
        session: 1,
        rank: 1,
        receivers: 1,
        shape: OverlayShape::Chain,
        segment_size: 1,
        size: 1,
        name: String::new(),
        inactivity_ms: 1,
        parents: vec![],
        children: vec![],
    }))
    .to_frame()
    .split_off(HEADER_LEN);
    let parents_at = payload.len() - 4;
    payload[parents_at..parents_at + 2].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(
        Msg::parse_payload(MsgKind::Assign, &payload),
        Err(DecodeError::Truncated)
    );
}

#[test]
fn truncations_and_extensions_of_valid_frames_never_decode() {
    for m in sample_messages() {
        let frame = m.to_frame();
        for cut in 0..frame.len() {
            assert!(Msg::decode(&frame[..cut]).is_err());
        }
        let mut longer = frame.clone();
        longer.push(0);
        let len = u32::from_be_bytes([longer[4], longer[5], longer[6], longer[7]]) + 1;
        longer[4..8].copy_from_slice(&len.to_be_bytes());
        assert!(Msg::decode(&longer).is_err());
    }
}

#[test]
fn bytes_after_a_frame_belong_to_the_next_one() {
    let mut two = Msg::Heartbeat.to_frame();
    two.extend_from_slice(&Msg::Start.to_frame());
    assert_eq!(Msg::decode(&two), Ok((Msg::Heartbeat, HEADER_LEN)));
    assert_eq!(
        Msg::decode(&two[HEADER_LEN..]),
        Ok((Msg::Start, HEADER_LEN))
    );
}

/// A tiny deterministic generator (splitmix64): the garbage test below
/// needs no seed library and replays exactly.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Decodes `bytes`; whatever decodes must re-encode to the same bytes.
fn check_canonical(bytes: &[u8]) {
    if let Ok((m, n)) = Msg::decode(bytes) {
        assert_eq!(m.to_frame(), &bytes[..n], "not canonical: {m:?}");
    }
}

#[test]
fn arbitrary_bytes_decode_to_a_message_or_an_error() {
    let mut rng = Mix(0x5eed);
    let samples: Vec<Vec<u8>> = sample_messages().iter().map(Msg::to_frame).collect();
    let types = usize::from(MsgKind::Verdict.to_u8()) + 2;
    for round in 0..200_000 {
        let bytes: Vec<u8> = if round % 2 == 0 {
            // Random garbage behind a plausible header.
            let len = rng.below(200);
            let mut v: Vec<u8> = (0..HEADER_LEN + len).map(|_| rng.next() as u8).collect();
            v[0..2].copy_from_slice(&MAGIC);
            v[2] = VERSION;
            v[3] = rng.below(types) as u8;
            v[4..8].copy_from_slice(&(len as u32).to_be_bytes());
            v
        } else {
            // A valid frame with a few bytes flipped.
            let mut v = samples[round % samples.len()].clone();
            for _ in 0..1 + rng.below(3) {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            v
        };
        check_canonical(&bytes);
    }
}

fn arb_name() -> impl Strategy<Value = String> {
    ".{0,20}".prop_map(|s| truncate_utf8(&s, MAX_NAME).to_owned())
}

fn arb_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
    ]
}

fn arb_status() -> impl Strategy<Value = Status> {
    prop::sample::select(Status::ALL)
}

fn arb_shape() -> impl Strategy<Value = OverlayShape> {
    prop_oneof![
        Just(OverlayShape::Direct),
        (1..=u32::MAX).prop_map(|fanout| OverlayShape::Tree { fanout }),
        Just(OverlayShape::Binomial),
        Just(OverlayShape::Chain),
        Just(OverlayShape::Bintree),
        Just(OverlayShape::Pipeline),
    ]
}

/// Every canonical set: the three named ones and residue classes.
fn arb_set() -> impl Strategy<Value = SegmentSet> {
    prop_oneof![
        Just(SegmentSet::All),
        Just(SegmentSet::Even),
        Just(SegmentSet::Odd),
        (1..=SegmentSet::MAX_MODULUS, any::<u32>()).prop_filter_map(
            "empty or out of range",
            |(m, mask)| {
                let mask = if m == 32 { mask } else { mask & ((1 << m) - 1) };
                SegmentSet::residues(m, mask)
            }
        ),
    ]
}

fn arb_peer() -> impl Strategy<Value = Peer> {
    (any::<u16>(), arb_name(), arb_addr(), arb_set()).prop_map(|(rank, name, addr, segments)| {
        Peer {
            rank,
            name,
            addr,
            segments,
        }
    })
}

fn arb_assignment() -> impl Strategy<Value = Assignment> {
    (
        (any::<u64>(), any::<u16>(), any::<u16>(), arb_shape()),
        (1..=u32::MAX, any::<u64>(), ".{0,30}", any::<u32>()),
        prop::collection::vec(arb_peer(), 0..4),
        prop::collection::vec(arb_peer(), 0..4),
    )
        .prop_map(
            |(
                (session, rank, receivers, shape),
                (segment_size, size, name, inactivity_ms),
                parents,
                children,
            )| Assignment {
                session,
                rank,
                receivers,
                shape,
                segment_size,
                size,
                name,
                inactivity_ms,
                parents,
                children,
            },
        )
}

fn arb_msg() -> impl Strategy<Value = Msg> {
    prop_oneof![
        (arb_name(), arb_addr()).prop_map(|(name, data_addr)| Msg::Register { name, data_addr }),
        arb_assignment().prop_map(|a| Msg::Assign(Box::new(a))),
        (arb_status(), ".{0,30}").prop_map(|(status, text)| Msg::Ready { status, text }),
        Just(Msg::Start),
        any::<u64>().prop_map(|bytes| Msg::Progress { bytes }),
        Just(Msg::Heartbeat),
        (arb_status(), ".{0,30}").prop_map(|(status, text)| Msg::Complete { status, text }),
        ".{0,30}".prop_map(|text| Msg::Abort { text }),
        (
            any::<u64>(),
            any::<u16>(),
            any::<u16>(),
            arb_set(),
            any::<u64>()
        )
            .prop_map(|(session, from, to, segments, first)| Msg::DataHello {
                session,
                from,
                to,
                segments,
                first,
            }),
        any::<u16>().prop_map(|rank| Msg::Detach { rank }),
        (any::<u16>(), arb_set(), any::<u64>()).prop_map(|(from, segments, have)| {
            Msg::Orphaned {
                from,
                segments,
                have,
            }
        }),
        (any::<[u8; 32]>(), proptest::option::of(any::<[u8; 64]>()))
            .prop_map(|(hash, signature)| Msg::Hash { hash, signature }),
        (arb_addr(), any::<u64>(), any::<u32>()).prop_map(|(group, session, wait_ms)| {
            Msg::Probe {
                group,
                session,
                wait_ms,
            }
        }),
        Just(Msg::Unheard),
        arb_addr().prop_map(|control| Msg::Redirect { control }),
        (any::<u16>(), any::<u64>()).prop_map(|(rank, from)| Msg::CatchUp { rank, from }),
    ]
}

proptest! {
    #[test]
    fn segment_sets_count_enumerate_and_compare_like_their_definition(
        m in 1..=SegmentSet::MAX_MODULUS,
        raw in any::<u32>(),
        other in arb_set(),
        total in 0..200u64,
    ) {
        let mask = if m == 32 { raw } else { raw & ((1 << m) - 1) };
        let Some(set) = SegmentSet::residues(m, mask) else {
            prop_assert_eq!(mask, 0);
            return Ok(());
        };
        let member = |k: u64| mask >> (k % u64::from(m)) & 1 == 1;
        let listed: Vec<u64> = (0..total).filter(|&k| member(k)).collect();
        prop_assert_eq!(set.count(total), listed.len() as u64);
        for (i, &k) in listed.iter().enumerate() {
            prop_assert_eq!(set.nth(i as u64), k);
        }
        prop_assert!((0..total).all(|k| set.contains(k) == member(k)));
        let subset = (0..64 * 31).all(|k| !member(k) || other.contains(k));
        prop_assert_eq!(set.is_subset_of(other), subset);
        // Canonical: rebuilding from the reduced form gives the same set.
        let (period, classes) = set.classes();
        prop_assert_eq!(SegmentSet::residues(period as u8, classes), Some(set));
    }

    #[test]
    fn messages_round_trip(m in arb_msg()) {
        let frame = m.to_frame();
        prop_assert_eq!(frame.len(), m.buffer_len());
        prop_assert_eq!(Msg::decode(&frame), Ok((m.clone(), frame.len())));
        // emit into an exact buffer writes the same; one byte short fails.
        let mut buf = vec![0u8; frame.len()];
        prop_assert_eq!(m.emit(&mut buf), Ok(frame.len()));
        prop_assert_eq!(&buf, &frame);
        prop_assert!(m.emit(&mut buf[..frame.len() - 1]).is_err());
    }

    #[test]
    fn truncated_messages_never_decode(m in arb_msg(), cut in any::<prop::sample::Index>()) {
        let frame = m.to_frame();
        let cut = cut.index(frame.len());
        prop_assert!(Msg::decode(&frame[..cut]).is_err());
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        check_canonical(&bytes);
    }

    #[test]
    fn decoding_arbitrary_payloads_never_panics(
        kind in prop::sample::select(MsgKind::ALL),
        payload in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        if let Ok(m) = Msg::parse_payload(kind, &payload) {
            prop_assert_eq!(m.kind(), kind);
            prop_assert_eq!(&m.to_frame()[HEADER_LEN..], &payload[..]);
        }
    }
}
