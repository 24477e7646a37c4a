//! rmcast itself: `rmcast recv` on every receiver, `rmcast send` on h0
//! (several senders with `senders = S`, each with `--rate-group`).

use super::driver::{Completion, Ctx, Plan, ProcSpec, Tool, paced_rate, s};

/// The protocols `kind = "rmcast"` accepts (the CLI's `--protocol`;
/// `auto` too, in scenarios: [`accepts`]).
pub const PROTOCOLS: [&str; 10] = [
    "ack",
    "nak-poll",
    "ring",
    "tree",
    "tcp-direct",
    "tcp-tree",
    "tcp-binomial",
    "tcp-chain",
    "tcp-bintree",
    "tcp-pipeline",
];

/// Whether a scenario's rmcast tool may name `protocol`: one of
/// [`PROTOCOLS`], or `auto`, the CLI's default, as a user who gives no
/// `--protocol` runs it (without a `rate_fraction`, no `--rate` either).
pub fn accepts(protocol: &str) -> bool {
    protocol == "auto" || PROTOCOLS.contains(&protocol)
}

/// The rmcast plan.
/// `rmcast recv` on host `i` for `group`: its copy under the run's
/// directory, its own name, bounded by the run's limit, with the test loss.
pub fn recv_args(c: &Ctx, i: usize, group: String) -> Vec<String> {
    let mut args = vec![
        s("recv"),
        s("--group"),
        group,
        s("--iface"),
        s(c.addr(i)),
        s("--out"),
        c.out(i),
        s("--json"),
        s("--timeout"),
        c.limit_arg(),
        s("--name"),
        format!("h{i}"),
    ];
    if c.tool_loss > 0.0 {
        args.extend([s("--loss"), s(c.tool_loss), s("--seed"), s(i)]);
    }
    args
}

pub fn plan(tool: &Tool, c: &Ctx) -> Result<Plan, String> {
    let paced = paced_rate(tool, c.rate_bits_per_s);
    if !c.rmcast.is_file() {
        return Err(format!(
            "unavailable: rmcast binary {} not found",
            c.rmcast.display()
        ));
    }
    let rm = c.rmcast.display().to_string();
    let protocol = tool.protocol.clone().unwrap_or_else(|| s("nak-poll"));
    // tcp-* overlays: the sender's control address is h0's, port + 1.
    let overlay_control = protocol
        .starts_with("tcp-")
        .then(|| format!("{}:{}", c.addr(0), c.port + 1));
    let recv = c
        .receivers()
        .map(|i| {
            let mut args = recv_args(c, i, c.group_port());
            if let Some(ctl) = &overlay_control {
                // TCP overlay: register with the sender, accept data on any port.
                args.extend([
                    s("--sender"),
                    ctl.clone(),
                    s("--listen"),
                    format!("{}:0", c.addr(i)),
                ]);
            }
            if tool.sender_count() > 1 {
                args.extend([s("--sessions"), s(tool.sender_count())]);
            }
            args.extend(tool.recv_args.iter().cloned());
            ProcSpec {
                host: i,
                program: rm.clone(),
                args,
                env: tool.env.clone().into_iter().collect(),
            }
        })
        .collect();
    let mut args = vec![
        s("send"),
        c.object_arg(),
        s("--group"),
        c.group_port(),
        s("--iface"),
        s(c.addr(0)),
        s("--receivers"),
        s(c.n),
        s("--json"),
        s("--wait"),
        s("30s"),
        s("--protocol"),
        protocol,
    ];
    // TCP overlays pace themselves (rmcast refuses --rate for them), and so
    // do the rate controls that refuse --rate (off, find), and auto without
    // a rate_fraction (what a user who gives no flag runs: unpaced).
    let paces_itself = (tool.protocol.as_deref() == Some("auto") && tool.rate_fraction.is_none())
        || tool
            .args
            .windows(2)
            .any(|w| w[0] == "--rate-control" && matches!(w[1].as_str(), "off" | "find"))
        || tool
            .args
            .iter()
            .any(|a| a == "--rate-control=off" || a == "--rate-control=find");
    if let Some(r) = paced.filter(|_| overlay_control.is_none() && !paces_itself) {
        args.extend([s("--rate"), s(r)]);
    }
    if let Some(ctl) = overlay_control {
        args.extend([s("--control"), ctl]);
    }
    args.extend(tool.args.iter().cloned());
    if tool.sender_count() > 1 && !args.iter().any(|a| a == "--rate-group") {
        args.push(s("--rate-group"));
    }
    Ok(Plan {
        receivers: recv,
        relays: Vec::new(),
        sender: ProcSpec {
            host: 0,
            program: rm,
            args,
            env: tool.env.clone().into_iter().collect(),
        },
        daemon_status: None,
        completion: Completion::SenderExit,
        verify: true,
        served: c.n,
        settle_s: 0.3,
    })
}
