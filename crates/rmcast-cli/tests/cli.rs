//! The `rmcast` binary end to end on loopback: real processes, real sockets,
//! real multicast. Every process is started here, waited for with a bound,
//! and killed by its own PID if it overstays.

use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{Proc, entries, free_tcp_addr, recv, rmcast, wait_for_part_file, write_file};

/// The binary with the test binary's group key in its environment, as an
/// operator's shell would have `RMCAST_KEY_FILE` (or pass `--key`).
fn json(out: &str) -> Value {
    let line = out.trim();
    assert_eq!(
        line.lines().count(),
        1,
        "--json must print exactly one line: {out}"
    );
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON ({e}): {out}"))
}

fn group() -> String {
    rmcast::random_group().to_string()
}

/// `demo` of 4 MiB to 4 receivers under 5 % loss with `protocol` and
/// `extra` flags: its `--json` report, once it exited 0.
fn lossy_demo(protocol: &str, extra: &[&str]) -> Value {
    let p = Proc::spawn(
        protocol,
        rmcast()
            .args([
                "demo",
                "--receivers",
                "4",
                "--size",
                "4MiB",
                "--protocol",
                protocol,
                "--loss",
                "0.05",
                "--json",
            ])
            .args(extra),
    );
    let (code, out, err) = p.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{protocol} {extra:?}: {err}");
    json(&out)
}

#[test]
fn demo_verifies_four_receivers_under_five_percent_loss_for_both_protocols() {
    for protocol in ["ack", "nak-poll"] {
        let v = lossy_demo(protocol, &[]);
        assert_eq!(v["verified"], 4, "{v}");
        assert_eq!(v["ok"], true);
        assert_eq!(v["protocol"], protocol);
        assert_eq!(v["bytes"], 4 << 20);
        assert!(
            v["retransmitted_packets"].as_u64().unwrap() > 0,
            "5 % loss must cost repairs: {v}"
        );
        for key in ["seconds", "goodput_mbps", "data_packets", "control_packets"] {
            assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {v}");
        }
    }
}

#[test]
fn fec_repairs_with_parity_not_resends() {
    // Every protocol family's feedback carries the per-block lacks;
    // blocks interleaved (K:P:D) or not.
    for (protocol, fec) in [("nak-poll", "32:1:4"), ("ack", "32:1"), ("ring", "32:1:2")] {
        let v = lossy_demo(protocol, &["--fec", fec]);
        assert_eq!(v["fec"], fec, "{v}");
        assert_eq!(v["verified"], 4, "{v}");
        assert_eq!(v["ok"], true);
        assert_eq!(v["all_files_match"], true, "{v}");
        let data = v["data_packets"].as_u64().unwrap();
        let parity = v["parity_packets"].as_u64().unwrap();
        // One proactive parity packet per block of 32, and more on demand.
        assert!(parity > data / 32, "{protocol}: {v}");
        // Data goes again only to poll: as a stall poll after a timeout,
        // or as a re-poll of a member whose answer was lost (counted with
        // the Offers and Closes asked again in `repolls`), never as a repair.
        let polls_again = v["timeouts"].as_u64().unwrap() + v["repolls"].as_u64().unwrap();
        assert!(
            v["retransmitted_packets"].as_u64().unwrap() <= polls_again,
            "{protocol}: {v}"
        );
        assert_eq!(v["unicast_repairs"], 0, "{v}");
        assert_eq!(v["multicast_repairs"], 0, "{v}");
    }
}

#[test]
fn ring_and_tree_verify_eight_receivers_under_two_percent_loss() {
    let variants: [&[&str]; 3] = [
        &["--protocol", "ring"],
        &["--protocol", "tree", "--tree-height", "3"],
        &[
            "--protocol",
            "tree",
            "--tree-shape",
            "binary",
            "--repair",
            "go-back-n",
        ],
    ];
    for args in variants {
        let p = Proc::spawn(
            &args.join(" "),
            rmcast()
                .args([
                    "demo",
                    "--receivers",
                    "8",
                    "--size",
                    "8MiB",
                    "--loss",
                    "0.02",
                    "--json",
                ])
                .args(args),
        );
        let (code, out, err) = p.wait(Duration::from_secs(90));
        assert_eq!(code, 0, "{args:?}: {err}");
        let v = json(&out);
        assert_eq!(v["verified"], 8, "{args:?}: {v}");
        assert_eq!(v["ok"], true);
        assert!(v["retransmitted_packets"].as_u64().unwrap() > 0, "{v}");
    }
}

