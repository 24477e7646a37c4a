//! Replays the fuzz targets' committed seeds (`fuzz/seeds/<target>/`)
//! through the decoders' contracts ([`rmcast_wire::oracle`]), so every
//! `cargo test` guards what the fuzzers start from, without nightly.
//!
//! The seeds are valid encodings of every message of each family, some cut
//! short, some with a byte changed, and some garbage. To regenerate them
//! after a format change (the fuzzers' `fuzz-*` corpora are kept):
//!
//! ```text
//! cargo test -p rmcast-wire --test corpus -- --ignored write_seeds
//! ```

use std::fs;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};

use rmcast_wire::overlay::{Assignment, Msg, OverlayShape, Peer, SegmentSet};
use rmcast_wire::stream::{
    Accept, Announce, ConnectRequest, DATA_FIRST, DATA_LAST, Invite, PollBody, PollEntries,
    PollEntry, PollRequest, ResetReason, Response, StreamBody, StreamData, StreamPacket,
};
use rmcast_wire::{
    Behind, Body, Bye, Close, Complete, Data, FLAG_ALONE, FecShape, Feedback, Have, Header, Hello,
    Join, Leave, MAX_DATAGRAM, Move, Offer, OfferReply, POLL_ALL, POLL_DIRECT, Packet, Parity,
    ProtocolId, RANK_SENDER, RANK_UNASSIGNED, RateNak, RateNakKind, RatePhase, RateReport,
    RateSync, RateSyncOp, Seq, SessionId, Status, Welcome, Welcomes, encode_have_ranges,
    encode_welcome_entry, oracle,
};

/// A decoder contract: panics when broken, true when the input decoded.
type Check = fn(&[u8]) -> bool;

/// The fuzz targets and the contract each one checks (as its file in
/// `fuzz/fuzz_targets/` does).
const TARGETS: [(&str, Check); 4] = [
    ("decode", decode),
    ("decode_stream", oracle::stream),
    ("decode_overlay", oracle::overlay),
    ("decode_manifest", oracle::manifest),
];

/// The `decode` target runs both datagram decoders on every input.
fn decode(bytes: &[u8]) -> bool {
    oracle::transfer(bytes) | oracle::stream(bytes)
}

fn seeds_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target)
}

#[test]
fn committed_seeds_keep_every_decoder_contract() {
    for (target, check) in TARGETS {
        let dir = seeds_dir(target);
        let mut files = 0;
        let mut accepted = 0;
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let bytes = fs::read(&path).unwrap();
            files += 1;
            if check(&bytes) {
                accepted += 1;
            }
        }
        // A missing or emptied corpus must not pass silently, and it must
        // still reach the bodies (valid seeds) and the error paths.
        assert!(files >= 24, "{target}: only {files} seeds");
        assert!(accepted >= 10, "{target}: only {accepted} seeds decode");
        assert!(files - accepted >= 10, "{target}: too few invalid seeds");
    }
}

#[test]
fn generated_seeds_keep_every_decoder_contract() {
    for (target, check) in TARGETS {
        for (name, bytes) in seeds(target) {
            let valid = name.starts_with("valid-");
            assert_eq!(check(&bytes), valid, "{target}/{name}");
        }
    }
}

/// Writes the seeds into `fuzz/seeds/` (replacing what is there).
#[test]
#[ignore = "writes files; run by hand after a format change"]
fn write_seeds() {
    for (target, _) in TARGETS {
        let dir = seeds_dir(target);
        fs::create_dir_all(&dir).unwrap();
        // The named seeds are replaced; the fuzzers' minimised corpora
        // (`fuzz-*`) stay.
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.starts_with("fuzz-") {
                fs::remove_file(&path).unwrap();
            }
        }
        for (name, bytes) in seeds(target) {
            fs::write(dir.join(name), bytes).unwrap();
        }
    }
}

