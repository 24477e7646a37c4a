//! Chaos on the namespace LAN (`rmcast_lab::chaos`): as root with
//! RMCAST_LAB_NETNS=1, one test per scenario, one at a time. Each checks
//! its expected outcome and that no namespace, process or complete-looking
//! unverified file is left, and adds its row to the table printed after
//! every test (the last one printed is the whole run's); with
//! RMCAST_CHAOS_TABLE=FILE the table is also written to FILE.
//!
//! Needs the rmcast binary ($RMCAST_BIN, or `rmcast` next to rmcast-lab
//! in the target directory) and says SKIPPED otherwise.

mod common;

use common::rmcast_bin;
use rmcast_lab::chaos::{self, Row};
use std::sync::Mutex;

/// One scenario at a time (two cores), and the rows so far.
static ROWS: Mutex<Vec<Row>> = Mutex::new(Vec::new());

fn on_path(p: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(p).is_file()))
}

fn netns_enabled() -> Result<(), String> {
    if std::env::var_os("RMCAST_LAB_NETNS").is_none() {
        return Err(
            "namespace tests run only with RMCAST_LAB_NETNS=1 (as root; see docs/lab.md)".into(),
        );
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("namespace tests need root".into());
    }
    for tool in ["ip", "tc", "nft", "mount"] {
        if !on_path(tool) {
            return Err(format!("`{tool}` is not installed"));
        }
    }
    Ok(())
}

fn scenario(name: &str) {
    let mut rows = ROWS.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(why) = netns_enabled() {
        return eprintln!("SKIPPED: {why}");
    }
    let Some(rmcast) = rmcast_bin() else {
        return eprintln!("SKIPPED: no rmcast binary (build rmcast-cli or set RMCAST_BIN)");
    };
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join(name);
    let result = chaos::run(name, &work, &rmcast);
    // Even a failed scenario must have left nothing behind (its Drop
    // guards ran on the error path).
    let left = chaos::processes_mentioning(&work.display().to_string());
    match result {
        Ok(row) => rows.push(row),
        Err(e) => {
            rows.push(Row {
                scenario: name.into(),
                outcome: format!("FAILED: {}", e.to_string().lines().next().unwrap_or("")),
                detect: None,
                wall: std::time::Duration::ZERO,
            });
            print_table(&rows);
            panic!("{name}: {e:#}\nprocesses left: {left:?}");
        }
    }
    print_table(&rows);
    assert!(left.is_empty(), "processes left: {left:?}");
}

fn print_table(rows: &[Row]) {
    let table = chaos::table(rows);
    eprintln!("\nchaos scenarios so far:\n{table}");
    if let Some(f) = std::env::var_os("RMCAST_CHAOS_TABLE") {
        std::fs::write(f, &table).expect("write RMCAST_CHAOS_TABLE");
    }
}

#[test]
fn netns_chaos_sigkill_of_a_receiver_is_named_and_its_part_file_is_reclaimed() {
    scenario("kill-receiver");
}

#[test]
fn netns_chaos_a_receiver_stopped_past_the_peer_timeout_is_named_and_removed() {
    scenario("stop-receiver");
}

#[test]
fn netns_chaos_sigkill_of_the_sender_ends_every_receiver() {
    scenario("kill-sender");
}

#[test]
fn netns_chaos_a_sender_stopped_past_the_sender_timeout_ends_everyone() {
    scenario("stop-sender");
}

#[test]
fn netns_chaos_a_link_down_shorter_than_the_peer_timeout_is_survived() {
    scenario("link-down-tolerated");
}

#[test]
fn netns_chaos_a_link_down_longer_than_the_peer_timeout_is_named() {
    scenario("link-down-named");
}

#[test]
fn netns_chaos_twenty_percent_loss_completes_byte_exact() {
    scenario("loss-20");
}

#[test]
fn netns_chaos_a_late_joiner_within_wait_completes() {
    scenario("late-joiner");
}

#[test]
fn netns_chaos_two_sessions_on_one_group_fail_or_succeed_cleanly() {
    scenario("colliding-sessions");
}

#[test]
fn netns_chaos_two_sessions_that_cannot_start_both_fail_naming_each_other() {
    scenario("colliding-sessions-stuck");
}

#[test]
fn netns_chaos_a_full_disk_is_refused_and_named() {
    scenario("full-disk");
}

#[test]
fn netns_chaos_a_disk_that_fills_mid_transfer_is_named() {
    scenario("disk-fills");
}

#[test]
fn netns_chaos_a_killed_interior_node_of_a_chain_is_cut_out_and_the_rest_complete() {
    scenario("kill-overlay-chain");
}

#[test]
fn netns_chaos_a_killed_interior_node_of_a_bintree_is_cut_out_and_the_rest_complete() {
    scenario("kill-overlay-bintree");
}

#[test]
fn netns_chaos_a_killed_interior_node_of_a_pipeline_is_cut_out_and_the_rest_complete() {
    scenario("kill-overlay-pipeline");
}

#[test]
fn netns_chaos_a_stopped_interior_node_of_a_chain_is_cut_out_and_the_rest_complete() {
    scenario("stop-overlay-chain");
}

#[test]
fn every_chaos_scenario_has_a_test() {
    let src = include_str!("chaos.rs");
    for (name, _) in chaos::SCENARIOS {
        assert!(
            src.contains(&format!("scenario(\"{name}\")")),
            "{name} has no test"
        );
    }
}

#[test]
fn netns_chaos_receivers_whose_network_drops_multicast_get_the_file_over_tcp_in_the_same_send() {
    scenario("hybrid-some-deaf");
}

#[test]
fn netns_chaos_with_no_multicast_a_hybrid_send_is_as_fast_as_a_tcp_chain() {
    scenario("hybrid-no-multicast");
}

#[test]
fn netns_chaos_bcast_ranks_whose_network_drops_multicast_get_the_object_over_tcp() {
    scenario("bcast-some-deaf");
}

#[test]
fn netns_chaos_a_slow_receiver_sets_the_pace_or_is_ejected_and_named() {
    scenario("laggard-eject");
}

#[test]
fn netns_chaos_a_slow_receiver_catches_up_over_tcp_while_the_others_go_at_link_rate() {
    scenario("laggard-tcp");
}
