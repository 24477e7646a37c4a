//! Per-run records and per-point aggregates (median and spread over
//! repeats), written as JSON and CSV.
//!
//! - S, success rate: successful runs / runs of the point.
//! - G, goodput: object bits / seconds from sender start until every
//!   receiver holds a verified copy (Mbit/s, successful runs only).
//! - N, network overhead: bytes all hosts transmitted (L2 frames, as the
//!   interfaces count them) minus the object size.
//! - C, total cost: bytes carried on all host links (every host's tx + rx)
//!   per object byte; multicast to N receivers costs about N + 1, N TCP
//!   copies about 2N.

use crate::procs::Exit;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One process of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProcRecord {
    /// Label (`h3 udp-receiver`).
    pub label: String,
    /// Host index.
    pub host: usize,
    /// PID (on the ssh testbed: of its local ssh client).
    pub pid: i32,
    /// The inventory host it ran on (ssh testbed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Its PID on that host (ssh testbed), by which it was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_pid: Option<i32>,
    /// How it ended.
    pub exit: Option<Exit>,
    /// Why the runner killed it, if it did.
    pub killed_by_us: Option<String>,
    /// User CPU seconds.
    pub cpu_user_s: f64,
    /// System CPU seconds.
    pub cpu_sys_s: f64,
    /// Last bytes of its stderr.
    pub stderr_tail: String,
}

/// One relay of a cascade run: what it did and what it said.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RelayRecord {
    /// `r1`, `r2`, …
    pub name: String,
    /// The group it received from (`--from`).
    pub from: String,
    /// The group it sent to (`--to`).
    pub to: String,
    /// Members it waited for downstream (`--receivers`).
    pub receivers: usize,
    /// How it ended.
    pub exit: Option<Exit>,
    /// Why the runner killed it, if it did.
    #[serde(default)]
    pub killed_by_us: Option<String>,
    /// User + system CPU seconds.
    pub cpu_s: Option<f64>,
    /// Its own `--json` report (the last JSON line of its stdout).
    pub report: Option<serde_json::Value>,
}

/// One run (a point × one repeat).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunRecord {
    /// Sequence number in the output directory.
    pub seq: usize,
    /// Tool name from the scenario.
    pub tool: String,
    /// Tool kind.
    pub kind: String,
    /// `netns` or `local`.
    pub testbed: String,
    /// Receivers in the point.
    pub receivers: usize,
    /// Receivers the tool served (iperf3: 1).
    pub served_receivers: usize,
    /// Senders in the run (rmcast `senders`; 0 in records from before).
    #[serde(default)]
    pub senders: usize,
    /// Object size.
    pub size_bytes: u64,
    /// Link rate (`100mbit`, `none`).
    pub rate: String,
    /// Loss probability on receivers' input.
    pub loss: f64,
    /// MTU.
    pub mtu: u32,
    /// Repeat index.
    pub repeat: u32,
    /// `ok`, `failed` or `unavailable`.
    pub status: String,
    /// Failure reasons (and warnings).
    pub reasons: Vec<String>,
    /// Sender start to verified completion, seconds.
    pub seconds: Option<f64>,
    /// G, Mbit/s.
    pub goodput_mbps: Option<f64>,
    /// Goodput the tool itself reported (rmcast --json); for iperf3, the lab's own clock (G is then iperf3's receiver-side figure).
    pub tool_goodput_mbps: Option<f64>,
    /// Seconds the tool itself reported (rmcast --json: first announcement
    /// to last confirmation, the longest over senders): the transfer
    /// without process start-up, reading the object and exit.
    #[serde(default)]
    pub tool_seconds: Option<f64>,
    /// The link rate (or 1000 when unshaped), Mbit/s.
    pub expected_mbps: f64,
    /// Bytes all hosts transmitted.
    pub tx_bytes_total: u64,
    /// Bytes all hosts received.
    pub rx_bytes_total: u64,
    /// Packets all hosts transmitted.
    pub tx_packets_total: u64,
    /// Bytes the sender transmitted.
    pub sender_tx_bytes: u64,
    /// Packets the sender transmitted.
    pub sender_tx_packets: u64,
    /// Packets all receivers transmitted (feedback).
    pub receivers_tx_packets: u64,
    /// N: tx_bytes_total − object size.
    pub overhead_bytes: i64,
    /// C: (Σ tx + Σ rx) / object size.
    pub cost: f64,
    /// Receivers' packets per sender packet (from interface counters).
    pub feedback_per_data_packet: Option<f64>,
    /// Control packets per data packet (rmcast's own count).
    pub control_per_data_packet: Option<f64>,
    /// Data packets (rmcast).
    pub data_packets: Option<u64>,
    /// Retransmitted packets (rmcast).
    pub retransmitted_packets: Option<u64>,
    /// Sender CPU seconds.
    pub cpu_sender_s: Option<f64>,
    /// Sender CPU seconds per GB of object.
    pub cpu_sender_s_per_gb: Option<f64>,
    /// Mean receiver CPU seconds.
    pub cpu_receiver_s_mean: Option<f64>,
    /// Largest receiver CPU seconds.
    pub cpu_receiver_s_max: Option<f64>,
    /// Mean receiver CPU seconds per GB of object.
    pub cpu_receiver_s_per_gb: Option<f64>,
    /// Packets the tbf shapers dropped during the run (should be 0).
    pub shaper_drops: u64,
    /// Packets the loss rules dropped during the run.
    pub loss_drops: u64,
    /// blast: mean over receivers of 1 − received / sent. rmcast: the
    /// repair fraction, retransmitted / first-transmitted data packets
    /// summed over the senders (completed runs only).
    #[serde(default)]
    pub loss_mean: Option<f64>,
    /// blast: the worst receiver's loss.
    #[serde(default)]
    pub loss_max: Option<f64>,
    /// blast: datagrams per second the sender achieved.
    #[serde(default)]
    pub offered_pps: Option<f64>,
    /// Every process.
    pub procs: Vec<ProcRecord>,
    /// Receivers per segment (cascade runs on a segmented testbed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<u16>,
    /// Cascade runs: seconds from the sender's start until the last of all
    /// processes (receivers and relays too) ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit_seconds: Option<f64>,
    /// The relays of a cascade run, r1 first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relays: Vec<RelayRecord>,
    /// Its directory (logs), relative to the output directory.
    pub dir: String,
}