/// `--protocol auto` (the default) chooses for the group that registered,
/// says so with `--explain` and in `--json`, and keeps what was given.
#[test]
fn auto_chooses_for_the_group_explains_and_keeps_given_flags() {
    let p = Proc::spawn(
        "auto 33",
        rmcast().args([
            "demo",
            "--receivers",
            "33",
            "--size",
            "1MiB",
            "--explain",
            "--json",
        ]),
    );
    let (code, out, err) = p.wait(Duration::from_secs(90));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["protocol"], "nak-poll", "{v}");
    assert_eq!(v["fec"], "64:2", "{v}");
    assert_eq!(v["auto"]["receivers"], 33, "{v}");
    assert_eq!(v["auto"]["row"], 2, "{v}");
    assert!(v["parity_packets"].as_u64().unwrap() > 0, "{v}");
    let line = v["auto"]["explain"].as_str().unwrap();
    assert!(
        line.starts_with("auto: 33 receivers, 1048576 bytes"),
        "{line}"
    );
    assert!(err.contains(line), "--explain prints it on stderr: {err}");

    let p = Proc::spawn(
        "auto kept",
        rmcast().args([
            "demo",
            "--receivers",
            "2",
            "--size",
            "1MiB",
            "--fec",
            "16:1",
            "--window",
            "256",
            "--json",
        ]),
    );
    let (code, out, err) = p.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["fec"], "16:1", "{v}");
    assert_eq!(v["auto"]["window"], 256, "{v}");
    let notes = v["auto"]["notes"].to_string();
    assert!(
        notes.contains("window 256 as given") && notes.contains("FEC 16:1 as given"),
        "{v}"
    );
    assert!(
        !err.contains("auto:"),
        "no --explain, no explanation: {err}"
    );

    let p = Proc::spawn(
        "named",
        rmcast().args([
            "demo",
            "--receivers",
            "2",
            "--size",
            "64KiB",
            "--protocol",
            "ring",
            "--window",
            "8",
            "--json",
        ]),
    );
    let (code, out, err) = p.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["protocol"], "ring", "{v}");
    assert_eq!(v["auto"], serde_json::Value::Null, "{v}");
}

#[test]
fn a_ring_window_not_larger_than_the_group_is_refused() {
    let (code, _, err) = Proc::spawn(
        "ring",
        rmcast().args([
            "demo",
            "--protocol",
            "ring",
            "--receivers",
            "8",
            "--window",
            "8",
        ]),
    )
    .wait(Duration::from_secs(10));
    assert_ne!(code, 0);
    assert!(err.contains("--window 9"), "{err}");
}

#[test]
fn send_fails_naming_a_receiver_killed_mid_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "big.bin", 8 << 20);
    let g = group();
    let outs: Vec<PathBuf> = (0..3).map(|k| dir.path().join(format!("out{k}"))).collect();
    let mut receivers: Vec<Option<Proc>> = (0..3)
        .map(|k| Some(recv(&g, &outs[k], &format!("r{k}"), &[])))
        .collect();
    let sender = Proc::spawn(
        "sender",
        rmcast()
            .arg("send")
            .arg(&file)
            .args(["--receivers", "3", "--group", &g, "--json"])
            // Slow enough that the kill lands mid-transfer (8 MiB at 20 Mbit/s ≈ 3.4 s).
            .args(["--rate", "20mbit", "--peer-timeout", "1500ms"]),
    );
    // Kill r1 once its part file exists, i.e. data is flowing.
    wait_for_part_file(&outs[1], "r1 never started receiving");
    std::thread::sleep(Duration::from_millis(300));
    drop(receivers[1].take()); // SIGKILL by PID
    let killed_at = Instant::now();
    let (code, out, err) = sender.wait(Duration::from_secs(30));
    let took = killed_at.elapsed();
    assert_eq!(code, 1, "send must fail: {err}");
    let v = json(&out);
    assert_eq!(v["ok"], false);
    assert_eq!(v["verified"], 2, "{v}");
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{v}");
    assert_eq!(failures[0]["name"], "r1");
    assert!(
        failures[0]["reason"].as_str().unwrap().contains("silent"),
        "{v}"
    );
    // Bounded: peer timeout plus a few backed-off retransmission timeouts
    // plus the rest of the transfer for the two live receivers.
    assert!(took < Duration::from_secs(12), "failure took {took:?}");
    for k in [0, 2] {
        let (code, out, err) = receivers[k].take().unwrap().wait(Duration::from_secs(20));
        assert_eq!(code, 0, "r{k}: {err}");
        assert_eq!(json(&out)["verified"], true);
        assert_eq!(
            std::fs::read(outs[k].join("big.bin")).unwrap(),
            std::fs::read(&file).unwrap()
        );
    }
}

#[test]
fn a_receiver_whose_sender_dies_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "obj.bin", 4 << 20);
    let g = group();
    let out = dir.path().join("out");
    let receiver = recv(&g, &out, "r0", &["--sender-timeout", "1s"]);
    let sender = Proc::spawn(
        "sender",
        rmcast().arg("send").arg(&file).args([
            "--receivers",
            "1",
            "--group",
            &g,
            "--rate",
            "10mbit",
        ]),
    );
    wait_for_part_file(&out, "receiving never started");
    drop(sender); // SIGKILL: no Bye, just silence
    let (code, out_json, _) = receiver.wait(Duration::from_secs(15));
    assert_eq!(code, 1);
    let v = json(&out_json);
    assert_eq!(v["ok"], false);
    assert!(v["error"].as_str().unwrap().contains("silent"), "{v}");
    assert!(entries(&out).is_empty(), "left behind: {:?}", entries(&out));
}

