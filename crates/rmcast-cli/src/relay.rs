//! `rmcast relay`: forward a session from one multicast group to another.

use crate::args::{CommonArgs, KeyArgs};
use crate::report;
use anyhow::{Context, Result, bail};
use clap::Args;
use rmcast::HumanDuration;
use serde_json::json;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// `rmcast relay`.
#[derive(Args, Debug)]
#[command(after_help = "HOW IT WORKS:
  The relay joins the session announced on --from as one receiver (count it in the
  sender's --receivers), announces the same object on --to to its own --receivers,
  and sends each byte on as soon as it holds it in order; it repairs its own group
  from its copy. Its confirmation upstream waits for its group, so the sender's
  success means every receiver behind every relay verified; a failure names the
  relay and the receivers behind it that failed. Relays cascade: a relay's group
  may hold another relay.

EXAMPLES:
  # segment A (10.1.0.0/24) holds the sender and 10 receivers; the relay host
  # has 10.1.0.9 on A and 10.2.0.9 on segment B, where 10 receivers wait:
  rmcast send data.bin --receivers 11 --group 239.77.0.1:7700 --iface 10.1.0.1 --key g.key
  rmcast relay --from 239.77.0.1:7700 --from-iface 10.1.0.9 \\
               --to 239.77.0.2:7700 --to-iface 10.2.0.9 --receivers 10 --key g.key
  rmcast recv --group 239.77.0.2:7700 --iface 10.2.0.21 --out /data --key g.key")]
pub struct RelayArgs {
    /// The multicast group and port of the session to forward (upstream).
    #[arg(long, value_name = "ADDR:PORT")]
    pub from: SocketAddrV4,
    /// Local interface address on the upstream segment.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub from_iface: Ipv4Addr,
    /// The multicast group and port to forward it into (downstream); not
    /// --from.
    #[arg(long, value_name = "ADDR:PORT")]
    pub to: SocketAddrV4,
    /// Local interface address on the downstream segment.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub to_iface: Ipv4Addr,
    /// Receivers downstream to wait for (another relay counts as one).
    #[arg(long, short = 'n', value_parser = clap::value_parser!(u16).range(1..=65520))]
    pub receivers: u16,
    /// Give up on the downstream receivers that have not registered this
    /// long after the upstream offer (see --min-receivers).
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub wait: HumanDuration,
    /// Forward anyway when --wait runs out with at least M downstream
    /// receivers registered; the relay then reports failure upstream,
    /// naming how many never came.
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u16).range(1..=65520))]
    pub min_receivers: Option<u16>,
    /// Name shown in the upstream sender's report [default: HOST:PID].
    #[arg(long)]
    pub name: Option<String>,
    /// Also keep a verified copy in DIR, as `recv` stores it (needed to
    /// forward a directory tree). Without it the relay holds the object in
    /// memory only.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Give up if no session is announced upstream within this time
    /// [default: wait forever].
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<HumanDuration>,
    /// Give up when the upstream sender is silent this long during a transfer.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub sender_timeout: HumanDuration,
    #[command(flatten)]
    pub keys: KeyArgs,
    /// The downstream session's settings, as `rmcast send` takes them
    /// (--group and --iface excepted: --to and --to-iface).
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs `rmcast relay`; `true` when the relay's copy and every receiver
/// behind it verified.
pub fn run(a: RelayArgs, cancel: Arc<AtomicBool>) -> Result<bool> {
    if a.common.given("group") || a.common.given("iface") {
        bail!(
            "a relay's downstream group is --to, on --to-iface; --group and --iface do not apply"
        );
    }
    if a.common.overlay().is_some() {
        bail!(
            "a relay forwards over UDP multicast; --protocol {:?} is a TCP overlay, which \
             needs no relay (it crosses segments by itself)",
            a.common.protocol
        );
    }
    if a.from == a.to {
        bail!(
            "--from and --to are both {}: a relay forwards into another group (another \
             address or port)",
            a.from
        );
    }
    let key = crate::session_key(&a.keys, "relay")?;
    let mut down = crate::send_config(&a.common, cancel.clone())?;
    down.group = a.to;
    down.iface = a.to_iface;
    down.proto.group_key = key.clone();
    down.proto.receivers = a.receivers;
    down.proto.min_receivers = a.min_receivers;
    down.proto.join_wait = a.wait.0;
    down.on_event = crate::event_hook(None, a.common.explain);
    let mut up = rmcast::RecvConfig {
        group: a.from,
        iface: a.from_iface,
        sender_timeout: a.sender_timeout.0,
        listen_timeout: a.timeout.map(|d| d.0),
        cancel: Some(cancel),
        group_key: key,
        ..rmcast::RecvConfig::default()
    };
    if let Some(name) = a.name {
        up.name = name;
    }
    if let Some(out) = &a.out {
        up.out_dir = out.clone();
    }
    let cfg = rmcast::RelayConfig {
        upstream: up,
        keep: a.out.is_some(),
        downstream: down,
    };
    let bar = crate::progress_bar(a.common.json, "relay");
    let mut progress = crate::progress_fn(&bar);
    let result = rmcast::relay(&cfg, Some(&mut progress));
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let report = match result {
        Ok(r) => r,
        Err(e) if a.common.json => {
            println!("{}", json!({ "ok": false, "error": e.to_string() }));
            return Ok(false);
        }
        Err(e) => return Err(e).context("relaying"),
    };
    print(&report, a.common.json, &cfg);
    Ok(report.ok)
}

/// The relay's report: one JSON object (`ok`, `error`, `upstream` as
/// `recv --json`, `downstream` as `send --json`), or two lines on stderr.
fn print(r: &rmcast::RelayReport, json: bool, cfg: &rmcast::RelayConfig) {
    if json {
        let v = json!({
            "ok": r.ok,
            "error": r.error,
            "from": cfg.upstream.group.to_string(),
            "to": cfg.downstream.group.to_string(),
            "upstream": report::recv_json(&r.upstream),
            "downstream": r.downstream.as_ref().map(|d| report::send_json(d, None)),
        });
        println!("{v}");
        return;
    }
    eprintln!(
        "rmcast relay: from {}: {}",
        cfg.upstream.group,
        report::recv_line(&r.upstream)
    );
    match &r.downstream {
        Some(d) => {
            eprintln!("rmcast relay: to {}:", cfg.downstream.group);
            report::print_send(d, false, None);
        }
        None => eprintln!("rmcast relay: to {}: nothing sent", cfg.downstream.group),
    }
    if let Some(e) = &r.error {
        eprintln!("rmcast relay: failed: {e}");
    }
}