impl RunRecord {
    /// A one-line summary for the console.
    pub fn one_line(&self) -> String {
        let g = self
            .goodput_mbps
            .map_or("-".into(), |g| format!("{g:.1} Mbit/s"));
        let mut s = format!(
            "{} n={} {} {} loss={} #{}: {} G={} N={:.2} MB C={:.1} cpu(s)={:.2}/{:.2}",
            self.tool,
            self.receivers,
            crate::units::fmt_size(self.size_bytes),
            self.rate,
            self.loss,
            self.repeat,
            self.status,
            g,
            self.overhead_bytes as f64 / 1e6,
            self.cost,
            self.cpu_sender_s.unwrap_or(0.0),
            self.cpu_receiver_s_mean.unwrap_or(0.0),
        );
        if let Some(t) = self.tool_seconds {
            let _ = write!(s, " own={:.1} ms", t * 1e3);
        }
        if !self.reasons.is_empty() {
            let _ = write!(s, " — {}", self.reasons.join("; "));
        }
        s
    }
}

/// Median, min and max of a sample.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

/// Median, min and max of the finite values of a sample; `None` if there are none.
pub(crate) fn spread(mut v: Vec<f64>) -> Option<Spread> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[v.len() - 1],
    })
}

/// One point: a tool at (receivers, size, rate, loss, MTU) over its repeats.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PointRecord {
    /// Tool name.
    pub tool: String,
    /// Tool kind.
    pub kind: String,
    /// Receivers.
    pub receivers: usize,
    /// Object size.
    pub size_bytes: u64,
    /// Link rate.
    pub rate: String,
    /// Loss.
    pub loss: f64,
    /// MTU.
    pub mtu: u32,
    /// Runs.
    pub runs: usize,
    /// Successful runs.
    pub successes: usize,
    /// Runs the tool could not start (with the reason in `reasons`).
    pub unavailable: usize,
    /// S in 0..1 (over runs that could start).
    pub success_rate: Option<f64>,
    /// G, Mbit/s.
    pub goodput_mbps: Option<Spread>,
    /// Seconds.
    pub seconds: Option<Spread>,
    /// N, bytes.
    pub overhead_bytes: Option<Spread>,
    /// C.
    pub cost: Option<Spread>,
    /// rmcast's control packets per data packet.
    pub control_per_data_packet: Option<Spread>,
    /// Receivers' packets per sender packet.
    pub feedback_per_data_packet: Option<Spread>,
    /// Sender CPU s/GB.
    pub cpu_sender_s_per_gb: Option<Spread>,
    /// Mean receiver CPU s/GB.
    pub cpu_receiver_s_per_gb: Option<Spread>,
    /// blast: mean per-receiver loss.
    #[serde(default)]
    pub loss_mean: Option<Spread>,
    /// blast: worst receiver's loss.
    #[serde(default)]
    pub loss_max: Option<Spread>,
    /// blast: achieved sending rate, datagrams/s.
    #[serde(default)]
    pub offered_pps: Option<Spread>,
    /// Bytes all hosts transmitted (symmetric: the paper's C).
    #[serde(default)]
    pub tx_bytes: Option<Spread>,
    /// Shaper drops over all runs (should be 0).
    pub shaper_drops: u64,
    /// Distinct failure reasons (first few).
    pub reasons: Vec<String>,
}