#[test]
fn garbage_and_foreign_packets_on_the_group_are_counted_and_ignored() {
    use socket2::{Domain, Protocol, Socket, Type};
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "obj.bin", 1 << 20);
    let g = group();
    let out = dir.path().join("out");
    let receiver = recv(&g, &out, "r0", &[]);
    // A blaster on loopback only: IP_MULTICAST_IF 127.0.0.1, TTL 1.
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    sock.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
    sock.set_multicast_ttl_v4(1).unwrap();
    sock.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
        .unwrap();
    let to: SocketAddrV4 = g.parse().unwrap();
    let to = SocketAddr::V4(to).into();
    let foreign_close = {
        let mut buf = [0u8; 64];
        let p = rmcast_wire_packet_close(&mut buf);
        buf[..p].to_vec()
    };
    let garbage: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        vec![],
        b"RM".to_vec(),                                             // truncated header
        vec![b'R', b'M', 9, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], // unknown version
        foreign_close[..foreign_close.len() - 1].to_vec(),          // wrong session, then truncated
        foreign_close.clone(),
    ];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let blaster = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                for g in &garbage {
                    let _ = sock.send_to(g, &to);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let sender = Proc::spawn(
        "sender",
        rmcast().arg("send").arg(&file).args([
            "--receivers",
            "1",
            "--group",
            &g,
            "--json",
            "--rate",
            "50mbit",
        ]),
    );
    let (code, out_s, err) = sender.wait(Duration::from_secs(30));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    blaster.join().unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out_s)["verified"], 1);
    let (code, out_r, err) = receiver.wait(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    let v = json(&out_r);
    // Sealed: every stray is refused before the protocol sees it, by reason.
    let auth = &v["auth"];
    assert_eq!(auth["sealed"], true, "{v}");
    assert!(auth["malformed"].as_u64().unwrap() > 0, "{v}");
    assert!(auth["unsealed"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(
        std::fs::read(out.join("obj.bin")).unwrap(),
        std::fs::read(&file).unwrap()
    );
}

/// A well-formed plain `Close` of a session nobody runs (the body is the
/// object's 32-byte hash).
fn rmcast_wire_packet_close(buf: &mut [u8]) -> usize {
    let mut p = vec![b'R', b'M', rmcast_wire::VERSION, 0x09, 0, 0, 0xFF, 0xFF];
    p.extend_from_slice(&0x0123_4567_89AB_CDEFu64.to_be_bytes());
    p.extend_from_slice(&[0x5A; 32]);
    buf[..p.len()].copy_from_slice(&p);
    p.len()
}

#[test]
fn send_gives_up_naming_how_many_receivers_came() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "obj.bin", 1000);
    let g = group();
    let receiver = recv(&g, &dir.path().join("out"), "lonely", &[]);
    let (code, _, err) = Proc::spawn(
        "sender",
        rmcast().arg("send").arg(&file).args([
            "--receivers",
            "2",
            "--group",
            &g,
            "--wait",
            "1500ms",
        ]),
    )
    .wait(Duration::from_secs(20));
    assert_eq!(code, 1);
    assert!(err.contains("only 1 of 2 receivers registered"), "{err}");
    assert!(err.contains("lonely"), "{err}");
    let (code, _, _) = receiver.wait(Duration::from_secs(20));
    assert_eq!(code, 1, "the receiver hears the abort and fails");
}

/// The end-of-session debug line of the port called `socket`:
/// (datagrams sent, send calls, GSO on, datagrams received, receive calls, GRO on).
fn port_counts(stderr: &str, socket: &str) -> Vec<(u64, u64, bool, u64, u64, bool)> {
    let key = format!("{socket}: sent ");
    stderr
        .lines()
        .filter_map(|line| {
            let rest = &line[line.find(&key)? + key.len()..];
            let words: Vec<&str> = rest
                .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
                .filter(|w| !w.is_empty())
                .collect();
            // N datagrams in M calls GSO b received N datagrams in M calls GRO b
            Some((
                words[0].parse().ok()?,
                words[3].parse().ok()?,
                words[6] == "true",
                words[8].parse().ok()?,
                words[11].parse().ok()?,
                words[14] == "true",
            ))
        })
        .collect()
}

