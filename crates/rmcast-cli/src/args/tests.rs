use super::parse::*;
use super::*;
use clap::CommandFactory;

#[test]
fn the_command_line_definition_is_consistent() {
    Cli::command().debug_assert();
}

fn send(argv: &[&str]) -> SendArgs {
    let mut all = vec!["rmcast", "send", "f", "-n", "2"];
    all.extend_from_slice(argv);
    let Command::Send(mut s) = Cli::try_parse_from(all).unwrap().command else {
        panic!()
    };
    // What main does from the matches.
    if argv.contains(&"--control") {
        s.common.given.push("control".into());
    }
    s
}

#[test]
fn auto_opens_a_lobby_at_the_group_port_plus_one_off_loopback_only() {
    let lobby = |argv: &[&str]| {
        let s = send(argv);
        s.common.lobby(s.no_lobby)
    };
    let lan = ["--iface", "10.0.0.1", "--group", "239.1.2.3:9000"];
    assert_eq!(lobby(&lan), Some(("10.0.0.1:9001".parse().unwrap(), false)));
    assert_eq!(
        lobby(&[]),
        None,
        "on loopback every receiver hears the group"
    );
    assert_eq!(lobby(&[&lan[..], &["--no-lobby"]].concat()), None);
    let nak = [&lan[..], &["--protocol", "nak-poll"]].concat();
    assert_eq!(lobby(&nak), None, "a protocol named by hand runs as asked");
    let asked = [&nak[..], &["--control", "10.0.0.1:7000"]].concat();
    assert_eq!(
        lobby(&asked),
        Some(("10.0.0.1:7000".parse().unwrap(), true))
    );
    let tcp = [&lan[..], &["--protocol", "tcp-chain"]].concat();
    assert_eq!(lobby(&tcp), None, "an overlay is no hybrid session");
    let top = ["--iface", "10.0.0.1", "--group", "239.1.2.3:65535"];
    assert_eq!(lobby(&top), None, "no port + 1");
    let both = [
        "rmcast",
        "send",
        "f",
        "-n",
        "1",
        "--no-lobby",
        "--control",
        "1.2.3.4:5",
    ];
    assert!(
        Cli::try_parse_from(both).is_err(),
        "--no-lobby with --control"
    );
}

#[test]
fn an_overlay_sender_registers_receivers_on_its_interface_at_the_group_port_plus_one() {
    let control = |argv: &[&str]| {
        let s = send(&[&["--protocol", "tcp-pipeline"], argv].concat());
        s.common
            .check_overlay_flags()
            .map(|()| s.common.overlay().unwrap().control)
    };
    let at = |a: &str| a.parse::<std::net::SocketAddr>().unwrap();
    assert_eq!(control(&[]).unwrap(), at("127.0.0.1:7701"));
    // Where `recv --sender 10.0.0.1` and `recv --group ...:9000
    // --sender HOST` look.
    assert_eq!(
        control(&["--iface", "10.0.0.1"]).unwrap(),
        at("10.0.0.1:7701")
    );
    let lan = ["--iface", "10.0.0.1", "--group", "239.1.2.3:9000"];
    assert_eq!(control(&lan).unwrap(), at("10.0.0.1:9001"));
    let told = [&lan[..], &["--control", "0.0.0.0:7000"]].concat();
    assert_eq!(control(&told).unwrap(), at("0.0.0.0:7000"));
    let top = control(&["--group", "239.1.2.3:65535"])
        .unwrap_err()
        .to_string();
    assert!(top.contains("give --control"), "{top}");
    let top_told = ["--group", "239.1.2.3:65535", "--control", "127.0.0.1:7000"];
    assert_eq!(control(&top_told).unwrap(), at("127.0.0.1:7000"));
}

#[test]
fn a_receiver_listens_for_overlay_peers_on_its_interface_unless_told() {
    let listen = |argv: &[&str]| {
        let all = [&["rmcast", "recv", "-o", "d", "--sender", "10.0.0.1"], argv].concat();
        let Command::Recv(r) = Cli::try_parse_from(all).unwrap().command else {
            panic!()
        };
        r.listen()
    };
    assert_eq!(listen(&[]), "127.0.0.1:0".parse().unwrap());
    let lan = ["--iface", "10.0.0.7"];
    assert_eq!(listen(&lan), "10.0.0.7:0".parse().unwrap());
    let told = [&lan[..], &["--listen", "10.0.0.7:9000"]].concat();
    assert_eq!(listen(&told), "10.0.0.7:9000".parse().unwrap());
}

