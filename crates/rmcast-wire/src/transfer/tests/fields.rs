//! Field checks, encoding errors, `Feedback::holds`, `peek_header` and
//! `encode_data_header`, the rate kinds' fields.

use super::*;

// ---------------------------------------------------------------------------
// Field checks
// ---------------------------------------------------------------------------

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
    for s in [7u8, 8, 0x80, 0xFE] {
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
fn a_move_must_name_a_port() {
    let (mut bytes, packet) = (samples().into_iter())
        .find(|(_, p)| matches!(p.body, Body::Move(_)))
        .expect("a Move sample");
    bytes[HEADER_LEN + 2..HEADER_LEN + 4].copy_from_slice(&[0, 0]);
    assert_eq!(
        Packet::decode(&bytes),
        Err(DecodeError::BadField("move.port"))
    );
    let p = Packet {
        body: Body::Move(Move { rank: 3, port: 0 }),
        ..packet
    };
    let mut buf = [0u8; 64];
    assert_eq!(p.encode(&mut buf), Err(EncodeError::BadMovePort));
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
fn only_a_bitmap_of_the_longest_a_receiver_sends_stops_short() {
    let short = [0xFF; FEEDBACK_BITMAP_MAX - 1];
    let full = [0xFF; FEEDBACK_BITMAP_MAX];
    let fb = |bitmap| Feedback {
        cumulative: Seq(u32::MAX - 10), // the reach wraps
        echo: Seq(0),
        echo_copy: 0,
        aggregate: false,
        bitmap,
    };
    assert_eq!(fb(&[]).reach(), None);
    assert_eq!(fb(&short).reach(), None);
    let reach = fb(&full).reach().unwrap();
    assert_eq!(reach, Seq(u32::MAX - 10).add(1 + 8 * 256));
    // The last packet it speaks for is held; the one at its reach is not
    // known, and `holds` says no.
    assert!(fb(&full).holds(Seq(reach.0.wrapping_sub(1))));
    assert!(!fb(&full).holds(reach));
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
    for t in [0x12, 0x13, 0x3F, 0x43, 0x4F] {
        let bytes = head(t, RANK_SENDER);
        assert_eq!(Packet::decode(&bytes), Err(DecodeError::UnknownKind(t)));
    }
}

#[test]
fn an_offers_fec_shape_is_checked() {
    let offer = |fec| Packet {
        header: Header::new(SID, RANK_SENDER),
        body: Body::Offer(Offer {
            object_size: 10_000,
            isn: Seq(1),
            payload_size: 1000,
            window: 64,
            protocol: ProtocolId::NakPoll,
            protocol_param: 0,
            receivers: 2,
            test_loss_ppm: 0,
            fec,
            name: "x",
        }),
    };
    let shape = |data, proactive, space| FecShape {
        data,
        proactive,
        space,
        depth: 1,
    };
    for good in [
        shape(1, 0, 1),
        shape(64, 4, 128),
        shape(1024, 1024, 1024),
        shape(64, 2, 64).with_depth(8),
        shape(1024, 0, 1024).with_depth(FEC_MAX_DEPTH),
    ] {
        let bytes = encode_vec(&offer(Some(good)));
        assert_eq!(Packet::decode(&bytes), Ok(offer(Some(good))));
    }
    let mut buf = [0u8; 256];
    for bad in [
        shape(0, 0, 1),
        shape(1025, 0, 1),
        shape(8, 0, 0),
        shape(8, 0, 1025),
        shape(8, 5, 4),
        shape(8, 0, 8).with_depth(0),
        shape(8, 0, 8).with_depth(FEC_MAX_DEPTH + 1),
    ] {
        assert_eq!(
            offer(Some(bad)).encode(&mut buf),
            Err(EncodeError::BadFec),
            "{bad:?}"
        );
        // The same fields written by hand are refused by the decoder.
        let mut bytes = encode_vec(&offer(None));
        let at = HEADER_LEN + 27;
        bytes[at..at + 2].copy_from_slice(&bad.data.to_be_bytes());
        bytes[at + 2..at + 4].copy_from_slice(&bad.proactive.to_be_bytes());
        bytes[at + 4..at + 6].copy_from_slice(&bad.space.to_be_bytes());
        bytes[at + 6..at + 8].copy_from_slice(&bad.depth.to_be_bytes());
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::BadField("offer.fec")),
            "{bad:?}"
        );
    }
}