#[test]
fn demo_verifies_with_batched_io_and_with_each_fallback_forced() {
    for (no_gso, no_gro) in [(false, false), (true, false), (false, true), (true, true)] {
        let what = format!("RMCAST_NO_GSO={no_gso} RMCAST_NO_GRO={no_gro}");
        let mut cmd = rmcast();
        cmd.args([
            "demo",
            "--receivers",
            "3",
            "--size",
            "4MiB",
            "--loss",
            "0.02",
            "--json",
        ])
        .env("RMCAST_LOG", "rmcast::net=debug")
        .env("NO_COLOR", "1")
        .env_remove("RMCAST_NO_GSO")
        .env_remove("RMCAST_NO_GRO");
        if no_gso {
            cmd.env("RMCAST_NO_GSO", "1");
        }
        if no_gro {
            cmd.env("RMCAST_NO_GRO", "1");
        }
        let (code, out, err) = Proc::spawn(&what, &mut cmd).wait(Duration::from_secs(60));
        assert_eq!(code, 0, "{what}: {err}");
        let v = json(&out);
        assert_eq!(v["verified"], 3, "{what}: {v}");
        assert_eq!(v["all_files_match"], true, "{what}: {v}");

        let sender = port_counts(&err, "sender socket");
        assert_eq!(sender.len(), 1, "{what}: {err}");
        let (sent, send_calls, gso, ..) = sender[0];
        if no_gso {
            assert!(!gso, "{what}: GSO must be off");
        }
        // GSO or sendmmsg: an unpaced window leaves in far fewer calls.
        assert!(
            send_calls * 4 < sent,
            "{what}: {sent} datagrams in {send_calls} calls"
        );
        let groups = port_counts(&err, "multicast socket");
        assert_eq!(groups.len(), 3, "{what}: {err}");
        for (.., received, recv_calls, gro) in groups {
            if no_gro {
                assert!(!gro, "{what}: GRO must be off");
            }
            assert!(received > 0 && recv_calls <= received, "{what}");
            if gso && gro {
                // GSO batches arrive whole: several datagrams per call.
                assert!(
                    recv_calls * 4 < received,
                    "{what}: {received} datagrams in {recv_calls} calls"
                );
            }
        }
    }
}

#[test]
fn bad_input_gets_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["send", "/nonexistent/file", "--receivers", "1"],
            "not a readable file",
        ),
        (&["demo", "--loss", "5"], "outside 0..1"),
        (&["demo", "--size", "lots"], "size"),
        (&["demo", "--packet-size", "10"], "packet size 10"),
        (
            &["demo", "--window", "8", "--poll-interval", "9"],
            "poll interval 9",
        ),
        (&["demo", "--protocol", "carrier-pigeon"], "carrier-pigeon"),
        (&["demo", "--rto", "soon"], "invalid duration"),
        (&["demo", "--rate", "fast"], "fast"),
        (
            &["demo", "--protocol", "tcp-chain", "--window=8"],
            "--window applies to the UDP multicast protocols",
        ),
        (
            &["demo", "--protocol", "tcp-bintree", "--rto", "20ms"],
            "--rto applies to the UDP multicast protocols",
        ),
        (
            &["demo", "--tree-shape", "binary"],
            "apply to --protocol tree only",
        ),
        (
            &[
                "demo",
                "--protocol",
                "tcp-pipeline",
                "--stall-timeout",
                "2s",
            ],
            "--stall-timeout 2s must exceed --peer-timeout 5s",
        ),
        (
            &["demo", "--protocol", "nak-poll", "--explain"],
            "--explain explains --protocol auto's choice",
        ),
        (
            &["demo", "--protocol", "tcp-chain", "--explain"],
            "not a tcp-* overlay's",
        ),
        (
            &["demo", "--rate-control", "find", "--rate", "100mbit"],
            "--rate-control find finds the rate itself; drop --rate",
        ),
        (
            &["demo", "--laggard", "wait", "--laggard-after", "1s"],
            "--laggard-after applies to --laggard tcp and --laggard eject, not wait",
        ),
        (
            &["demo", "--laggard", "eject", "--laggard-after", "50ms"],
            "under 100 ms",
        ),
        (
            &["demo", "--protocol", "tcp-chain", "--laggard", "eject"],
            "--laggard applies to the UDP multicast protocols",
        ),
        (&["demo", "--fec", "64"], "is not K:P"),
        (&["demo", "--fec", "0:1"], "outside 1..=1024"),
        (
            &["demo", "--fec", "64:1", "--repair", "go-back-n"],
            "cannot run with --repair go-back-n",
        ),
        (
            &["demo", "--fec", "128:0", "--window", "64"],
            "do not fit a window of 64",
        ),
        (
            &["demo", "--fec", "64:2:8", "--window", "256"],
            "FEC blocks spanning 512 packets (K·D) do not fit a window of 256",
        ),
        (&["demo", "--fec", "64:2:100"], "outside 1..=64"),
        (
            &["demo", "--protocol", "tcp-chain", "--fec", "8:1"],
            "--fec applies to the UDP multicast protocols",
        ),
        (
            &[
                "demo",
                "--fec",
                "64:0",
                "--window",
                "65536",
                "--packet-size",
                "8972",
            ],
            "MiB of buffers at every receiver",
        ),
    ];
    for (args, needle) in cases {
        let (code, _, err) =
            Proc::spawn("rmcast", rmcast().args(*args)).wait(Duration::from_secs(10));
        assert_ne!(code, 0, "{args:?} should fail");
        assert!(
            err.contains(needle),
            "{args:?}: expected `{needle}` in:\n{err}"
        );
    }
}

/// Flags are read from what clap parsed, not from the raw arguments: a file
/// named like a flag is a file.
#[test]
fn a_file_named_like_a_flag_is_not_taken_for_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("--window.bin"), b"x").unwrap();
    let (code, _, err) = Proc::spawn(
        "rmcast",
        rmcast().current_dir(dir.path()).args([
            "send",
            "--protocol",
            "tcp-chain",
            "--control",
            "127.0.0.1:0",
            "--receivers",
            "1",
            "--wait",
            "1s",
            "--",
            "--window.bin",
        ]),
    )
    .wait(Duration::from_secs(20));
    assert_ne!(code, 0, "nobody came, so it fails");
    assert!(!err.contains("applies to"), "{err}");
    assert!(err.contains("only 0 of 1"), "{err}");
}

