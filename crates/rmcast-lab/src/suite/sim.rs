//! The simulator backend of a suite: rmcast's UDP protocols on
//! [`rmcast_sim`] and its TCP overlays on [`rmcast_sim::overlay`]
//! ([`super::sim_overlay`]), `seeds` seeds per point on up to
//! `available_parallelism` threads, medians over the seeds that passed
//! every invariant.

use super::points::SuitePoint;
use super::sender_flags::{apply_sender_flags, substitute};
use super::sim_overlay::{OverlayCase, overlay_case, overlay_shape};
use super::{Backend, Experiment, Metric, Preset, Series, SeriesKind, XKind, XValue};
use crate::scenario::metrics::{self, Spread};
use crate::signals;
use crate::units;
use rmcast::{ProtocolId, SenderConfig};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Whether `backend` can measure the series at all (its own `backends`;
/// for the simulator: one of rmcast's UDP protocols or TCP overlays; a
/// model series is the simulator's only).
pub fn series_runs_on(s: &Series, backend: Backend) -> bool {
    s.backends.as_ref().is_none_or(|b| b.contains(&backend))
        && match backend {
            Backend::Sim => sim_protocol(s).is_some() || sim_overlay(s),
            Backend::Lab => !s.model,
        }
}

/// Whether the series is a TCP overlay the simulator runs (or models).
fn sim_overlay(s: &Series) -> bool {
    s.kind == SeriesKind::Rmcast && overlay_shape(s).is_some()
}

/// rmcast's UDP protocols, the ones the simulator drives.
fn sim_protocol(s: &Series) -> Option<ProtocolId> {
    // Several senders run on the lab only.
    if s.kind != SeriesKind::Rmcast || s.senders.is_some_and(|k| k > 1) {
        return None;
    }
    Some(match s.protocol.as_deref().unwrap_or("nak-poll") {
        "ack" => ProtocolId::Ack,
        "nak-poll" => ProtocolId::NakPoll,
        "ring" => ProtocolId::Ring,
        "tree" => ProtocolId::Tree,
        _ => return None,
    })
}

/// The simulator scenario for a series at one x (seed 1).
pub fn sim_scenario(
    e: &Experiment,
    s: &Series,
    x: &XValue,
) -> Result<rmcast_sim::Scenario, String> {
    let protocol = sim_protocol(s).ok_or("lab only")?;
    let base = match e.preset {
        Preset::Fsu => rmcast_sim::Scenario::fsu_2004(),
        Preset::Modern => rmcast_sim::Scenario::default(),
    };
    let xk = e.x_kind();
    let receivers = match xk {
        XKind::Receivers => e.x_number(x)? as u16,
        _ => e.receivers.ok_or("no receivers")?,
    };
    let object_size = match xk {
        XKind::Size => x.bytes()?,
        _ => e.size_bytes().ok_or("no size")?,
    };
    let rate =
        units::parse_rate_opt(&e.rates[0])?.ok_or("the simulator needs a link rate, not `none`")?;
    let mut config = SenderConfig {
        protocol,
        ..SenderConfig::default()
    };
    if let Some(f) = s.rate_fraction {
        config.rate_bits_per_s = Some((rate as f64 * f) as u64);
    }
    let x = (xk == XKind::Param).then_some(x);
    apply_sender_flags(&substitute(&s.args, x), &mut config)?;
    config.receivers = receivers;
    Ok(rmcast_sim::Scenario {
        receivers,
        object_size,
        config,
        link_rate_bits_per_s: rate,
        mtu: e.mtu as usize,
        loss: if e.loss > 0.0 && e.loss_burst > 1.0 {
            rmcast_sim::LossModel::bursty(e.loss, e.loss_burst)
        } else if e.loss > 0.0 {
            rmcast_sim::LossModel::Bernoulli(e.loss)
        } else {
            rmcast_sim::LossModel::None
        },
        seed: 1,
        time_limit: Duration::from_secs_f64(e.max_run_s),
        ..base
    })
}

/// Bytes a datagram of `udp` payload bytes puts on the wire as the lab's
/// interface counters see it: IP packets (fragments) + 14-byte Ethernet headers.
fn l2_bytes(sc: &rmcast_sim::Scenario, udp: usize) -> u64 {
    (0..sc.fragments(udp))
        .map(|i| ((sc.fragment_ip_payload(udp, i) + 20).max(46) + 14) as u64)
        .sum()
}

/// rmcast's data header, bytes.
const DATA_HEADER: usize = 24;
/// A typical control datagram (ack, nak, poll), UDP payload bytes.
const CONTROL_BYTES: usize = 40;

/// One metric of a simulated run.
fn sim_metric(m: Metric, sc: &rmcast_sim::Scenario, r: &rmcast_sim::RunReport) -> Option<f64> {
    Some(match m {
        Metric::GoodputMbps => r.goodput_mbit_s,
        Metric::Seconds => r.seconds,
        Metric::LatencyMs => r.seconds * 1e3,
        Metric::SuccessRate => 1.0,
        Metric::ControlPerData => r.control_per_data,
        Metric::OverheadRatio => {
            // Estimated from the packet counts, in the lab's accounting.
            let ps = sc.config.packet_size;
            // Object bytes per data packet (shorter under FEC).
            let chunk = sc.config.payload_size() as u64;
            let k = r.data_packets.max(1);
            let last = sc.object_size.saturating_sub((k - 1) * chunk) as usize + DATA_HEADER;
            let data = (k - 1) * l2_bytes(sc, ps) + l2_bytes(sc, last.min(ps));
            // Parity packets are no longer than data packets.
            let rtx = (r.retransmitted_packets + r.sender.parity_packets) * l2_bytes(sc, ps);
            let control = (r.sender.control_sent + r.control_packets) * l2_bytes(sc, CONTROL_BYTES);
            (data + rtx + control) as f64 / sc.object_size as f64 - 1.0
        }
        Metric::Loss
        | Metric::LossMax
        | Metric::CpuSenderSPerGb
        | Metric::TSeconds
        | Metric::CostMb => return None,
    })
}

/// What the simulator runs for a point (seed 1).
#[derive(Clone, Debug)]
enum Case {
    /// A UDP protocol.
    Udp(Box<rmcast_sim::Scenario>),
    /// A TCP overlay, or its model.
    Overlay(OverlayCase),
}

/// A point the simulator runs: its series, x, and what to run.
type Cell = (String, XValue, Case);
/// One seed's outcome: the metric or why the run failed, and its wall-clock seconds.
type Outcome = (Result<f64, String>, f64);

/// Runs every sim point of an experiment, seeds in parallel.
pub fn run_sim(e: &Experiment, series: &[&Series], seeds: u32) -> Vec<SuitePoint> {
    let (cells, mut points) = sim_cells(e, series);
    let jobs: Vec<(usize, u64)> = (0..cells.len())
        .flat_map(|c| (1..=u64::from(seeds)).map(move |seed| (c, seed)))
        .collect();
    let results = run_jobs(e.metric, &cells, &jobs);
    for (c, cell) in cells.iter().enumerate() {
        let mine: Vec<&Outcome> = jobs
            .iter()
            .zip(&results)
            .filter(|((jc, _), _)| *jc == c)
            .filter_map(|(_, r)| r.as_ref())
            .collect();
        points.push(sim_point(e, series, seeds, cell, &mine));
    }
    points
}

/// The points the simulator can run, and an n/a or failed point for each
/// it cannot.
fn sim_cells(e: &Experiment, series: &[&Series]) -> (Vec<Cell>, Vec<SuitePoint>) {
    let xs = e.values_for(Backend::Sim);
    let mut points = Vec::new();
    // (series, x, scenario) for every point the simulator can run.
    let mut cells: Vec<Cell> = Vec::new();
    let unmodelled = matches!(
        e.metric,
        Metric::Loss
            | Metric::LossMax
            | Metric::CpuSenderSPerGb
            | Metric::TSeconds
            | Metric::CostMb
    );
    for s in series {
        for x in xs {
            let pt = SuitePoint::new(e, Backend::Sim, &s.name, x);
            if sim_protocol(s).is_none() && !sim_overlay(s) {
                points.push(pt.not_applicable(
                    "lab only: the simulator runs rmcast's UDP protocols (ack, nak-poll, ring, tree) and TCP overlays",
                ));
            } else if unmodelled {
                points.push(pt.not_applicable(format!(
                    "the simulator does not model `{}`",
                    e.metric.name()
                )));
            } else {
                let case = if sim_overlay(s) {
                    overlay_case(e, s, x).map(Case::Overlay)
                } else {
                    sim_scenario(e, s, x).map(|sc| Case::Udp(Box::new(sc)))
                };
                match case {
                    Ok(case) => cells.push((s.name.clone(), x.clone(), case)),
                    Err(why) => points.push(pt.failed(why)),
                }
            }
        }
    }
    (cells, points)
}

/// Runs every (cell, seed) job on up to `available_parallelism` threads;
/// a job an interrupt left out stays `None`.
fn run_jobs(metric: Metric, cells: &[Cell], jobs: &[(usize, u64)]) -> Vec<Option<Outcome>> {
    let results: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; jobs.len()]);
    let next = AtomicUsize::new(0);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = cores.min(jobs.len()).max(1);
    // Fewer jobs than cores: each run reads a large group's datagrams on
    // its share of the rest (the same run on any number of threads).
    let per_run = (cores / threads).max(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    if signals::interrupted() {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(c, seed)) = jobs.get(i) else { break };
                    let t = Instant::now();
                    let out = match &cells[c].2 {
                        Case::Udp(sc) => {
                            let mut sc = (**sc).clone();
                            sc.seed = seed;
                            match rmcast_sim::run_with_threads(&sc, per_run) {
                                Ok(r) => sim_metric(metric, &sc, &r)
                                    .ok_or_else(|| format!("`{}` not modelled", metric.name())),
                                Err(err) => {
                                    Err(err.to_string().lines().next().unwrap_or("").to_string())
                                }
                            }
                        }
                        Case::Overlay(o) => o.run(metric, seed),
                    };
                    let wall = t.elapsed().as_secs_f64();
                    results.lock().expect("no panic holds the lock")[i] = Some((out, wall));
                }
            });
        }
    });
    results.into_inner().expect("threads joined")
}

