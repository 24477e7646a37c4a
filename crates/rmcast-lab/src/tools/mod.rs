//! Tool drivers: how each tool's receivers and sender are started on the
//! testbed, when a receiver counts as done, and whether its file can be
//! verified. One file per tool: [`rmcast`], [`udpcast`], [`uftp`],
//! [`norm`] and [`multitcp`] (each with the lab's own small program where
//! the tool needs one), [`iperf`] and [`blast`]; [`rounds`] is one node of
//! the symmetric experiment, which [`crate::scenario::symmetric`] runs.
//!
//! What a driver is given and returns is in `driver.rs`. Settings follow
//! /work/shared/notes/peers.md; docs/lab.md says why.

pub mod blast;
pub mod cascade;
pub mod iperf;
pub mod multitcp;
pub mod norm;
pub mod rmcast;
pub mod rounds;
pub mod udpcast;
pub mod uftp;

pub use multitcp::{TcpRecvArgs, TcpSendArgs, tcp_recv, tcp_send};
pub use norm::{NORM_BUILT, NormRecvArgs, NormSendArgs, norm_recv, norm_send};

mod driver;

pub use driver::{
    Completion, Ctx, Plan, ProcSpec, Tool, ToolKind, more_senders, on_path, paced_rate, read_report,
};

/// Builds the plan, or says why the tool cannot run here.
pub fn plan(tool: &Tool, c: &Ctx) -> Result<Plan, String> {
    match tool.kind {
        ToolKind::Rmcast => rmcast::plan(tool, c),
        ToolKind::Cascade => cascade::plan(tool, c),
        ToolKind::Udpcast => udpcast::plan(tool, c),
        ToolKind::Uftp => uftp::plan(tool, c),
        ToolKind::Norm => norm::plan(tool, c),
        ToolKind::Multitcp => multitcp::plan(tool, c),
        ToolKind::Blast => blast::plan(tool, c),
        ToolKind::Iperf3 => iperf::plan(tool, c),
        ToolKind::Symmetric => {
            Err("symmetric groups are run by crate::scenario::symmetric, not planned here".into())
        }
    }
}