/// (tool, receivers, size, rate, loss, MTU): what makes runs repeats of one point.
type PointKey = (String, usize, u64, String, String, u32);

/// Groups runs into points and aggregates them.
pub fn points(runs: &[RunRecord]) -> Vec<PointRecord> {
    let mut groups: BTreeMap<PointKey, Vec<&RunRecord>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in runs {
        if !order.contains(&r.tool) {
            order.push(r.tool.clone());
        }
        let key = (
            r.tool.clone(),
            r.receivers,
            r.size_bytes,
            r.rate.clone(),
            format!("{}", r.loss),
            r.mtu,
        );
        groups.entry(key).or_default().push(r);
    }
    let mut out: Vec<PointRecord> = groups
        .into_values()
        .map(|rs| {
            let ok: Vec<&&RunRecord> = rs.iter().filter(|r| r.status == "ok").collect();
            let unavailable = rs.iter().filter(|r| r.status == "unavailable").count();
            let tried = rs.len() - unavailable;
            let col = |f: &dyn Fn(&RunRecord) -> Option<f64>| {
                spread(ok.iter().filter_map(|r| f(r)).collect())
            };
            let mut reasons: Vec<String> = Vec::new();
            for r in &rs {
                for why in &r.reasons {
                    if reasons.len() < 4 && !reasons.contains(why) {
                        reasons.push(why.clone());
                    }
                }
            }
            let r0 = rs[0];
            PointRecord {
                tool: r0.tool.clone(),
                kind: r0.kind.clone(),
                receivers: r0.receivers,
                size_bytes: r0.size_bytes,
                rate: r0.rate.clone(),
                loss: r0.loss,
                mtu: r0.mtu,
                runs: rs.len(),
                successes: ok.len(),
                unavailable,
                success_rate: (tried > 0).then(|| ok.len() as f64 / tried as f64),
                goodput_mbps: col(&|r| r.goodput_mbps),
                seconds: col(&|r| r.seconds),
                overhead_bytes: col(&|r| Some(r.overhead_bytes as f64)),
                cost: col(&|r| Some(r.cost)),
                control_per_data_packet: col(&|r| r.control_per_data_packet),
                feedback_per_data_packet: col(&|r| r.feedback_per_data_packet),
                cpu_sender_s_per_gb: col(&|r| r.cpu_sender_s_per_gb),
                cpu_receiver_s_per_gb: col(&|r| r.cpu_receiver_s_per_gb),
                loss_mean: col(&|r| r.loss_mean),
                loss_max: col(&|r| r.loss_max),
                offered_pps: col(&|r| r.offered_pps),
                tx_bytes: col(&|r| Some(r.tx_bytes_total as f64)),
                shaper_drops: rs.iter().map(|r| r.shaper_drops).sum(),
                reasons,
            }
        })
        .collect();
    // Tools in scenario order, then receivers, size.
    out.sort_by_key(|p| {
        (
            order
                .iter()
                .position(|t| *t == p.tool)
                .unwrap_or(usize::MAX),
            p.rate.clone(),
            p.receivers,
            p.size_bytes,
        )
    });
    out
}

/// Reads runs.json from an output directory.
pub fn load_runs(dir: &Path) -> Result<Vec<RunRecord>> {
    let text = std::fs::read_to_string(dir.join("runs.json"))?;
    Ok(serde_json::from_str(&text)?)
}

/// A CSV field, quoted when it holds a comma, a quote or a newline.
pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v:.6}"))
}

fn sp(x: Option<Spread>) -> [String; 3] {
    match x {
        Some(s) => [
            format!("{:.6}", s.median),
            format!("{:.6}", s.min),
            format!("{:.6}", s.max),
        ],
        None => [String::new(), String::new(), String::new()],
    }
}

