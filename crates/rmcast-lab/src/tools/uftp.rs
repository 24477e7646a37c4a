//! uftp: the `uftpd` daemon on every receiver (done when its status file
//! says so), `uftp` on h0 (netns only: one address per receiver id).

use super::driver::{Completion, Ctx, Plan, ProcSpec, Tool, paced_rate, require, s};
use std::path::PathBuf;

/// The uftp plan.
pub fn plan(tool: &Tool, c: &Ctx) -> Result<Plan, String> {
    let paced = paced_rate(tool, c.rate_bits_per_s);
    if c.tb.is_loopback() {
        return Err(s(
            "unavailable: uftp needs a LAN, the netns or ssh testbed (one address per receiver id)",
        ));
    }
    require(&["uftp", "uftpd"], "uftp")?;
    let uid = |i: usize| format!("0x{:08X}", u32::from(c.addr(i)));
    let status: Vec<PathBuf> = c
        .receivers()
        .map(|i| c.run_dir.join(format!("h{i}.uftp-status")))
        .collect();
    let recv = c
        .receivers()
        .map(|i| {
            let mut args = vec![
                s("-d"),
                s("-I"),
                s(c.tb.iface(i)),
                s("-D"),
                c.out(i),
                s("-F"),
                status[i - 1].display().to_string(),
                s("-x"),
                s(1),
                s("-B"),
                s(4194304),
                s("-c"),
                s(8388608),
                s("-U"),
                uid(i),
                s("-p"),
                s(c.port),
            ];
            args.extend(tool.recv_args.iter().cloned());
            ProcSpec {
                host: i,
                program: s("uftpd"),
                args,
                env: Vec::new(),
            }
        })
        .collect();
    let ids: Vec<String> = (1..=c.n).map(uid).collect();
    // uftp's -R is in kbit/s; unshaped links get 1 Gbit/s.
    let kbit = paced.unwrap_or(1_000_000_000) / 1000;
    let mut args = vec![
        s("-I"),
        s(c.tb.iface(0)),
        s("-R"),
        s(kbit),
        s("-H"),
        ids.join(","),
        s("-x"),
        s(1),
        s("-B"),
        s(4194304),
        s("-p"),
        s(c.port),
        s("-U"),
        uid(0),
    ];
    args.extend(tool.args.iter().cloned());
    args.push(c.object_arg());
    Ok(Plan {
        receivers: recv,
        relays: Vec::new(),
        sender: ProcSpec {
            host: 0,
            program: s("uftp"),
            args,
            env: Vec::new(),
        },
        daemon_status: Some((status, "RESULT;")),
        completion: Completion::SenderExit,
        verify: true,
        served: c.n,
        settle_s: 0.5,
    })
}
