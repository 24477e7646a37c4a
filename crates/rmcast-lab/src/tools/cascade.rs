//! rmcast across segments (`kind = "cascade"`, issue #23): `rmcast send` on
//! h0 to segment 0's group, one `rmcast relay` per further segment, from
//! the group of the segment before to its own, and plain `rmcast recv` on
//! every receiver, in its segment's group.
//!
//! Every sender of a segment (h0, or the relay into it) waits for the
//! segment's receivers plus the relay that hangs off it, which registers as
//! one member and confirms only once its whole subtree has verified; so the
//! sender's exit 0 still means every receiver on every segment holds a
//! verified copy, and the runner times the cascade by it as any rmcast run.

use super::driver::{Completion, Ctx, Plan, ProcSpec, Tool, paced_rate, s};
use crate::testbed::Segments;

/// The protocols a cascade runs (relays forward multicast groups: no TCP overlays).
pub const PROTOCOLS: [&str; 4] = ["ack", "nak-poll", "ring", "tree"];

/// Group and port of segment `seg` in this run, as an argument (`G:P`).
pub fn segment_group(c: &Ctx, seg: &Segments, s: usize) -> String {
    let (g, p) = seg.group_of(s, c.group, c.port);
    format!("{g}:{p}")
}

/// The cascade plan: receivers first (host order), then the relays, deepest
/// first (each is listening before the relay or sender upstream of it
/// announces), then the sender.
pub fn plan(tool: &Tool, c: &Ctx) -> Result<Plan, String> {
    let Some(seg) = c.tb.segments() else {
        return Err(
            "unavailable: kind = \"cascade\" needs a segmented testbed (the scenario's `segments`)"
                .into(),
        );
    };
    if !c.rmcast.is_file() {
        return Err(format!(
            "unavailable: rmcast binary {} not found",
            c.rmcast.display()
        ));
    }
    let rm = c.rmcast.display().to_string();
    let protocol = tool.protocol.clone().unwrap_or_else(|| s("nak-poll"));
    let paced = paced_rate(tool, c.rate_bits_per_s);
    let env: Vec<(String, String)> = tool.env.clone().into_iter().collect();
    let mut receivers = Vec::new();
    for i in c.receivers() {
        let mut args = super::rmcast::recv_args(c, i, segment_group(c, seg, seg.segment_of(i)));
        args.extend(tool.recv_args.iter().cloned());
        receivers.push(ProcSpec {
            host: i,
            program: rm.clone(),
            args,
            env: env.clone(),
        });
    }
    let mut relays = Vec::new();
    for k in (1..=seg.relays()).rev() {
        let r = &c.tb.relays()[k - 1];
        let mut args = vec![
            s("relay"),
            s("--from"),
            segment_group(c, seg, r.from),
            s("--from-iface"),
            s(r.up_addr),
            s("--to"),
            segment_group(c, seg, r.to),
            s("--to-iface"),
            s(r.down_addr),
            s("--receivers"),
            s(seg.members_of(r.to)),
            s("--name"),
            format!("r{k}"),
            s("--wait"),
            s("30s"),
            s("--timeout"),
            c.limit_arg(),
            s("--json"),
            s("--protocol"),
            protocol.clone(),
        ];
        if let Some(rate) = paced {
            args.extend([s("--rate"), s(rate)]);
        }
        args.extend(tool.relay_args.iter().cloned());
        relays.push(ProcSpec {
            host: c.tb.relay_node(k),
            program: rm.clone(),
            args,
            env: env.clone(),
        });
    }
    let mut args = vec![
        s("send"),
        c.object_arg(),
        s("--group"),
        segment_group(c, seg, 0),
        s("--iface"),
        s(c.addr(0)),
        s("--receivers"),
        s(seg.members_of(0)),
        s("--json"),
        s("--wait"),
        s("30s"),
        s("--protocol"),
        protocol,
    ];
    if let Some(rate) = paced {
        args.extend([s("--rate"), s(rate)]);
    }
    args.extend(tool.args.iter().cloned());
    Ok(Plan {
        receivers,
        relays,
        sender: ProcSpec {
            host: 0,
            program: rm,
            args,
            env,
        },
        daemon_status: None,
        completion: Completion::SenderExit,
        verify: true,
        served: c.n,
        settle_s: 0.5,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::{Local, Testbed};
    use crate::tools::ToolKind;
    use std::net::Ipv4Addr;
    use std::path::{Path, PathBuf};

    fn tool() -> Tool {
        Tool {
            name: "cascade".into(),
            kind: ToolKind::Cascade,
            protocol: Some("nak-poll".into()),
            rate_fraction: None,
            args: vec!["--window".into(), "64".into()],
            recv_args: vec![],
            relay_args: vec!["--sender-timeout".into(), "5s".into()],
            env: Default::default(),
            senders: None,
        }
    }

    fn arg<'a>(args: &'a [String], flag: &str) -> &'a str {
        let i = args.iter().position(|a| a == flag).unwrap_or_else(|| {
            panic!("{flag} missing in {args:?}");
        });
        &args[i + 1]
    }

    /// The plan of segments [10, 10, 10] on a loopback testbed (the plan
    /// is the same arithmetic on the namespace LAN, with its addresses).
    fn plan_of(segments: &[u16]) -> (Testbed, Vec<PathBuf>) {
        let seg = Segments::new(segments).unwrap();
        let n = seg.total();
        let tb = Testbed::Local(Local::segmented(seg));
        let outs = (0..=n).map(|i| PathBuf::from(format!("/o/h{i}"))).collect();
        (tb, outs)
    }

    fn ctx<'a>(tb: &'a Testbed, outs: &'a [PathBuf], exe: &'a Path) -> Ctx<'a> {
        Ctx {
            tb,
            n: outs.len() - 1,
            object: Path::new("/obj"),
            size: 1 << 20,
            out_dirs: outs,
            run_dir: Path::new("/run"),
            group: Ipv4Addr::new(239, 77, 9, 1),
            port: 20000,
            rate_bits_per_s: Some(100_000_000),
            tool_loss: 0.0,
            rmcast: exe,
            self_cmd: &[],
            limit_s: 60.0,
        }
    }

    #[test]
    fn three_segments_of_ten_make_two_relays_and_the_right_receiver_counts() {
        let (tb, outs) = plan_of(&[10, 10, 10]);
        let exe = std::env::current_exe().unwrap();
        let p = plan(&tool(), &ctx(&tb, &outs, &exe)).unwrap();
        assert_eq!(p.receivers.len(), 30);
        assert_eq!(p.relays.len(), 2);
        // The sender: segment 0's group, its 10 receivers + relay r1.
        assert_eq!(p.sender.host, 0);
        assert_eq!(p.sender.args[0], "send");
        assert_eq!(arg(&p.sender.args, "--group"), "239.77.9.1:20000");
        assert_eq!(arg(&p.sender.args, "--receivers"), "11");
        assert_eq!(arg(&p.sender.args, "--rate"), "95000000");
        assert_eq!(arg(&p.sender.args, "--window"), "64");
        // Receivers: h1..h10 on segment 0, h11..h20 on 1, h21..h30 on 2.
        for r in &p.receivers {
            let want = match r.host {
                1..=10 => "239.77.9.1:20000",
                11..=20 => "239.77.9.2:20002",
                21..=30 => "239.77.9.3:20004",
                h => panic!("receiver on host {h}"),
            };
            assert_eq!(arg(&r.args, "--group"), want, "h{}", r.host);
            assert_eq!(arg(&r.args, "--name"), format!("h{}", r.host));
            assert_eq!(r.args[0], "recv");
        }
        // Relays, deepest first: r2 (1 → 2, 10 receivers), then r1 (0 → 1, 10 + r2).
        let (r2, r1) = (&p.relays[0], &p.relays[1]);
        assert_eq!((r2.host, r1.host), (tb.relay_node(2), tb.relay_node(1)));
        assert_eq!(
            (tb.node_name(r1.host), tb.node_name(r2.host)),
            ("r1".into(), "r2".into())
        );
        assert_eq!(r1.args[0], "relay");
        assert_eq!(arg(&r1.args, "--from"), "239.77.9.1:20000");
        assert_eq!(arg(&r1.args, "--to"), "239.77.9.2:20002");
        assert_eq!(arg(&r1.args, "--receivers"), "11");
        assert_eq!(arg(&r2.args, "--from"), "239.77.9.2:20002");
        assert_eq!(arg(&r2.args, "--to"), "239.77.9.3:20004");
        assert_eq!(arg(&r2.args, "--receivers"), "10");
        assert_eq!(arg(&r2.args, "--name"), "r2");
        assert_eq!(arg(&r2.args, "--rate"), "95000000");
        assert_eq!(arg(&r2.args, "--sender-timeout"), "5s");
        assert!(r2.args.iter().any(|a| a == "--json"));
        // Sender options are the sender's: relays get relay_args.
        assert!(!r2.args.iter().any(|a| a == "--window"));
    }

    #[test]
    fn a_transit_segment_without_receivers_waits_for_its_relay_only() {
        let (tb, outs) = plan_of(&[0, 2]);
        let exe = std::env::current_exe().unwrap();
        let p = plan(&tool(), &ctx(&tb, &outs, &exe)).unwrap();
        assert_eq!(arg(&p.sender.args, "--receivers"), "1");
        assert_eq!(p.relays.len(), 1);
        assert_eq!(arg(&p.relays[0].args, "--receivers"), "2");
        assert!(
            p.receivers
                .iter()
                .all(|r| arg(&r.args, "--group") == "239.77.9.2:20002")
        );
    }

    #[test]
    fn a_tree_of_relays_feeds_two_segments_from_the_first() {
        let seg = Segments::with_relays(&[2, 3, 1], &[0, 0]).unwrap();
        let tb = Testbed::Local(Local::segmented(seg));
        let outs: Vec<PathBuf> = (0..=6).map(|i| PathBuf::from(format!("/o/{i}"))).collect();
        let exe = std::env::current_exe().unwrap();
        let p = plan(&tool(), &ctx(&tb, &outs, &exe)).unwrap();
        assert_eq!(arg(&p.sender.args, "--receivers"), "4", "h1, h2, r1, r2");
        let (r2, r1) = (&p.relays[0], &p.relays[1]);
        assert_eq!(arg(&r1.args, "--from"), "239.77.9.1:20000");
        assert_eq!(arg(&r2.args, "--from"), "239.77.9.1:20000");
        assert_eq!(arg(&r1.args, "--receivers"), "3");
        assert_eq!(arg(&r2.args, "--to"), "239.77.9.3:20004");
        assert_eq!(arg(&r2.args, "--receivers"), "1");
    }

    #[test]
    fn a_flat_testbed_cannot_run_a_cascade() {
        let tb = Testbed::Local(Local::new(2));
        let outs: Vec<PathBuf> = (0..=2).map(|i| PathBuf::from(format!("/o/{i}"))).collect();
        let exe = std::env::current_exe().unwrap();
        let e = plan(&tool(), &ctx(&tb, &outs, &exe)).err().unwrap();
        assert!(e.contains("segments"), "{e}");
    }
}