/// Writes runs.json, runs.csv, points.json and points.csv.
pub fn write_all(dir: &Path, runs: &[RunRecord]) -> Result<()> {
    std::fs::write(dir.join("runs.json"), serde_json::to_string_pretty(runs)?)?;
    let mut csv = String::from(
        "seq,tool,kind,testbed,receivers,served_receivers,size_bytes,rate,loss,mtu,repeat,status,seconds,goodput_mbps,\
         tx_bytes_total,rx_bytes_total,overhead_bytes,cost,control_per_data_packet,feedback_per_data_packet,\
         retransmitted_packets,cpu_sender_s,cpu_sender_s_per_gb,cpu_receiver_s_mean,cpu_receiver_s_per_gb,\
         shaper_drops,loss_drops,loss_mean,loss_max,offered_pps,reasons,dir\n",
    );
    for r in runs {
        let row = [
            r.seq.to_string(),
            r.tool.clone(),
            r.kind.clone(),
            r.testbed.clone(),
            r.receivers.to_string(),
            r.served_receivers.to_string(),
            r.size_bytes.to_string(),
            r.rate.clone(),
            r.loss.to_string(),
            r.mtu.to_string(),
            r.repeat.to_string(),
            r.status.clone(),
            opt(r.seconds),
            opt(r.goodput_mbps),
            r.tx_bytes_total.to_string(),
            r.rx_bytes_total.to_string(),
            r.overhead_bytes.to_string(),
            format!("{:.6}", r.cost),
            opt(r.control_per_data_packet),
            opt(r.feedback_per_data_packet),
            r.retransmitted_packets
                .map_or(String::new(), |x| x.to_string()),
            opt(r.cpu_sender_s),
            opt(r.cpu_sender_s_per_gb),
            opt(r.cpu_receiver_s_mean),
            opt(r.cpu_receiver_s_per_gb),
            r.shaper_drops.to_string(),
            r.loss_drops.to_string(),
            opt(r.loss_mean),
            opt(r.loss_max),
            opt(r.offered_pps),
            r.reasons.join(" | "),
            r.dir.clone(),
        ];
        csv.push_str(
            &row.iter()
                .map(|f| csv_field(f))
                .collect::<Vec<_>>()
                .join(","),
        );
        csv.push('\n');
    }
    std::fs::write(dir.join("runs.csv"), csv)?;
    let pts = points(runs);
    std::fs::write(dir.join("points.json"), serde_json::to_string_pretty(&pts)?)?;
    let mut csv = String::from(
        "tool,kind,receivers,size_bytes,rate,loss,mtu,runs,successes,unavailable,success_rate,\
         goodput_mbps_median,goodput_mbps_min,goodput_mbps_max,seconds_median,seconds_min,seconds_max,\
         overhead_bytes_median,overhead_bytes_min,overhead_bytes_max,cost_median,cost_min,cost_max,\
         control_per_data_median,control_per_data_min,control_per_data_max,\
         feedback_per_data_median,feedback_per_data_min,feedback_per_data_max,\
         cpu_sender_s_per_gb_median,cpu_sender_s_per_gb_min,cpu_sender_s_per_gb_max,\
         cpu_receiver_s_per_gb_median,cpu_receiver_s_per_gb_min,cpu_receiver_s_per_gb_max,\
         loss_mean_median,loss_mean_min,loss_mean_max,loss_max_median,loss_max_min,loss_max_max,\
         offered_pps_median,offered_pps_min,offered_pps_max,shaper_drops,reasons\n",
    );
    for p in &pts {
        let mut row = vec![
            p.tool.clone(),
            p.kind.clone(),
            p.receivers.to_string(),
            p.size_bytes.to_string(),
            p.rate.clone(),
            p.loss.to_string(),
            p.mtu.to_string(),
            p.runs.to_string(),
            p.successes.to_string(),
            p.unavailable.to_string(),
            opt(p.success_rate),
        ];
        for s in [
            p.goodput_mbps,
            p.seconds,
            p.overhead_bytes,
            p.cost,
            p.control_per_data_packet,
            p.feedback_per_data_packet,
            p.cpu_sender_s_per_gb,
            p.cpu_receiver_s_per_gb,
            p.loss_mean,
            p.loss_max,
            p.offered_pps,
        ] {
            row.extend(sp(s));
        }
        row.push(p.shaper_drops.to_string());
        row.push(p.reasons.join(" | "));
        csv.push_str(
            &row.iter()
                .map(|f| csv_field(f))
                .collect::<Vec<_>>()
                .join(","),
        );
        csv.push('\n');
    }
    std::fs::write(dir.join("points.csv"), csv)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(tool: &str, n: usize, status: &str, g: Option<f64>) -> RunRecord {
        RunRecord {
            tool: tool.into(),
            receivers: n,
            size_bytes: 1000,
            rate: "100mbit".into(),
            status: status.into(),
            goodput_mbps: g,
            ..RunRecord::default()
        }
    }

    #[test]
    fn points_take_the_median_of_successful_runs_and_count_success() {
        let runs = vec![
            run("a", 1, "ok", Some(10.0)),
            run("a", 1, "ok", Some(30.0)),
            run("a", 1, "failed", None),
            run("a", 1, "ok", Some(20.0)),
            run("b", 1, "unavailable", None),
        ];
        let p = points(&runs);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].tool, "a");
        assert_eq!(p[0].success_rate, Some(0.75));
        assert_eq!(
            p[0].goodput_mbps,
            Some(Spread {
                median: 20.0,
                min: 10.0,
                max: 30.0
            })
        );
        assert_eq!(p[1].success_rate, None);
        assert_eq!(p[1].unavailable, 1);
    }

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
