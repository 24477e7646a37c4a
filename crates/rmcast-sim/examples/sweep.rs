//! Parameter sweep over the simulator: every combination of the listed
//! values, a few seeds each, one row per combination with the median
//! goodput, sorted best first. Goodput is object bits over the time from
//! the start (session setup included) until the sender holds every
//! receiver's verdict; `to_finish_mbit` also counts the closing Byes.
//!
//! ```text
//! cargo run --release -p rmcast-sim --example sweep -- \
//!     --protocol ack,nak-poll --packet-size 1472,8192,50000 --window 2,5,20,50 \
//!     --poll-interval-pct 85 --receivers 30 --size 2MB --rate 100mbit \
//!     --loss 0 --seeds 3 --preset fsu
//! ```
//!
//! Run with `--help` for every option. A combination the engine refuses (a
//! poll interval above the window, a ring window under N + 1, ...) or a run
//! that fails an invariant prints its error in its row; the sweep goes on.

use rmcast_proto::{ProtocolId, Repair, SenderConfig, TreeShape};
use rmcast_sim::{LossModel, RunReport, Scenario};
use rmcast_wire::FecShape;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const HELP: &str = "\
sweep: run a grid of rmcast-sim scenarios and rank them by goodput

Every list is comma-separated; the grid is their cross product.
  --protocol LIST          ack, nak-poll, ring, tree            [nak-poll]
  --packet-size LIST       UDP payload bytes per data packet, 25..=65507
                           (suffixes k/KB = 1000, KiB = 1024)   [1472]
  --window LIST            packets                               [128]
  --poll-interval-pct LIST nak-poll: poll every max(1, window*pct/100) packets
                           [the sender's default: 85 % of the window, less
                           an interleaved FEC group]
  --poll-interval LIST     nak-poll: absolute poll intervals (instead of pct)
  --tree-height LIST       tree: chain length H of the flat tree [6]
  --tree-shape LIST        tree: flat, binary                    [flat]
  --repair LIST            selective, gbn                        [selective]
  --fec LIST               off, K:P or K:P:D (K data packets per block, P
                           proactive parity packets, D blocks interleaved;
                           repair by parity on demand) [off]
  --suppress LIST          min. time between two sends of one packet on NAKs,
                           counted from its last send (us, ms, s) [5ms]
  --rto LIST               initial retransmission timeout (us, ms, s) [50ms]
  --receivers LIST         N                                     [30]
  --size LIST              object size (B, KB, MB = 10^3, 10^6; KiB, MiB) [2MB]
  --rate LIST              link rate (bit/s; suffixes kbit, mbit, gbit) [100mbit]
  --loss LIST              loss per data frame on receiver ports [0]
  --burst LIST             mean length of a loss burst in frames: 1 loses each
                           frame on its own (Bernoulli), more in Gilbert-Elliott
                           bursts of that mean length at the same mean loss [1]
  --control-loss LIST      loss per frame on the sender's port: feedback, offer
                           answers and verdicts, 0 <= x < 1 [0]
  --mtu LIST               bytes                                 [1500]
  --preset NAME            fsu (Pentium III cluster, Scenario::fsu_2004) or modern [modern]
  --seeds N                seeds per combination (1..=N); goodput is their median [3]
  --first-seed S           start the seeds at S instead (S..S+N), to rerun one [1]
  --jobs N                 runs at once                          [all cores]
  --threads N              threads each run reads a large group's datagrams on
                           (256 receivers or more; the same results on any
                           number)                        [cores / jobs, at least 1]
  --top N                  print only the best N rows
  --format FMT             md or csv                             [md]
";

