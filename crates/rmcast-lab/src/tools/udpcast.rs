//! udpcast: `udp-receiver` on every receiver, `udp-sender` on h0 (netns
//! only: its rendezvous is a broadcast).

use super::driver::{Completion, Ctx, Plan, ProcSpec, Tool, paced_rate, require, s};

/// The udpcast plan.
pub fn plan(tool: &Tool, c: &Ctx) -> Result<Plan, String> {
    let paced = paced_rate(tool, c.rate_bits_per_s);
    if c.tb.is_loopback() {
        return Err(s(
            "unavailable: udpcast needs a LAN, the netns or ssh testbed (broadcast rendezvous)",
        ));
    }
    require(&["udp-sender", "udp-receiver"], "udpcast")?;
    let recv = c
        .receivers()
        .map(|i| {
            let mut args = vec![
                s("--interface"),
                s(c.tb.iface(i)),
                s("--nokbd"),
                s("--start-timeout"),
                s(60),
                s("--receive-timeout"),
                s(30),
                s("--portbase"),
                s(c.port),
                s("--file"),
                format!("{}/object.bin", c.out(i)),
            ];
            args.extend(tool.recv_args.iter().cloned());
            ProcSpec {
                host: i,
                program: s("udp-receiver"),
                args,
                env: Vec::new(),
            }
        })
        .collect();
    let mut args = vec![
        s("--interface"),
        s(c.tb.iface(0)),
        s("--file"),
        c.object_arg(),
        s("--min-receivers"),
        s(c.n),
        s("--full-duplex"),
        s("--rexmit-hello-interval"),
        s(10),
        s("--nokbd"),
        s("--portbase"),
        s(c.port),
        s("--no-progress"),
    ];
    if let Some(r) = paced {
        args.extend([s("--max-bitrate"), format!("{}k", r / 1000)]);
    }
    args.extend(tool.args.iter().cloned());
    Ok(Plan {
        relays: Vec::new(),
        receivers: recv,
        sender: ProcSpec {
            host: 0,
            program: s("udp-sender"),
            args,
            env: Vec::new(),
        },
        daemon_status: None,
        completion: Completion::AllExit,
        verify: true,
        served: c.n,
        settle_s: 0.3,
    })
}