#[test]
fn every_tcp_overlay_verifies_through_the_cli() {
    for protocol in [
        "tcp-direct",
        "tcp-tree",
        "tcp-binomial",
        "tcp-chain",
        "tcp-bintree",
        "tcp-pipeline",
    ] {
        let p = Proc::spawn(
            protocol,
            rmcast().args([
                "demo",
                "--receivers",
                "5",
                "--size",
                "1MB",
                "--protocol",
                protocol,
                "--json",
            ]),
        );
        let (code, out, err) = p.wait(Duration::from_secs(60));
        assert_eq!(code, 0, "{protocol}: {err}");
        let v = json(&out);
        assert_eq!(v["verified"], 5, "{protocol}: {v}");
        assert_eq!(v["protocol"], protocol);
    }
}

#[test]
fn a_tcp_chain_names_a_receiver_process_killed_mid_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "big.bin", 64 << 20);
    let control = free_tcp_addr();
    let outs: Vec<PathBuf> = (0..3).map(|k| dir.path().join(format!("out{k}"))).collect();
    let mut receivers: Vec<Option<Proc>> = (0..3)
        .map(|k| {
            let mut cmd = rmcast();
            cmd.args([
                "recv",
                "--json",
                "--sender",
                &control,
                "--name",
                &format!("t{k}"),
                "--out",
            ])
            .arg(&outs[k])
            .args(["--timeout", "20s", "--sender-timeout", "3s"]);
            Some(Proc::spawn(&format!("t{k}"), &mut cmd))
        })
        .collect();
    let sender = Proc::spawn(
        "sender",
        rmcast()
            .arg("send")
            .arg(&file)
            .args([
                "--protocol",
                "tcp-chain",
                "--receivers",
                "3",
                "--control",
                &control,
            ])
            .args(["--peer-timeout", "2s", "--json"]),
    );
    wait_for_part_file(&outs[1], "t1 never started receiving");
    drop(receivers[1].take()); // SIGKILL by PID
    let (code, out, err) = sender.wait(Duration::from_secs(20));
    assert_eq!(code, 1, "{err}");
    let v = json(&out);
    assert_eq!(v["ok"], false);
    let text = v.to_string();
    assert!(text.contains("t1"), "the dead node is named: {v}");
    for k in [0, 2] {
        let _ = receivers[k].take().unwrap().wait(Duration::from_secs(20));
        assert!(
            !entries(&outs[k]).iter().any(|n| n.contains("rmcast-part")),
            "t{k} left a part file"
        );
    }
}

/// An overlay sender given only `--group` registers receivers where `recv
/// --group G --sender HOST` looks for it: the group's port + 1 on its
/// interface. (It used to listen on 127.0.0.1:7701 whatever the group, so
/// such receivers waited for it forever.)
#[test]
fn an_overlay_sender_is_found_at_the_group_port_plus_one_without_control() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "obj.bin", 3 << 20);
    // A free TCP port p + 1 for a group on port p.
    let free: SocketAddr = free_tcp_addr().parse().unwrap();
    let group = format!("239.77.0.1:{}", free.port() - 1);
    let outs: Vec<PathBuf> = (0..2).map(|k| dir.path().join(format!("out{k}"))).collect();
    let receivers: Vec<Proc> = (0..2)
        .map(|k| {
            recv(
                &group,
                &outs[k],
                &format!("r{k}"),
                &["--sender", "127.0.0.1"],
            )
        })
        .collect();
    let sender = Proc::spawn(
        "sender",
        rmcast().arg("send").arg(&file).args([
            "--protocol",
            "tcp-chain",
            "--group",
            &group,
            "--receivers",
            "2",
            "--wait",
            "20s",
            "--json",
        ]),
    );
    let (code, out, err) = sender.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["verified"], 2, "{out}");
    for (k, r) in receivers.into_iter().enumerate() {
        let (code, _, err) = r.wait(Duration::from_secs(20));
        assert_eq!(code, 0, "r{k}: {err}");
        let copy = std::fs::read(outs[k].join("obj.bin")).unwrap();
        assert!(copy == std::fs::read(&file).unwrap(), "r{k}'s copy differs");
    }
}