#[test]
fn a_sender_is_a_host_with_the_group_port_plus_one_unless_a_port_is_given() {
    let group: SocketAddrV4 = "239.77.0.1:7700".parse().unwrap();
    let at = |s: &str| parse_sender(s).and_then(|a| a.resolve(group).map_err(|e| e.to_string()));
    assert_eq!(at("10.0.0.1").unwrap(), "10.0.0.1:7701".parse().unwrap());
    assert_eq!(at("10.0.0.1:9").unwrap(), "10.0.0.1:9".parse().unwrap());
    assert_eq!(at("localhost:9").unwrap(), "127.0.0.1:9".parse().unwrap());
    for bad in [
        "",
        ":7701",
        "10.0.0.1:",
        "10.0.0.1:0",
        "10.0.0.1:x",
        "a b",
        "::1",
    ] {
        let e = parse_sender(bad).unwrap_err();
        assert!(e.contains("HOST or HOST:PORT"), "{bad:?}: {e}");
    }
    let top: SocketAddrV4 = "239.77.0.1:65535".parse().unwrap();
    let e = parse_sender("10.0.0.1").unwrap().resolve(top).unwrap_err();
    assert!(e.to_string().contains("give the port"), "{e}");
}

#[test]
fn probabilities_outside_zero_to_one_are_refused() {
    assert_eq!(parse_probability("0.05").unwrap(), 0.05);
    assert!(parse_probability("5").unwrap_err().contains("outside 0..1"));
    assert!(parse_probability("x").is_err());
}

#[test]
fn poll_interval_with_ack_is_refused() {
    let cli = Cli::try_parse_from([
        "rmcast",
        "demo",
        "--protocol",
        "ack",
        "--poll-interval",
        "10",
    ])
    .unwrap();
    let Command::Demo(d) = cli.command else {
        panic!()
    };
    let mut cfg = rmcast::SenderConfig::default();
    let e = d.common.apply(&mut cfg).unwrap_err();
    assert!(e.to_string().contains("nak-poll only"), "{e}");
}

#[test]
fn a_poll_interval_beyond_the_window_is_refused() {
    let cli =
        Cli::try_parse_from(["rmcast", "demo", "--window", "10", "--poll-interval", "20"]).unwrap();
    let Command::Demo(d) = cli.command else {
        panic!()
    };
    let mut cfg = rmcast::SenderConfig::default();
    let e = d.common.apply(&mut cfg).unwrap_err();
    assert!(e.to_string().contains("poll interval 20"), "{e}");
}

#[test]
fn the_segment_size_is_auto_unless_given() {
    let demo = |extra: &[&str]| {
        let mut argv = vec!["rmcast", "demo", "--protocol", "tcp-chain"];
        argv.extend_from_slice(extra);
        let cli = Cli::try_parse_from(argv)?;
        let Command::Demo(d) = cli.command else {
            panic!()
        };
        Ok::<_, clap::Error>(d.common.overlay().expect("an overlay").segment_size)
    };
    assert_eq!(demo(&[]).unwrap(), None);
    assert_eq!(demo(&["--segment-size", "auto"]).unwrap(), None);
    assert_eq!(parse_fec("off"), Ok(FecArg(None)));
    assert_eq!(
        parse_fec("64:2"),
        Ok(FecArg(Some(rmcast::FecShape::new(64, 2))))
    );
    assert_eq!(
        parse_fec("64:2:8"),
        Ok(FecArg(Some(rmcast::FecShape::new(64, 2).with_depth(8))))
    );
    for (bad, says) in [
        ("64", "not K:P"),
        ("64:2:8:1", "not K:P"),
        ("64:2:0", "outside 1..=64"),
        ("64:2:65", "outside 1..=64"),
        ("64:2:x", "D in"),
        ("0:1", "outside 1..=1024"),
        ("2000:1", "outside 1..=1024"),
        ("8:2000", "outside 0..=1024"),
        ("x:1", "K in"),
        ("8:-1", "P in"),
    ] {
        let e = parse_fec(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
    assert_eq!(demo(&["--segment-size", "64KiB"]).unwrap(), Some(64 << 10));
    let e = demo(&["--segment-size", "big"]).unwrap_err().to_string();
    assert!(e.contains("or `auto`"), "{e}");
}
