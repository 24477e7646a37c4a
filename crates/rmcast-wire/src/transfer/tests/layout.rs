//! Fixed byte layouts, header rejections and length checks.

use super::*;

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
            Kind::Have,
            Kind::RateNak,
            Kind::RateReport,
            Kind::RateSync,
            Kind::Parity,
            Kind::Behind,
            Kind::Move,
            Kind::Welcomes,
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
            Body::Offer(o) => 36 + o.name.len(),
            Body::OfferReply(x) => 2 + x.text.len(),
            Body::Data(d) => 8 + d.payload.len(),
            Body::Ack(f) | Body::Nak(f) => 11 + f.bitmap.len(),
            Body::Close(c) => 33 + if c.signature.is_some() { 64 } else { 0 },
            Body::Complete(c) => 34 + c.text.len(),
            Body::Bye(b) => 2 + b.text.len(),
            Body::Leave(l) => 1 + l.text.len(),
            Body::Have(h) => 6 + h.ranges.len(),
            Body::RateNak(_) => 5,
            Body::RateReport(_) => 21,
            Body::RateSync(_) => 15,
            Body::Parity(p) => 12 + p.payload.len(),
            Body::Behind(b) => 3 + b.names.len(),
            Body::Move(_) => 4,
            Body::Welcomes(w) => 1 + w.entries.len(),
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
        // Versions 1 (hash in the Offer), 2 (no sealing) and 3 (no FEC
        // interleaving) included.
        for v in [0u8, 1, 2, 3, 5, 0x7F, 0xFF] {
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
    // required, whole; version 3 adds the signed flag.
    let (bytes, _) = &samples()[8];
    assert_eq!(bytes.len(), HEADER_LEN + HASH_LEN + 1);
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
    for t in [0x00u8, 0x12, 0x13, 0x7F, 0x80, 0xFF] {
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
fn any_flags_but_alone_are_unsupported_flags() {
    let (bytes, _) = &samples()[0];
    for f in (1..=u8::MAX).filter(|&f| f != FLAG_ALONE) {
        let mut bad = bytes.clone();
        bad[4] = f;
        assert_eq!(Packet::decode(&bad), Err(DecodeError::UnsupportedFlags(f)));
        if f & FLAG_AUTH == 0 {
            assert_eq!(peek_header(&bad), Err(DecodeError::UnsupportedFlags(f)));
        }
    }
}

#[test]
fn the_alone_flag_round_trips_on_every_kind() {
    for (bytes, _) in samples() {
        let mut alone = bytes.clone();
        alone[4] = FLAG_ALONE;
        let p = Packet::decode(&alone).expect("FLAG_ALONE is a transfer packet's flag");
        assert_eq!(p.header.flags, FLAG_ALONE);
        let mut buf = vec![0u8; alone.len()];
        let n = p.encode(&mut buf).unwrap();
        assert_eq!(&buf[..n], &alone[..], "canonical with the flag");
        assert_eq!(peek_header(&alone).map(|(_, h)| h), Ok(p.header));
    }
}

#[test]
fn nonzero_key_hint_is_rejected() {
    let (bytes, _) = &samples()[0];
    for e in [1u8, 2, 0xFF] {
        let mut bad = bytes.clone();
        bad[5] = e;
        assert_eq!(Packet::decode(&bad), Err(DecodeError::BadField("key_hint")));
    }
}

// ---------------------------------------------------------------------------
// Length checks
// ---------------------------------------------------------------------------

#[test]
fn truncated_packets_are_errors_not_panics() {
    for (bytes, packet) in samples() {
        // A data or parity payload runs to the end of the datagram, so
        // cutting into it leaves a valid, shorter packet; everything else
        // must fail.
        let must_fail = match packet.body {
            Body::Data(_) => DATA_HEADER_LEN,
            Body::Parity(_) => PARITY_HEADER_LEN,
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
        if matches!(packet.body.kind(), Kind::Data | Kind::Parity) {
            continue; // a data or parity payload takes every remaining byte
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

#[test]
fn a_signed_close_carries_its_signature_after_the_flag() {
    let bytes = cat(&[&head(0x09, RANK_SENDER), &[0xAA; 32], &[0x01], &[0x51; 64]]);
    let packet = Packet {
        header: Header::new(SessionId(0x0102_0304_0506_0708), RANK_SENDER),
        body: Body::Close(Close {
            hash: [0xAA; 32],
            signature: Some([0x51; 64]),
        }),
    };
    assert_wire(&bytes, &packet);
    // Cut anywhere inside the signature: truncated, never an unsigned Close.
    for len in HEADER_LEN + 33..bytes.len() {
        assert_eq!(Packet::decode(&bytes[..len]), Err(DecodeError::Truncated));
    }
    for flag in [2u8, 0x80, 0xFF] {
        let mut bad = bytes.clone();
        bad[HEADER_LEN + 32] = flag;
        assert_eq!(Packet::decode(&bad), Err(DecodeError::BadField("signed")));
    }
}

#[test]
fn have_ranges_read_back_and_malformed_reports_are_refused() {
    let mut ranges = Vec::new();
    encode_have_ranges(&[(5, 3), (65_536, 1)], &mut ranges);
    let have = Have {
        part: 0,
        parts: 1,
        ranges: &ranges,
    };
    assert_eq!(have.ranges().collect::<Vec<_>>(), [(5, 3), (65_536, 1)]);
    let packet = |part: u16, parts: u16, ranges: &[(u32, u32)]| {
        let mut bytes = encode_vec(&Packet {
            header: Header::new(SID, 3),
            body: Body::Have(Have {
                part: 0,
                parts: 1,
                ranges: &[],
            }),
        });
        bytes[HEADER_LEN..HEADER_LEN + 2].copy_from_slice(&part.to_be_bytes());
        bytes[HEADER_LEN + 2..HEADER_LEN + 4].copy_from_slice(&parts.to_be_bytes());
        bytes[HEADER_LEN + 4..HEADER_LEN + 6].copy_from_slice(&(ranges.len() as u16).to_be_bytes());
        encode_have_ranges(ranges, &mut bytes);
        bytes
    };
    assert!(Packet::decode(&packet(0, 1, &[(0, 1), (1, 1)])).is_ok());
    assert!(Packet::decode(&packet(0, 1, &[(u32::MAX, 1)])).is_ok());
    assert!(Packet::decode(&packet(0, 0, &[])).is_ok(), "still looking");
    for (bytes, why) in [
        (packet(0, 0, &[(1, 1)]), "have.part"),
        (packet(1, 0, &[]), "have.part"),
        (packet(2, 2, &[]), "have.part"),
        (packet(0, 1, &[(3, 0)]), "have.ranges"),
        (packet(0, 1, &[(4, 2), (5, 1)]), "have.ranges"),
        (packet(0, 1, &[(9, 1), (2, 1)]), "have.ranges"),
        (packet(0, 1, &[(u32::MAX, 2)]), "have.ranges"),
    ] {
        assert_eq!(Packet::decode(&bytes), Err(DecodeError::BadField(why)));
    }
    let mut ragged = packet(0, 1, &[(1, 1)]);
    ragged.pop();
    assert_eq!(Packet::decode(&ragged), Err(DecodeError::Truncated));
    let mut buf = [0u8; 64];
    let bad = Packet {
        header: Header::new(SID, 3),
        body: Body::Have(Have {
            part: 1,
            parts: 1,
            ranges: &[],
        }),
    };
    assert_eq!(bad.encode(&mut buf), Err(EncodeError::BadHave));
}

#[test]
fn an_interleaved_fec_offer_matches_its_fixed_bytes() {
    // The Offer sample with FEC 64:2, parity space 64, 8 blocks interleaved:
    // the four FEC fields at body offsets 27..35.
    let (mut bytes, mut packet) = samples().swap_remove(3);
    let Body::Offer(o) = &mut packet.body else {
        panic!("sample 3 is the Offer")
    };
    o.fec = Some(FecShape::new(64, 2).with_depth(8));
    let at = HEADER_LEN + 27;
    bytes[at..at + 8].copy_from_slice(&[0x00, 0x40, 0x00, 0x02, 0x00, 0x40, 0x00, 0x08]);
    assert_eq!(bytes.len(), HEADER_LEN + 36 + o.name.len());
    assert_wire(&bytes, &packet);
}

#[test]
fn welcomes_read_back_and_malformed_lists_are_refused() {
    let (bytes, packet) = samples().pop().expect("the Welcomes sample is last");
    let Body::Welcomes(w) = packet.body else {
        panic!("not the Welcomes sample: {packet:?}");
    };
    let entries: Vec<Welcome> = w.entries().collect();
    assert_eq!(
        entries,
        [
            Welcome {
                receiver_id: 7,
                rank: 3,
                upstream: Some(std::net::SocketAddrV4::new([10, 0, 0, 2].into(), 4000)),
            },
            Welcome {
                receiver_id: 9,
                rank: RANK_UNASSIGNED,
                upstream: None,
            },
        ]
    );
    // The entries are Welcomes' bodies, byte for byte.
    let mut again = Vec::new();
    for e in &entries {
        encode_welcome_entry(e, &mut again).unwrap();
    }
    assert_eq!(again, w.entries);
    // No entry; a count past what is there; a half upstream.
    let list = |count: u8, entries: &[u8]| cat(&[&head(0x11, 0xFFFF), &[count], entries]);
    assert_eq!(
        Packet::decode(&list(0, &[])),
        Err(DecodeError::BadField("welcomes"))
    );
    assert_eq!(
        Packet::decode(&list(3, w.entries)),
        Err(DecodeError::Truncated)
    );
    let mut half = w.entries.to_vec();
    half[14..16].copy_from_slice(&[0, 0]); // 10.0.0.2 with port 0
    assert_eq!(
        Packet::decode(&list(2, &half)),
        Err(DecodeError::BadField("welcomes"))
    );
    // One entry more than a list may hold.
    let mut many = Vec::new();
    for id in 0..=WELCOMES_MAX as u64 {
        encode_welcome_entry(
            &Welcome {
                receiver_id: id,
                rank: id as u16,
                upstream: None,
            },
            &mut many,
        )
        .unwrap();
    }
    let at_most = &many[..WELCOMES_MAX * WELCOMES_ENTRY_LEN];
    let full = list(WELCOMES_MAX as u8, at_most);
    assert!(Packet::decode(&full).is_ok());
    assert!(
        full.len() + SEAL_OVERHEAD_MAX <= 1100,
        "{} bytes",
        full.len()
    );
    assert_eq!(
        Packet::decode(&list(WELCOMES_MAX as u8 + 1, &many)),
        Err(DecodeError::BadField("welcomes"))
    );
    let mut buf = [0u8; 2048];
    for entries in [&[][..], &many[..], &half[..], &many[..20]] {
        let bad = Packet {
            header: Header::new(SID, RANK_SENDER),
            body: Body::Welcomes(Welcomes { entries }),
        };
        assert_eq!(bad.encode(&mut buf), Err(EncodeError::BadWelcomes));
    }
    assert_eq!(bytes.len(), HEADER_LEN + 1 + 32);
}