/// Several `rmcast send` processes on one group (Hunt's rate group), and
/// receivers that take every session at once: each receiver must hold a
/// byte-exact copy of every sender's object.
#[test]
fn three_senders_on_one_group_reach_two_multi_session_receivers() {
    const SENDERS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = (0..SENDERS)
        .map(|k| write_file(dir.path(), &format!("obj{k}.bin"), (3 << 20) - k * 333_333))
        .collect();
    // Distinct contents, not only distinct lengths.
    for (k, f) in files.iter().enumerate() {
        let mut bytes = std::fs::read(f).unwrap();
        for b in bytes.iter_mut().step_by(97) {
            *b ^= k as u8 + 1;
        }
        std::fs::write(f, bytes).unwrap();
    }
    let g = group();
    let outs: Vec<PathBuf> = (0..2).map(|k| dir.path().join(format!("out{k}"))).collect();
    let receivers: Vec<Proc> = (0..2)
        .map(|k| recv(&g, &outs[k], &format!("r{k}"), &["--sessions", "3"]))
        .collect();
    let senders: Vec<Proc> = files
        .iter()
        .enumerate()
        .map(|(k, f)| {
            Proc::spawn(
                &format!("sender {k}"),
                rmcast()
                    .arg("send")
                    .arg(f)
                    .args(["--receivers", "2", "--group", &g, "--json"])
                    .args([
                        "--rate-control",
                        "hunt",
                        "--rate",
                        "100mbit",
                        "--rate-group",
                    ]),
            )
        })
        .collect();
    let mut group_packets = 0;
    for (k, s) in senders.into_iter().enumerate() {
        let (code, out, err) = s.wait(Duration::from_secs(60));
        assert_eq!(code, 0, "sender {k}: {out}\n{err}");
        let v = json(&out);
        assert_eq!(v["verified"], 2, "{v}");
        group_packets += v["group_packets"].as_u64().unwrap();
    }
    // The senders heard each other's rate reports (the group machinery ran).
    assert!(group_packets > 0, "no RateReport/RateSync was heard");
    for (k, r) in receivers.into_iter().enumerate() {
        let (code, out, err) = r.wait(Duration::from_secs(20));
        assert_eq!(code, 0, "r{k}: {out}\n{err}");
        let v = json(&out);
        assert_eq!(v["ok"], true, "{v}");
        let sessions = v["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), SENDERS, "{v}");
        let mut sids: Vec<&str> = sessions
            .iter()
            .map(|s| s["session"].as_str().unwrap())
            .collect();
        sids.sort_unstable();
        sids.dedup();
        assert_eq!(sids.len(), SENDERS, "one session per sender: {v}");
        for f in &files {
            let name = f.file_name().unwrap();
            assert_eq!(
                std::fs::read(outs[k].join(name)).unwrap(),
                std::fs::read(f).unwrap(),
                "r{k}: {name:?} differs"
            );
        }
        let mut left = entries(&outs[k]);
        left.sort();
        assert_eq!(
            left,
            ["obj0.bin", "obj1.bin", "obj2.bin"],
            "no part files left"
        );
    }
}

#[test]
fn rate_group_without_hunt_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "x.bin", 10);
    let p = Proc::spawn(
        "sender",
        rmcast()
            .arg("send")
            .arg(&file)
            .args(["-n", "1", "--rate-group"]),
    );
    let (code, _, err) = p.wait(Duration::from_secs(10));
    assert_eq!(code, 1);
    assert!(err.contains("--rate-control hunt"), "{err}");
}

