//! A run's whole `RunReport` as stable text, for the golden files.
//!
//! Shared by rmcast-sim's and rmcast-lab's golden tests (the latter
//! includes this file by `#[path]`), so it uses only rmcast-sim, its
//! public types and blake3.
//!
//! Every field is written, one per line, with `{:?}` (every one is a count
//! or virtual time; `f64`'s Debug is the shortest exact round trip, so
//! equal text means equal bits). The struct is destructured without `..`:
//! a field added to `RunReport`, `ReceiverReport` or `SenderReport` fails
//! to compile here until it is rendered. Each trace (outstanding and rate
//! samples, every sender's) is written as its length and the blake3 of
//! its `{:?}`, so a long run stays a few dozen lines.
#![allow(dead_code)]

use rmcast_sim::{ReceiverReport, RunReport, SenderReport};
use std::fmt::{Debug, Write as _};

fn digest<T: Debug>(v: &[T]) -> String {
    let hash = blake3::hash(format!("{v:?}").as_bytes()).to_hex();
    format!("{} samples, blake3 {}", v.len(), &hash[..16])
}

/// `=== label` then every field of `r`, one per line.
pub fn render_report(label: &str, r: &RunReport) -> String {
    let RunReport {
        seed,
        seconds,
        verdicts_seconds,
        goodput_mbit_s,
        data_packets,
        retransmitted_packets,
        control_packets,
        control_per_data,
        feedback_per_data,
        feedback_sent,
        drops,
        garbage_injected,
        sender_garbage_seen,
        outcome,
        sender,
        receivers,
        max_socket_buffer_bytes,
        max_port_queue_bytes,
        max_uplink_queue_bytes,
        events,
        max_outstanding,
        outstanding_trace,
        rate_trace,
        senders,
    } = r;
    let mut o = format!("=== {label}\n");
    macro_rules! line {
        ($($f:ident),*) => {
            $( let _ = writeln!(o, "{}: {:?}", stringify!($f), $f); )*
        };
    }
    line!(
        seed,
        seconds,
        verdicts_seconds,
        goodput_mbit_s,
        data_packets,
        retransmitted_packets,
        control_packets,
        control_per_data,
        feedback_per_data,
        feedback_sent,
        drops,
        garbage_injected,
        sender_garbage_seen,
        max_socket_buffer_bytes,
        max_port_queue_bytes,
        max_uplink_queue_bytes,
        events,
        max_outstanding
    );
    let _ = writeln!(o, "outcome: ok {:?} error {:?}", outcome.ok, outcome.error);
    for m in &outcome.members {
        let _ = writeln!(o, "  member {m:?}");
    }
    let _ = writeln!(o, "sender: {sender:?}");
    let _ = writeln!(o, "outstanding_trace: {}", digest(outstanding_trace));
    let _ = writeln!(o, "rate_trace: {}", digest(rate_trace));
    for s in senders {
        render_sender(&mut o, s);
    }
    for x in receivers {
        render_receiver(&mut o, x);
    }
    o
}

fn render_sender(o: &mut String, s: &SenderReport) {
    let SenderReport {
        host,
        session,
        seconds,
        stats,
        outcome,
        rate,
        group,
        max_outstanding,
        outstanding_trace,
        rate_trace,
    } = s;
    let _ = writeln!(
        o,
        "sender {host}: session {session:?} seconds {seconds:?} max_outstanding {max_outstanding} \
         ok {:?} verified {} error {:?}",
        outcome.ok,
        outcome.verified(),
        outcome.error
    );
    let _ = writeln!(o, "  stats {stats:?}");
    let _ = writeln!(o, "  rate {rate:?}");
    let _ = writeln!(o, "  group {group:?}");
    let _ = writeln!(o, "  outstanding_trace {}", digest(outstanding_trace));
    let _ = writeln!(o, "  rate_trace {}", digest(rate_trace));
}

fn render_receiver(o: &mut String, x: &ReceiverReport) {
    let ReceiverReport {
        host,
        name,
        addr,
        rank,
        hash_ok,
        all_data_seconds,
        ended_seconds,
        failure,
        crashed_seconds,
        sender_failed_seconds,
        stats,
        data_lost,
        data_frames,
        fragment_loss,
        socket_overflow,
        garbage_seen,
    } = x;
    let _ = writeln!(
        o,
        "receiver {host} {name} {addr} rank {rank:?} hash_ok {hash_ok} all_data {all_data_seconds:?} \
         ended {ended_seconds:?} failure {failure:?} crashed {crashed_seconds:?} \
         sender_failed {sender_failed_seconds:?} data_lost {data_lost} data_frames {data_frames} \
         fragment_loss {fragment_loss} socket_overflow {socket_overflow} garbage_seen {garbage_seen}"
    );
    let _ = writeln!(o, "  stats {stats:?}");
}

/// One line for a run: the headline numbers and the blake3 of
/// [`render_report`] (so any change to any field changes the line).
pub fn summary_line(label: &str, r: &RunReport) -> String {
    let full = render_report(label, r);
    let hash = blake3::hash(full.as_bytes()).to_hex();
    format!(
        "{label}: seed {} seconds {:?} events {} data {} rtx {} feedback {} timeouts {} verified {}/{} \
         report {}",
        r.seed,
        r.seconds,
        r.events,
        r.data_packets,
        r.retransmitted_packets,
        r.feedback_sent,
        r.sender.timeouts,
        r.outcome.verified(),
        r.receivers.len(),
        &hash[..16]
    )
}
