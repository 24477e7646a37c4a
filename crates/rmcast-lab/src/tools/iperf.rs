//! iperf3: one TCP flow from h0 to h1, the point-to-point ceiling
//! (unverified; iperf3's own receiver-side figure is the goodput).

use super::driver::{Completion, Ctx, Plan, ProcSpec, Tool, require, s};

/// The iperf3 plan.
pub fn plan(tool: &Tool, c: &Ctx) -> Result<Plan, String> {
    require(&["iperf3"], "iperf3")?;
    let server = vec![s("-s"), s("-1"), s("-B"), s(c.addr(1)), s("-p"), s(c.port)];
    let mut args = vec![
        s("-c"),
        s(c.addr(1)),
        s("-p"),
        s(c.port),
        s("-n"),
        s(c.size),
        s("-J"),
    ];
    args.extend(tool.args.iter().cloned());
    Ok(Plan {
        relays: Vec::new(),
        receivers: vec![ProcSpec {
            host: 1,
            program: s("iperf3"),
            args: server,
            env: Vec::new(),
        }],
        sender: ProcSpec {
            host: 0,
            program: s("iperf3"),
            args,
            env: Vec::new(),
        },
        daemon_status: None,
        completion: Completion::SenderExit,
        verify: false,
        served: 1,
        settle_s: 0.5,
    })
}