#[derive(Clone, Debug)]
struct Grid {
    protocols: Vec<ProtocolId>,
    packet_sizes: Vec<usize>,
    windows: Vec<u32>,
    poll_pcts: Vec<u32>,
    polls: Vec<u32>,
    heights: Vec<u16>,
    shapes: Vec<TreeShape>,
    repairs: Vec<Repair>,
    fecs: Vec<Option<FecShape>>,
    suppress: Vec<Duration>,
    rtos: Vec<Duration>,
    receivers: Vec<u16>,
    sizes: Vec<u64>,
    rates: Vec<u64>,
    losses: Vec<f64>,
    bursts: Vec<f64>,
    control_losses: Vec<f64>,
    mtus: Vec<usize>,
    preset: String,
    seeds: u64,
    /// The first seed (`--first-seed`).
    first_seed: u64,
    jobs: usize,
    /// Threads per run; `None`: the cores shared among the jobs.
    threads: Option<usize>,
    top: Option<usize>,
    csv: bool,
}

impl Grid {
    /// Threads per run: `--threads`, else the machine's shared among the
    /// jobs (a large group's run reads its datagrams on them; the same run
    /// on any number).
    fn run_threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            (cores / self.jobs.max(1)).max(1)
        })
    }
}

/// One combination of the grid.
#[derive(Clone, Debug)]
struct Cell {
    protocol: ProtocolId,
    packet_size: usize,
    window: u32,
    /// Nak-poll only.
    poll: Option<u32>,
    /// Tree only.
    tree: Option<(u16, TreeShape)>,
    repair: Repair,
    fec: Option<FecShape>,
    suppress: Duration,
    rto: Duration,
    receivers: u16,
    size: u64,
    rate: u64,
    loss: f64,
    burst: f64,
    control_loss: f64,
    mtu: usize,
}

struct Row {
    cell: Cell,
    /// One per seed.
    runs: Vec<Result<RunReport, String>>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let grid = match parse(&args) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("sweep: {e}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    let cells = cells(&grid);
    let started = std::time::Instant::now();
    eprintln!(
        "sweep: {} combinations × {} seeds, preset {}, {} runs at once, {} threads each",
        cells.len(),
        grid.seeds,
        grid.preset,
        grid.jobs,
        grid.run_threads()
    );
    let mut rows = run_all(&grid, cells);
    rows.sort_by(|a, b| {
        let (ga, gb) = (median_goodput(a), median_goodput(b));
        gb.partial_cmp(&ga).unwrap_or(std::cmp::Ordering::Equal)
    });
    let shown = grid.top.unwrap_or(rows.len()).min(rows.len());
    print!("{}", table(&rows[..shown], grid.csv));
    eprintln!("sweep: done in {:.1} s", started.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}

fn run_all(grid: &Grid, cells: Vec<Cell>) -> Vec<Row> {
    let next = AtomicUsize::new(0);
    let rows: Mutex<Vec<Option<Row>>> = Mutex::new((0..cells.len()).map(|_| None).collect());
    let threads = grid.run_threads();
    std::thread::scope(|scope| {
        for _ in 0..grid.jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(cell) = cells.get(i) else { break };
                    let runs = (grid.first_seed..grid.first_seed + grid.seeds)
                        .map(|seed| {
                            rmcast_sim::run_with_threads(&scenario(grid, cell, seed), threads)
                                .map_err(|e| first_line(&e.to_string()))
                        })
                        .collect();
                    rows.lock().expect("no panics while holding the lock")[i] = Some(Row {
                        cell: cell.clone(),
                        runs,
                    });
                }
            });
        }
    });
    rows.into_inner()
        .expect("threads joined")
        .into_iter()
        .map(|r| r.expect("every cell ran"))
        .collect()
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