/// Named seeds of one target: `valid-*` decode, everything else must not.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let valid = match target {
        "decode" => transfer_valid(),
        "decode_stream" => stream_valid(),
        "decode_manifest" => manifest_valid(),
        _ => overlay_valid(),
    };
    let mut out = Vec::new();
    for (i, bytes) in valid.iter().enumerate() {
        out.push((format!("valid-{i:02}"), bytes.clone()));
    }
    // Cut short: every kind but the data packets (whose payload runs to the
    // end of the datagram, so a shorter one is still valid) loses its last
    // byte; a few lose more.
    for (i, bytes) in valid.iter().enumerate() {
        let cut = bytes.len() - 1;
        if target == "decode_overlay" || !is_data(target, bytes) {
            out.push((format!("cut-{i:02}"), bytes[..cut].to_vec()));
        }
        if i % 4 == 0 {
            out.push((
                format!("cut-half-{i:02}"),
                bytes[..bytes.len() / 2].to_vec(),
            ));
        }
    }
    // One trailing byte too many (overlay: inside the announced length).
    for (i, bytes) in valid.iter().enumerate().step_by(3) {
        let mut b = bytes.clone();
        b.push(0);
        if target == "decode_overlay" {
            let len = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) + 1;
            b[4..8].copy_from_slice(&len.to_be_bytes());
        }
        if !is_data(target, bytes) {
            out.push((format!("trailing-{i:02}"), b));
        }
    }
    // Header damage: magic, version, type.
    let first = &valid[0];
    for (name, at, value) in [("magic", 0, b'X'), ("version", 2, 1), ("type", 3, 0xEE)] {
        let mut b = first.clone();
        b[at] = value;
        out.push((format!("bad-{name}"), b));
    }
    // Garbage: empty, one byte, and a fixed pseudo-random run.
    out.push(("garbage-empty".into(), Vec::new()));
    out.push(("garbage-byte".into(), vec![0xFF]));
    let mut x: u32 = 0x9E37_79B9;
    let noise: Vec<u8> = (0..64)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    out.push(("garbage-noise".into(), noise));
    out
}

fn is_data(target: &str, bytes: &[u8]) -> bool {
    match target {
        "decode" => matches!(bytes[3], 0x06 | 0x0E), // Data, Parity
        "decode_stream" => bytes[3] == 0x60,
        _ => false,
    }
}

const SID: SessionId = SessionId(0x0102_0304_0506_0708);