/// One cell's point from its seeds' outcomes (`mine`): the median over
/// the seeds that passed (success_rate: the share that passed).
fn sim_point(
    e: &Experiment,
    series: &[&Series],
    seeds: u32,
    (series_name, x, sc): &Cell,
    mine: &[&Outcome],
) -> SuitePoint {
    let series_of = |name: &str| series.iter().find(|s| s.name == name);
    let mut pt = SuitePoint::new(e, Backend::Sim, series_name, x);
    pt.runs = mine.len();
    pt.wall_s = Some(mine.iter().map(|r| r.1).sum());
    let values: Vec<f64> = mine
        .iter()
        .filter_map(|r| r.0.as_ref().ok().copied())
        .collect();
    let errors: Vec<String> = mine
        .iter()
        .filter_map(|r| r.0.as_ref().err().cloned())
        .collect();
    pt.n = values.len();
    if e.metric == Metric::SuccessRate && !mine.is_empty() {
        let rate = values.len() as f64 / mine.len() as f64;
        pt = pt.with_spread(Some(Spread {
            median: rate,
            min: rate,
            max: rate,
        }));
        pt.n = mine.len();
        pt.reasons = errors;
    } else {
        pt = pt.with_spread(metrics::spread(values));
        if (mine.len() as u64) < u64::from(seeds) {
            pt = pt.failed("interrupted before every seed ran");
        }
        for err in errors {
            pt = pt.failed(err);
        }
    }
    if series_of(series_name).is_some_and(|s| !s.recv_args.is_empty()) {
        pt.reasons
            .push("note: recv_args are not simulated (ignored)".into());
    }
    eprintln!(
        "rmcast-lab: sim {} {} x={} N={}: {} {} ({} of {} seeds ok, {:.1} s)",
        e.id,
        series_name,
        x.text(),
        match sc {
            Case::Udp(sc) => sc.receivers,
            Case::Overlay(OverlayCase::Run(sc)) => sc.nodes,
            Case::Overlay(OverlayCase::Model(m)) => m.nodes,
        },
        e.metric.name(),
        pt.y.map_or("-".into(), |y| format!("{y:.4}")),
        pt.n,
        pt.runs,
        pt.wall_s.unwrap_or(0.0)
    );
    pt
}