fn scenario(grid: &Grid, cell: &Cell, seed: u64) -> Scenario {
    let base = if grid.preset == "fsu" {
        Scenario::fsu_2004()
    } else {
        Scenario::default()
    };
    let mut config = SenderConfig {
        protocol: cell.protocol,
        packet_size: cell.packet_size,
        window: cell.window,
        poll_interval: cell.poll,
        repair: cell.repair,
        fec: cell.fec,
        suppress: cell.suppress,
        rto: cell.rto,
        ..SenderConfig::default()
    };
    if let Some((height, shape)) = cell.tree {
        config.tree_height = height;
        config.tree_shape = shape;
    }
    Scenario {
        receivers: cell.receivers,
        object_size: cell.size,
        config,
        link_rate_bits_per_s: cell.rate,
        mtu: cell.mtu,
        loss: if cell.loss <= 0.0 {
            LossModel::None
        } else if cell.burst > 1.0 {
            LossModel::bursty(cell.loss, cell.burst)
        } else {
            LossModel::Bernoulli(cell.loss)
        },
        control_loss: cell.control_loss,
        seed,
        // A stuck cell should fail fast, not stall the sweep.
        time_limit: std::time::Duration::from_secs(120),
        ..base
    }
}

fn cells(g: &Grid) -> Vec<Cell> {
    let mut out = Vec::new();
    for &protocol in &g.protocols {
        for &packet_size in &g.packet_sizes {
            for &window in &g.windows {
                let polls: Vec<Option<u32>> = if protocol != ProtocolId::NakPoll {
                    vec![None]
                } else if !g.polls.is_empty() {
                    g.polls.iter().map(|&p| Some(p)).collect()
                } else if g.poll_pcts.is_empty() {
                    // The sender's own default (85 % of the window, less
                    // an interleaved FEC group).
                    vec![None]
                } else {
                    let mut v: Vec<Option<u32>> = g
                        .poll_pcts
                        .iter()
                        .map(|&pct| Some((window * pct / 100).max(1)))
                        .collect();
                    v.dedup();
                    v
                };
                let trees: Vec<Option<(u16, TreeShape)>> = if protocol == ProtocolId::Tree {
                    g.shapes
                        .iter()
                        .flat_map(|&s| g.heights.iter().map(move |&h| Some((h, s))))
                        .collect()
                } else {
                    vec![None]
                };
                for &poll in &polls {
                    for &tree in &trees {
                        for (&repair, &suppress, &rto) in g
                            .repairs
                            .iter()
                            .flat_map(|r| g.suppress.iter().map(move |s| (r, s)))
                            .flat_map(|(r, s)| g.rtos.iter().map(move |t| (r, s, t)))
                        {
                            for &fec in &g.fecs {
                                for &receivers in &g.receivers {
                                    for &size in &g.sizes {
                                        for &rate in &g.rates {
                                            for (&loss, &burst, &control_loss) in g
                                                .losses
                                                .iter()
                                                .flat_map(|l| g.bursts.iter().map(move |b| (l, b)))
                                                .flat_map(|(l, b)| {
                                                    g.control_losses.iter().map(move |c| (l, b, c))
                                                })
                                            {
                                                for &mtu in &g.mtus {
                                                    out.push(Cell {
                                                        protocol,
                                                        packet_size,
                                                        window,
                                                        poll,
                                                        tree,
                                                        repair,
                                                        fec,
                                                        suppress,
                                                        rto,
                                                        receivers,
                                                        size,
                                                        rate,
                                                        loss,
                                                        burst,
                                                        control_loss,
                                                        mtu,
                                                    });
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Median goodput over the seeds, or −1 when any seed failed (sorted last).
fn median_goodput(row: &Row) -> f64 {
    if row.runs.iter().any(Result::is_err) {
        return -1.0;
    }
    median(ok_runs(row).map(verdict_goodput).collect()).unwrap_or(-1.0)
}

/// Object bits over the time until the sender held every receiver's
/// verdict (setup included, the closing Byes not): the paper's measure,
/// from the start until every receiver has acknowledged the whole message.
fn verdict_goodput(r: &RunReport) -> f64 {
    r.goodput_mbit_s * r.seconds / r.verdicts_seconds.max(1e-12)
}

fn ok_runs(row: &Row) -> impl Iterator<Item = &RunReport> {
    row.runs.iter().filter_map(|r| r.as_ref().ok())
}

/// The first seed's non-zero drop counters, e.g. `port 12 sock 3`.
fn drops(r: &RunReport) -> String {
    let d = &r.drops;
    let mut out = Vec::new();
    for (name, n) in [
        ("uplink", d.uplink_overflow),
        ("port", d.port_overflow),
        ("sock", d.socket_overflow),
        ("data", d.data_loss),
        ("frag", d.fragment_loss),
        ("ctl", d.control_loss),
    ] {
        if n > 0 {
            out.push(format!("{name} {n}"));
        }
    }
    out.join(" ")
}

fn protocol_name(p: ProtocolId) -> &'static str {
    match p {
        ProtocolId::Ack => "ack",
        ProtocolId::NakPoll => "nak-poll",
        ProtocolId::Ring => "ring",
        ProtocolId::Tree => "tree",
    }
}

/// Nak-poll's packets between polls in cell `c`: as given, or the
/// sender's default for its window and FEC.
fn effective_poll(c: &Cell) -> Option<u32> {
    let config = SenderConfig {
        protocol: c.protocol,
        window: c.window,
        poll_interval: c.poll,
        fec: c.fec,
        ..SenderConfig::default()
    };
    match config.policy() {
        Ok(rmcast_proto::FeedbackPolicy::NakPoll { poll_interval }) => Some(poll_interval),
        _ => None,
    }
}

fn table(rows: &[Row], csv: bool) -> String {
    let header = [
        "rank",
        "protocol",
        "packet",
        "window",
        "poll",
        "tree",
        "repair",
        "fec",
        "suppress_ms",
        "rto_ms",
        "N",
        "size",
        "rate_mbit",
        "loss",
        "burst",
        "ctl_loss",
        "mtu",
        "goodput_mbit",
        "min",
        "max",
        "to_finish_mbit",
        "ctl_per_data",
        "rtx",
        "parity",
        "fb_per_data",
        "acks",
        "naks",
        "timeouts",
        "frag_loss",
        "drops",
        "error",
    ];
    let mut out = String::new();
    let sep = if csv { "," } else { " | " };
    let line = |out: &mut String, cols: &[String]| {
        if csv {
            let _ = writeln!(out, "{}", cols.join(sep));
        } else {
            let _ = writeln!(out, "| {} |", cols.join(sep));
        }
    };
    line(
        &mut out,
        &header.iter().map(|s| (*s).to_string()).collect::<Vec<_>>(),
    );
    if !csv {
        line(
            &mut out,
            &header.iter().map(|_| "---".to_string()).collect::<Vec<_>>(),
        );
    }
    for (i, row) in rows.iter().enumerate() {
        let c = &row.cell;
        let goodputs: Vec<f64> = ok_runs(row).map(verdict_goodput).collect();
        let f = |x: Option<f64>, digits: usize| x.map_or("-".into(), |v| format!("{v:.digits$}"));
        let med = |g: &dyn Fn(&RunReport) -> f64| median(ok_runs(row).map(g).collect());
        let error = row
            .runs
            .iter()
            .enumerate()
            .find_map(|(s, r)| r.as_ref().err().map(|e| format!("seed {}: {e}", s + 1)))
            .unwrap_or_default();
        let error = if csv {
            format!("\"{}\"", error.replace('"', "'"))
        } else {
            error.replace('|', "/")
        };
        line(
            &mut out,
            &[
                (i + 1).to_string(),
                protocol_name(c.protocol).into(),
                c.packet_size.to_string(),
                c.window.to_string(),
                effective_poll(c).map_or("-".into(), |p| p.to_string()),
                c.tree.map_or("-".into(), |(h, s)| match s {
                    TreeShape::Flat => format!("H={h}"),
                    TreeShape::Binary => "binary".into(),
                }),
                match c.repair {
                    Repair::GoBackN => "gbn".into(),
                    Repair::Selective => "selective".into(),
                },
                c.fec.map_or("off".into(), |f| f.setting()),
                format!("{}", c.suppress.as_secs_f64() * 1e3),
                format!("{}", c.rto.as_secs_f64() * 1e3),
                c.receivers.to_string(),
                c.size.to_string(),
                format!("{}", c.rate as f64 / 1e6),
                c.loss.to_string(),
                c.burst.to_string(),
                c.control_loss.to_string(),
                c.mtu.to_string(),
                f(median(goodputs.clone()), 1),
                f(goodputs.iter().copied().reduce(f64::min), 1),
                f(goodputs.iter().copied().reduce(f64::max), 1),
                f(med(&|r| r.goodput_mbit_s), 1),
                f(med(&|r| r.control_per_data), 3),
                f(med(&|r| r.retransmitted_packets as f64), 0),
                f(med(&|r| r.sender.parity_packets as f64), 0),
                f(med(&|r| r.feedback_per_data), 3),
                f(med(&|r| r.sender.acks as f64), 0),
                f(med(&|r| r.sender.naks as f64), 0),
                f(med(&|r| r.sender.timeouts as f64), 0),
                f(med(&|r| r.drops.fragment_loss as f64), 0),
                ok_runs(row).next().map(drops).unwrap_or_default(),
                error,
            ],
        );
    }
    out
}

fn parse(args: &[String]) -> Result<Grid, String> {
    let mut g = Grid {
        protocols: vec![ProtocolId::NakPoll],
        packet_sizes: vec![1472],
        windows: vec![128],
        poll_pcts: Vec::new(),
        polls: Vec::new(),
        heights: vec![6],
        shapes: vec![TreeShape::Flat],
        repairs: vec![Repair::Selective],
        fecs: vec![None],
        suppress: vec![SenderConfig::default().suppress],
        rtos: vec![SenderConfig::default().rto],
        receivers: vec![30],
        sizes: vec![2_000_000],
        rates: vec![100_000_000],
        losses: vec![0.0],
        bursts: vec![1.0],
        control_losses: vec![0.0],
        mtus: vec![1500],
        preset: "modern".into(),
        seeds: 3,
        first_seed: 1,
        jobs: std::thread::available_parallelism().map_or(1, usize::from),
        threads: None,
        top: None,
        csv: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (flag.as_str(), None),
        };
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))?,
        };
        let v = value.as_str();
        match flag {
            "--protocol" => g.protocols = list(v, parse_protocol)?,
            "--packet-size" => {
                g.packet_sizes = list(v, |s| parse_bytes(s).map(|b| b as usize))?;
            }
            "--window" => g.windows = list(v, parse_num)?,
            "--poll-interval-pct" => g.poll_pcts = list(v, parse_num)?,
            "--poll-interval" => g.polls = list(v, parse_num)?,
            "--tree-height" => g.heights = list(v, parse_num)?,
            "--tree-shape" => g.shapes = list(v, parse_shape)?,
            "--repair" => g.repairs = list(v, parse_repair)?,
            "--fec" => g.fecs = list(v, parse_fec)?,
            "--suppress" => g.suppress = list(v, parse_duration)?,
            "--rto" => g.rtos = list(v, parse_duration)?,
            "--receivers" => g.receivers = list(v, parse_num)?,
            "--size" => g.sizes = list(v, parse_bytes)?,
            "--rate" => g.rates = list(v, parse_rate)?,
            "--loss" => g.losses = list(v, parse_num)?,
            "--burst" => {
                g.bursts = list(v, parse_num)?;
                if g.bursts.iter().any(|&b: &f64| !(b >= 1.0 && b.is_finite())) {
                    return Err(format!("--burst {v}: a mean burst length is at least 1"));
                }
            }
            "--control-loss" => {
                g.control_losses = list(v, parse_num)?;
                if g.control_losses
                    .iter()
                    .any(|&c: &f64| !(0.0..1.0).contains(&c))
                {
                    return Err(format!(
                        "--control-loss {v}: a loss rate is at least 0 and below 1"
                    ));
                }
            }
            "--mtu" => g.mtus = list(v, parse_num)?,
            "--preset" => {
                if v != "fsu" && v != "modern" {
                    return Err(format!("unknown preset {v:?} (fsu, modern)"));
                }
                g.preset = v.into();
            }
            "--seeds" => g.seeds = parse_num(v)?,
            "--jobs" => g.jobs = parse_num(v)?,
            "--threads" => match parse_num::<usize>(v)? {
                0 => return Err("--threads must be at least 1".into()),
                n => g.threads = Some(n),
            },
            "--top" => g.top = Some(parse_num(v)?),
            "--first-seed" => g.first_seed = parse_num(v)?,
            "--format" => match v {
                "md" | "markdown" => g.csv = false,
                "csv" => g.csv = true,
                _ => return Err(format!("unknown format {v:?} (md, csv)")),
            },
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if g.seeds == 0 {
        return Err("--seeds must be at least 1".into());
    }
    if g.first_seed.checked_add(g.seeds).is_none() {
        return Err("--first-seed plus --seeds must stay within 64 bits".into());
    }
    Ok(g)
}

fn list<T>(v: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    let out: Vec<T> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(f)
        .collect::<Result<_, _>>()?;
    if out.is_empty() {
        return Err(format!("empty list {v:?}"));
    }
    Ok(out)
}

fn parse_num<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("not a number: {s:?}"))
}

fn parse_protocol(s: &str) -> Result<ProtocolId, String> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "ack" => ProtocolId::Ack,
        "nak-poll" | "nak" | "nakpoll" | "nak_poll" => ProtocolId::NakPoll,
        "ring" => ProtocolId::Ring,
        "tree" => ProtocolId::Tree,
        _ => {
            return Err(format!(
                "unknown protocol {s:?} (ack, nak-poll, ring, tree)"
            ));
        }
    })
}

fn parse_shape(s: &str) -> Result<TreeShape, String> {
    match s {
        "flat" => Ok(TreeShape::Flat),
        "binary" => Ok(TreeShape::Binary),
        _ => Err(format!("unknown tree shape {s:?} (flat, binary)")),
    }
}

fn parse_fec(s: &str) -> Result<Option<FecShape>, String> {
    FecShape::from_setting(s).map_err(|e| format!("--fec: {e}"))
}

fn parse_repair(s: &str) -> Result<Repair, String> {
    match s {
        "selective" | "sr" => Ok(Repair::Selective),
        "gbn" | "go-back-n" => Ok(Repair::GoBackN),
        _ => Err(format!("unknown repair {s:?} (selective, gbn)")),
    }
}

/// `2MB` = 2·10^6, `2MiB` = 2·2^20, `8k`/`8KB` = 8000, `8KiB` = 8192.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(split);
    let mult: f64 = match unit.trim() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1048576.0,
        "g" | "gb" => 1e9,
        "gib" => 1073741824.0,
        u => return Err(format!("unknown size unit {u:?} in {s:?}")),
    };
    let n: f64 = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
    Ok((n * mult).round() as u64)
}

/// `500us`, `5ms`, `0.5ms`, `1s` (a plain number is milliseconds).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let lower = s.to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(split);
    let scale: f64 = match unit.trim() {
        "us" | "µs" => 1e-6,
        "" | "ms" => 1e-3,
        "s" => 1.0,
        u => return Err(format!("unknown time unit {u:?} in {s:?}")),
    };
    let n: f64 = num.parse().map_err(|_| format!("not a duration: {s:?}"))?;
    Ok(Duration::from_secs_f64(n * scale))
}

/// `100mbit`, `1gbit`, `512kbit` or plain bits per second.
fn parse_rate(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(split);
    let mult: f64 = match unit.trim().trim_end_matches("/s").trim_end_matches("ps") {
        "" | "bit" | "b" => 1.0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        u => return Err(format!("unknown rate unit {u:?} in {s:?}")),
    };
    let n: f64 = num.parse().map_err(|_| format!("not a rate: {s:?}"))?;
    Ok((n * mult).round() as u64)
}