fn encode(p: &Packet<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let n = p.encode(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn transfer_valid() -> Vec<Vec<u8>> {
    let s = Header::new(SID, RANK_SENDER);
    let r = Header::new(SID, 3);
    let hash = [0xAB; 32];
    let fb = Feedback {
        cumulative: Seq(100),
        echo: Seq(104),
        echo_copy: 2,
        aggregate: true,
        bitmap: &[0b1010_0101, 0x01],
    };
    let mut ranges = Vec::new();
    encode_have_ranges(&[(0, 40), (70_000, 3)], &mut ranges);
    let mut welcomes = Vec::new();
    for (receiver_id, rank, upstream) in [
        (11, 1000, None),
        (
            12,
            1001,
            Some(SocketAddrV4::new([10, 0, 0, 9].into(), 5000)),
        ),
        (13, RANK_UNASSIGNED, None),
    ] {
        let w = Welcome {
            receiver_id,
            rank,
            upstream,
        };
        encode_welcome_entry(&w, &mut welcomes).unwrap();
    }
    let bodies = [
        (
            s,
            Body::Hello(Hello {
                receivers_wanted: 5,
                protocol: ProtocolId::NakPoll,
            }),
        ),
        (
            Header::new(SID, RANK_UNASSIGNED),
            Body::Join(Join {
                receiver_id: 7,
                name: "host:42",
            }),
        ),
        (
            s,
            Body::Welcome(Welcome {
                receiver_id: 7,
                rank: 3,
                upstream: Some(SocketAddrV4::new([10, 0, 0, 2].into(), 4000)),
            }),
        ),
        (
            s,
            Body::Offer(Offer {
                object_size: 1 << 20,
                isn: Seq(u32::MAX - 3),
                payload_size: 1448,
                window: 256,
                protocol: ProtocolId::Tree,
                protocol_param: 0x8003,
                receivers: 30,
                test_loss_ppm: 1000,
                fec: None,
                name: "dir/ü.bin",
            }),
        ),
        (
            s,
            Body::Offer(Offer {
                object_size: 5 << 20,
                isn: Seq(17),
                payload_size: 1401,
                window: 512,
                protocol: ProtocolId::NakPoll,
                protocol_param: 0,
                receivers: 1000,
                test_loss_ppm: 0,
                fec: Some(FecShape {
                    data: 64,
                    proactive: 2,
                    space: 128,
                    depth: 8,
                }),
                name: "fec.bin",
            }),
        ),
        (
            s,
            Body::Parity(Parity {
                seq: Seq(3_750),
                block: 58,
                index: 3,
                poll: POLL_ALL,
                payload: &[0x5A; 16],
            }),
        ),
        (
            r,
            Body::OfferReply(OfferReply {
                status: Status::NoSpace,
                text: "disk full",
            }),
        ),
        (
            s,
            Body::Data(Data {
                seq: Seq(0xDEAD_BEEF),
                poll: POLL_ALL,
                copy: 1,
                payload: b"abc",
            }),
        ),
        (r, Body::Ack(fb)),
        (
            r,
            Body::Nak(Feedback {
                aggregate: false,
                bitmap: &[],
                ..fb
            }),
        ),
        (
            s,
            Body::Close(Close {
                hash,
                signature: None,
            }),
        ),
        (
            s,
            Body::Close(Close {
                hash,
                signature: Some([0x3C; 64]),
            }),
        ),
        (
            r,
            Body::Complete(Complete {
                status: Status::Ok,
                hash,
                text: "",
            }),
        ),
        (
            s,
            Body::Bye(Bye {
                aborted: true,
                text: "gave up",
            }),
        ),
        (r, Body::Leave(Leave { text: "bye" })),
        (
            r,
            Body::Behind(Behind {
                receivers: 3,
                names: "b1,b2,b3",
            }),
        ),
        (
            s,
            Body::Move(Move {
                rank: 2,
                port: 7702,
            }),
        ),
        (
            r,
            Body::RateNak(RateNak {
                kind: RateNakKind::Exp,
                seq: Seq(9),
            }),
        ),
        (
            s,
            Body::RateReport(RateReport {
                epoch: 4,
                phase: RatePhase::Sending,
                spacing_ns: 12_000,
                messages: 99,
            }),
        ),
        (
            s,
            Body::RateSync(RateSync {
                epoch: 5,
                op: RateSyncOp::Set {
                    spacing_ns: 10_000,
                    members: 3,
                },
            }),
        ),
        (
            s,
            Body::RateSync(RateSync {
                epoch: 6,
                op: RateSyncOp::Request,
            }),
        ),
        (
            r,
            Body::Have(Have {
                part: 1,
                parts: 2,
                ranges: &ranges,
            }),
        ),
        (
            r,
            Body::Have(Have {
                part: 0,
                parts: 0,
                ranges: &[],
            }),
        ),
        // What the sender sends one member alone: a `Close` asked again,
        // a data packet re-polling it.
        (
            Header {
                flags: FLAG_ALONE,
                ..s
            },
            Body::Close(Close {
                hash,
                signature: None,
            }),
        ),
        (
            Header {
                flags: FLAG_ALONE,
                ..s
            },
            Body::Data(Data {
                seq: Seq(7),
                poll: POLL_DIRECT,
                copy: 1,
                payload: b"again",
            }),
        ),
        // A large group's admissions in one datagram.
        (s, Body::Welcomes(Welcomes { entries: &welcomes })),
    ];
    bodies
        .iter()
        .map(|&(header, body)| encode(&Packet { header, body }))
        .collect()
}

fn stream_valid() -> Vec<Vec<u8>> {
    let s = Header::new(SID, RANK_SENDER);
    let r = Header::new(SID, 2);
    let mut raw = [0u8; 12];
    let entries = [
        PollEntry {
            rank: 3,
            delay_us: 500,
        },
        PollEntry {
            rank: 7,
            delay_us: 0,
        },
    ];
    let n = PollEntries::write(&entries, &mut raw).unwrap();
    let poll = PollRequest {
        poll_id: 42,
        ts_us: 0x0001_0203,
        entries: PollEntries::from_raw(&raw[..n]).unwrap(),
    };
    let resp = Response {
        poll_id: 42,
        echo_ts_us: 0x0001_0203,
        held_us: 250,
        cumulative: Seq(10),
        window_packets: 64,
        bitmap: &[0b0000_0110],
    };
    let bodies = [
        (
            s,
            StreamBody::Announce(Announce {
                receivers_max: 8,
                payload_size: 1400,
                message_packets_max: 16,
                admission_left_ms: 2000,
            }),
        ),
        (
            Header::new(SID, RANK_UNASSIGNED),
            StreamBody::ConnectRequest(ConnectRequest {
                receiver_id: 11,
                buffer_packets: 128,
                name: "r1",
            }),
        ),
        (
            s,
            StreamBody::Invite(Invite {
                nonce: 0x55,
                rank: 2,
                payload_size: 1400,
                isn: Seq(1000),
                message_packets_max: 16,
            }),
        ),
        (
            r,
            StreamBody::Accept(Accept {
                nonce: 0x55,
                receiver_id: 11,
                buffer_packets: 128,
                name: "r1",
            }),
        ),
        (s, StreamBody::Confirm { nonce: 0x55 }),
        (r, StreamBody::Leave { text: "done" }),
        (s, StreamBody::LeaveAck),
        (
            s,
            StreamBody::Close(PollBody {
                next_seq: Seq(2000),
                poll: Some(poll),
            }),
        ),
        (
            s,
            StreamBody::Close(PollBody {
                next_seq: Seq(2000),
                poll: None,
            }),
        ),
        (r, StreamBody::CloseAck(resp)),
        (
            s,
            StreamBody::Reset {
                reason: ResetReason::SessionFull,
            },
        ),
        (
            s,
            StreamBody::Data(StreamData {
                seq: Seq(0xDEAD_BEEF),
                flags: DATA_FIRST | DATA_LAST,
                poll: Some(poll),
                payload: b"abc",
            }),
        ),
        (
            s,
            StreamBody::Poll(PollBody {
                next_seq: Seq(1500),
                poll: Some(poll),
            }),
        ),
        (r, StreamBody::Response(resp)),
    ];
    bodies
        .iter()
        .map(|&(header, body)| {
            let mut buf = vec![0u8; MAX_DATAGRAM];
            let n = StreamPacket { header, body }.encode(&mut buf).unwrap();
            buf.truncate(n);
            buf
        })
        .collect()
}

fn overlay_valid() -> Vec<Vec<u8>> {
    let addr4: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    let addr6: SocketAddr = "[::1]:7".parse().unwrap();
    let peer = |rank: u16, segments| Peer {
        rank,
        name: format!("node-{rank}"),
        addr: if rank.is_multiple_of(2) { addr4 } else { addr6 },
        segments,
    };
    let assign = |shape, parents, children| {
        Msg::Assign(Box::new(Assignment {
            session: 0x0123_4567_89ab_cdef,
            rank: 3,
            receivers: 7,
            shape,
            segment_size: 8192,
            size: 10_000_000,
            name: "dir/obj.bin".into(),
            inactivity_ms: 5000,
            parents,
            children,
        }))
    };
    let residues = |m, mask| SegmentSet::residues(m, mask).expect("a canonical set");
    let msgs = [
        Msg::Register {
            name: "host:1".into(),
            data_addr: addr4,
        },
        Msg::Register {
            name: String::new(),
            data_addr: addr6,
        },
        assign(
            OverlayShape::Tree { fanout: 3 },
            vec![peer(1, SegmentSet::All)],
            vec![peer(6, SegmentSet::All), peer(7, SegmentSet::All)],
        ),
        assign(
            OverlayShape::Bintree,
            vec![peer(1, SegmentSet::Even), peer(7, SegmentSet::Odd)],
            vec![peer(6, SegmentSet::Even)],
        ),
        assign(OverlayShape::Chain, vec![peer(2, SegmentSet::All)], vec![]),
        assign(OverlayShape::Direct, vec![peer(0, SegmentSet::All)], vec![]),
        assign(OverlayShape::Binomial, vec![], vec![]),
        assign(
            OverlayShape::Pipeline,
            vec![peer(0, residues(6, 0b1)), peer(3, residues(6, 0b11_0110))],
            vec![peer(5, residues(3, 0b10)), peer(9, SegmentSet::Odd)],
        ),
        Msg::Ready {
            status: Status::Ok,
            text: String::new(),
        },
        Msg::Ready {
            status: Status::UnsafeName,
            text: "absolute path".into(),
        },
        Msg::Start,
        Msg::Progress { bytes: 1 << 40 },
        Msg::Heartbeat,
        Msg::Complete {
            status: Status::HashMismatch,
            text: "bad".into(),
        },
        Msg::Abort {
            text: "rank 2 died".into(),
        },
        Msg::DataHello {
            session: 9,
            from: 0,
            to: 65535,
            segments: SegmentSet::All,
            first: 0,
        },
        Msg::DataHello {
            session: 10,
            from: 5,
            to: 4,
            segments: residues(6, 0b10),
            first: 17,
        },
        Msg::Detach { rank: 4 },
        Msg::Orphaned {
            from: 5,
            segments: residues(6, 0b10),
            have: 17,
        },
        Msg::Hash {
            hash: [7; 32],
            signature: None,
        },
        Msg::Probe {
            group: "239.77.0.1:7700".parse().unwrap(),
            session: 0x0102,
            wait_ms: 250,
        },
        Msg::Unheard,
        Msg::Redirect { control: addr6 },
        Msg::CatchUp {
            rank: 3,
            from: 1_048_576,
        },
        Msg::Verdict {
            ok: false,
            text: "1 of 8 receivers did not verify".into(),
        },
    ];
    msgs.iter().map(Msg::to_frame).collect()
}

/// Manifests framed as the `decode_manifest` target reads them: the
/// manifest, then the object's length (u64, big-endian).
fn manifest_valid() -> Vec<Vec<u8>> {
    use rmcast_wire::manifest::{Entry, EntryKind, Manifest, chunk_count};
    let file = |path: &str, size: u64| Entry {
        path: path.into(),
        mode: 0o644,
        mtime_s: 1_764_000_000,
        mtime_ns: 123,
        kind: EntryKind::File {
            offset: 0,
            size,
            chunks: (0..chunk_count(size, 4096))
                .map(|i| [i as u8; 32])
                .collect(),
        },
    };
    let dir = |path: &str| Entry {
        path: path.into(),
        mode: 0o755,
        mtime_s: -1,
        mtime_ns: 999_999_999,
        kind: EntryKind::Dir,
    };
    let link = |path: &str, target: &str| Entry {
        path: path.into(),
        mode: 0o777,
        mtime_s: 0,
        mtime_ns: 0,
        kind: EntryKind::Symlink {
            target: target.into(),
        },
    };
    let trees: Vec<Vec<Entry>> = vec![
        vec![],
        vec![file("a", 0)],
        vec![file("a", 1)],
        vec![file("big.bin", 10_000)],
        vec![dir("d")],
        vec![dir("d"), dir("d/e"), file("d/e/f", 4096)],
        vec![link("l", "a"), file("a", 3)]
            .into_iter()
            .rev()
            .collect(),
        vec![dir("a"), link("a/up", "../b"), file("b", 5)],
        vec![file("A.txt", 2), file("a.txt", 2)],
        vec![file("ünïcødé ✓", 7), dir("ž")],
        vec![file(&"n".repeat(255), 1)],
        vec![
            dir("x"),
            file("x/1", 4097),
            file("x/2", 0),
            file("x/3", 8192),
            link("z", "x/3"),
        ],
    ];
    trees
        .into_iter()
        .enumerate()
        .map(|(i, entries)| {
            let mut m = Manifest {
                chunk_size: if i % 2 == 0 { 4096 } else { 1 << 20 },
                entries,
            };
            // Chunk hashes follow the declared chunk size.
            for e in &mut m.entries {
                if let EntryKind::File { size, chunks, .. } = &mut e.kind {
                    chunks.truncate(chunk_count(*size, m.chunk_size) as usize);
                }
            }
            // Files back to back after the manifest, with a gap after every
            // other one (padding is allowed).
            let mut at = m.encoded_len() as u64;
            for (j, e) in m.entries.iter_mut().enumerate() {
                if let EntryKind::File { offset, size, .. } = &mut e.kind {
                    *offset = at + (j as u64 % 2) * 100;
                    at = *offset + *size;
                }
            }
            let mut bytes = m.encode();
            bytes.extend_from_slice(&(at + i as u64).to_be_bytes());
            bytes
        })
        .collect()
}
