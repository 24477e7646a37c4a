//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)]

pub mod behaviour;
pub mod golden;
pub mod matrices;
pub mod rate;
pub mod report_text;
pub mod table2;

use rmcast_proto::{ProtocolId, SenderConfig};
use rmcast_sim::{LossModel, RunReport, Scenario};
use std::time::Duration;

/// Data packet size used by the tests (a full Ethernet MTU).
pub const PACKET: usize = 1472;
/// Object bytes per data packet.
pub const PAYLOAD: u64 = (PACKET - 24) as u64;
/// The matrix's window: small, so "a window's worth ± 1" objects stay small.
pub const WINDOW: u32 = 32;

/// A scenario with the matrix's protocol settings.
pub fn scenario(
    protocol: ProtocolId,
    receivers: u16,
    object_size: u64,
    loss: LossModel,
    seed: u64,
) -> Scenario {
    Scenario {
        receivers,
        object_size,
        config: SenderConfig {
            protocol,
            packet_size: PACKET,
            window: WINDOW,
            ..SenderConfig::default()
        },
        loss,
        seed,
        time_limit: Duration::from_secs(300),
        ..Scenario::default()
    }
}

/// Runs and panics with the replay recipe on failure (honours RMCAST_SIM_SEED).
#[track_caller]
pub fn check(s: &Scenario) -> RunReport {
    rmcast_sim::run_or_panic(s)
}