/// Two senders on one group (issue 19): receivers take the first session
/// they hear, so the senders split them; each receiver and each sender
/// must say which other session it saw, and its failure must name it.
#[test]
fn a_receiver_names_the_other_session_announced_on_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let g = group();
    let senders: Vec<Proc> = ["a.bin", "b.bin"]
        .iter()
        .map(|name| {
            let file = write_file(dir.path(), name, 1000);
            Proc::spawn(
                name,
                rmcast().arg("send").arg(&file).args([
                    "--receivers",
                    "3",
                    "--wait",
                    "2s",
                    "--group",
                    &g,
                ]),
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let receivers: Vec<Proc> = (0..2)
        .map(|k| {
            let out = dir.path().join(format!("out{k}"));
            recv(&g, &out, &format!("r{k}"), &[])
        })
        .collect();
    for s in senders {
        let (code, _, err) = s.wait(Duration::from_secs(20));
        assert_eq!(code, 1, "only 2 receivers for 3 wanted: {err}");
        // And each sender names the other session on its group.
        assert!(err.contains("another session on"), "{err}");
        assert!(
            err.contains("other sessions announced on this group meanwhile"),
            "{err}"
        );
    }
    for (k, r) in receivers.into_iter().enumerate() {
        let (code, out, err) = r.wait(Duration::from_secs(20));
        assert_eq!(code, 1, "r{k}: {out}\n{err}");
        assert!(err.contains("another session on"), "r{k}: {err}");
        let text = format!("{out}{err}");
        assert!(
            text.contains("other sessions announced on this group and not taken"),
            "r{k}: {text}"
        );
    }
}

/// Ctrl-C (SIGINT) ends a waiting sender and a waiting receiver promptly
/// with exit status 130, as `--help` lists, and leaves nothing under `--out`.
#[test]
fn ctrl_c_exits_130_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let g = group();
    let file = write_file(dir.path(), "f.bin", 10_000);
    let out = dir.path().join("in");
    let receiver = recv(&g, &out, "r0", &[]);
    let sender = Proc::spawn(
        "sender",
        rmcast()
            .args(["send", "--group", &g, "--receivers", "2", "--wait", "20s"])
            .arg(&file),
    );
    std::thread::sleep(Duration::from_millis(500));
    for p in [&receiver, &sender] {
        let status = Command::new("kill")
            .args(["-INT", &p.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let started = Instant::now();
    for p in [receiver, sender] {
        let what = p.what.clone();
        let (code, _, err) = p.wait(Duration::from_secs(5));
        assert_eq!(code, 130, "{what} after Ctrl-C; stderr:\n{err}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(entries(&out).is_empty(), "{:?}", entries(&out));
}

/// What a person reads when stderr is a pipe or a log file: no colour
/// escapes in the log lines, and "1 receiver", not "1 receivers".
#[test]
fn piped_logs_are_plain_and_counts_read_as_english() {
    let p = Proc::spawn(
        "demo",
        rmcast().args([
            "-v",
            "demo",
            "--receivers",
            "1",
            "--size",
            "64KiB",
            "--group",
            &group(),
        ]),
    );
    let (code, _, err) = p.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(" INFO "), "-v logs at info: {err}");
    assert!(
        !err.contains('\u{1b}'),
        "colour escapes in piped logs: {err:?}"
    );
    assert!(err.contains("to 1 receiver with"), "{err}");
    assert!(err.contains("1/1 receiver verified"), "{err}");
}

/// `--min-receivers`: one expected node never comes; the others get the
/// file, the report names the missing one (`--expect`), and the exit
/// status is 3, not 1. Without it the same session fails for all.
#[test]
fn min_receivers_serves_those_who_came_and_names_who_did_not() {
    let dir = tempfile::tempdir().unwrap();
    let g = group();
    let file = write_file(dir.path(), "f.bin", 300_000);
    let expect = dir.path().join("nodes");
    std::fs::write(
        &expect,
        "# the cluster\nnode-a\nnode-b\n\nnode-c  # down today\n",
    )
    .unwrap();
    let out = dir.path().join("in");
    let receivers: Vec<Proc> = ["node-a", "node-b"]
        .iter()
        .map(|n| recv(&g, &out.join(n), n, &[]))
        .collect();
    let p = Proc::spawn(
        "sender",
        rmcast()
            .args([
                "send",
                "--json",
                "--group",
                &g,
                "--wait",
                "2s",
                "--min-receivers",
                "2",
                "--expect",
            ])
            .arg(&expect)
            .arg(&file),
    );
    let (code, stdout, err) = p.wait(Duration::from_secs(30));
    assert_eq!(code, 3, "{err}");
    let v = json(&stdout);
    assert_eq!(v["missing"], 1, "{v}");
    assert_eq!(v["verified"], 2, "{v}");
    assert_eq!(v["never_came"], serde_json::json!(["node-c"]), "{v}");
    for (r, n) in receivers.into_iter().zip(["node-a", "node-b"]) {
        let (code, _, err) = r.wait(Duration::from_secs(20));
        assert_eq!(code, 0, "{n}: {err}");
        assert_eq!(
            std::fs::read(out.join(n).join("f.bin")).unwrap(),
            std::fs::read(&file).unwrap()
        );
    }
    // Too few for the minimum: a clear failure naming who came.
    let lone = recv(&g, &out.join("lone"), "node-a", &[]);
    let (code, _, err) = Proc::spawn(
        "sender",
        rmcast()
            .args([
                "send",
                "--group",
                &g,
                "--wait",
                "1s",
                "--min-receivers",
                "2",
                "--receivers",
                "3",
            ])
            .arg(&file),
    )
    .wait(Duration::from_secs(30));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("only 1 of 3 receivers registered") && err.contains("node-a"),
        "{err}"
    );
    drop(lone);
    let (code, _, err) = Proc::spawn(
        "sender",
        rmcast()
            .args(["send", "--receivers", "2", "--min-receivers", "3"])
            .arg(&file),
    )
    .wait(Duration::from_secs(10));
    assert_eq!(code, 1);
    assert!(err.contains("--min-receivers 3 is outside 1..=2"), "{err}");
}

/// `--json-events`: one JSON object per line as things happen — the
/// sender's joined, all_joined, progress (with who joined while waiting),
/// receiver_done for each receiver, and a finished event last carrying the
/// --json report; the receiver's progress and finished.
#[test]
fn json_events_stream_the_session_as_it_happens() {
    let dir = tempfile::tempdir().unwrap();
    let g = group();
    let file = write_file(dir.path(), "f.bin", 2_000_000);
    let out = dir.path().join("in");
    let mut cmd = rmcast();
    cmd.args([
        "recv",
        "--json-events",
        "--group",
        &g,
        "--name",
        "r0",
        "--timeout",
        "20s",
        "--out",
    ])
    .arg(&out);
    let r0 = Proc::spawn("r0", &mut cmd);
    let r1 = recv(&g, &out.join("r1"), "r1", &[]);
    let (code, stdout, err) = Proc::spawn(
        "sender",
        rmcast()
            .args([
                "send",
                "--json-events",
                "--group",
                &g,
                "--receivers",
                "2",
                "--rate",
                "40mbit",
            ])
            .arg(&file),
    )
    .wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    for k in [
        "joined",
        "all_joined",
        "progress",
        "receiver_done",
        "finished",
    ] {
        assert!(kinds.contains(&k), "no {k} in {kinds:?}");
    }
    assert_eq!(
        kinds.iter().filter(|k| **k == "joined").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "receiver_done").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(*kinds.last().unwrap(), "finished");
    let done: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "receiver_done")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(done.contains(&"r0") && done.contains(&"r1"), "{done:?}");
    let last = events.last().unwrap();
    assert_eq!(last["ok"], true);
    assert_eq!(last["report"]["verified"], 2);
    let times: Vec<f64> = events.iter().map(|e| e["t"].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let (code, stdout, err) = r0.wait(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().any(|e| e["event"] == "progress"), "{stdout}");
    assert_eq!(lines.last().unwrap()["event"], "finished");
    assert_eq!(lines.last().unwrap()["report"]["verified"], true);
    let (code, _, err) = r1.wait(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
}

/// `send --control` with a multicast protocol: a hybrid session. A
/// receiver registering through the lobby (`recv --sender`) that hears
/// the group takes the file over multicast beside a plain `recv`; the
/// report says who went which way. (Receivers that do not hear the group
/// are in `crates/rmcast/tests/hybrid.rs` and the lab's chaos scenarios.)
#[test]
fn send_with_control_serves_lobby_and_plain_receivers_in_one_hybrid_session() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "obj.bin", 2_000_000);
    let g = group();
    let control = free_tcp_addr();
    let sender = Proc::spawn(
        "sender",
        rmcast().arg("send").arg(&file).args([
            "--receivers",
            "2",
            "--group",
            &g,
            "--control",
            &control,
            "--json",
        ]),
    );
    let plain = recv(&g, &dir.path().join("plain"), "plain", &[]);
    let lobby = recv(
        &g,
        &dir.path().join("lobby"),
        "lobby",
        &["--sender", &control],
    );
    let (code, out, err) = sender.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["verified"], 2, "{v}");
    let mut multicast: Vec<&str> = v["hybrid"]["multicast"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    multicast.sort_unstable();
    assert_eq!(multicast, ["lobby", "plain"], "{v}");
    assert_eq!(v["hybrid"]["tcp"], serde_json::json!([]), "{v}");
    assert_eq!(v["hybrid"]["why"], Value::Null, "{v}");
    for (p, name) in [(plain, "plain"), (lobby, "lobby")] {
        let (code, _, err) = p.wait(Duration::from_secs(20));
        assert_eq!(code, 0, "{name}: {err}");
        let copy = std::fs::read(dir.path().join(name).join("obj.bin")).unwrap();
        assert!(
            copy == std::fs::read(&file).unwrap(),
            "{name}'s copy differs"
        );
    }
    // A directory tree goes over multicast (the TCP half carries one
    // file): a lobby receiver that hears the group stores it whole.
    let tree = dir.path().join("ckpt");
    std::fs::create_dir_all(tree.join("shards")).unwrap();
    write_file(&tree.join("shards"), "0.bin", 300_000);
    let sender = Proc::spawn(
        "tree",
        rmcast().arg("send").arg(&tree).args([
            "--receivers",
            "1",
            "--group",
            &g,
            "--control",
            &control,
        ]),
    );
    let lobby = recv(
        &g,
        &dir.path().join("tree-out"),
        "lobby",
        &["--sender", &control],
    );
    let (code, _, err) = sender.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = lobby.wait(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    assert!(
        std::fs::read(dir.path().join("tree-out/ckpt/shards/0.bin")).unwrap()
            == std::fs::read(tree.join("shards/0.bin")).unwrap(),
        "the tree's file differs"
    );
}

/// Issue 18's "a receiver that can neither hear multicast nor reach the
/// sender over TCP is named in the report within --wait": with `--expect`,
/// a hybrid send names the one that never came, and not the one that
/// came through the lobby.
#[test]
fn a_hybrid_send_names_the_expected_receiver_that_never_came() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "obj.bin", 100_000);
    let expect = dir.path().join("nodes");
    std::fs::write(&expect, "lobby\nplain\nunreachable\n").unwrap();
    let g = group();
    let control = free_tcp_addr();
    let sender = Proc::spawn(
        "sender",
        rmcast()
            .arg("send")
            .arg(&file)
            .args(["--group", &g, "--control", &control, "--wait", "2s"])
            .arg("--expect")
            .arg(&expect)
            .arg("--json"),
    );
    let plain = recv(&g, &dir.path().join("plain"), "plain", &[]);
    let lobby = recv(
        &g,
        &dir.path().join("lobby"),
        "lobby",
        &["--sender", &control],
    );
    let (code, out, err) = sender.wait(Duration::from_secs(30));
    assert_eq!(code, 1, "{err}");
    let v = json(&out);
    assert_eq!(v["never_came"], serde_json::json!(["unreachable"]), "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.contains("only 2 of 3"), "{v}");
    for p in [plain, lobby] {
        let (code, _, _) = p.wait(Duration::from_secs(20));
        assert_eq!(code, 1, "the session never formed: every receiver fails");
    }
}
