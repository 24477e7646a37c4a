//! Hybrid sessions on a LAN where some receivers' networks drop multicast
//! (an nftables rule in their namespaces drops 224.0.0.0/4): one plain
//! `rmcast send` (auto, with the lobby it opens by itself on a LAN; the
//! receivers run `recv --sender HOST`) serves the others over multicast
//! and them over a TCP overlay, every copy byte-exact; with no multicast at all it is a TCP
//! overlay about as fast as `tcp-chain` run by hand.

use super::process::SLACK;
use super::{Ctx, Lan, P, Setup, secs};
use crate::procs::Exit;
use anyhow::{Result, ensure};
use std::time::{Duration, Instant};

/// The scenario: 30 receivers, every third one deaf to the group.
/// 4 MB; 40 Mbit/s per host, the multicast half paced at 20 so the TCP
/// half has the rest of the sender's link.
pub(super) fn some_deaf(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let setup = Setup {
        receivers: 30,
        size: 4_000_000,
        rate_bits_per_s: 40_000_000,
    };
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup)?;
    let n = lan.setup.receivers as usize;
    let deaf: Vec<usize> = (1..=n).filter(|i| i % 3 == 0).collect();
    for &i in &deaf {
        lan.drop_multicast(i)?;
    }
    let t0 = Instant::now();
    let half = lan.setup.rate_bits_per_s / 2;
    let s = lan.send_hybrid(n, half, &["--wait", "30s"])?;
    lan.pause(Duration::from_millis(300));
    let r: Vec<P> = (1..=n).map(|i| lan.recv_hybrid(i)).collect::<Result<_>>()?;
    let (exit, at) = lan.wait_exit(s, Duration::from_secs(40))?;
    let text = lan.text(s);
    ensure!(exit == Exit::Code(0), "sender: {exit:?}\n{text}");
    let report = lan.report(s)?;
    let hybrid = &report["hybrid"];
    let mut tcp: Vec<String> = names(&hybrid["tcp"]);
    tcp.sort();
    let mut want: Vec<String> = deaf.iter().map(|i| format!("h{i}")).collect();
    want.sort();
    ensure!(tcp == want, "went TCP: {tcp:?}, want the deaf {want:?}");
    let multicast = names(&hybrid["multicast"]).len();
    ensure!(
        multicast == n - deaf.len(),
        "{multicast} over multicast, want {}",
        n - deaf.len()
    );
    for (k, &p) in r.iter().enumerate() {
        let i = k + 1;
        let (e, _) = lan.wait_exit(p, Duration::from_secs(10))?;
        ensure!(e == Exit::Code(0), "h{i}: {e:?}\n{}", lan.text(p));
        ensure!(lan.verified(i, 0)?, "h{i}'s copy is not byte-exact");
    }
    let dropped = dropped_on(&lan, &deaf)?;
    let took = at - t0;
    let protocol = report["protocol"].as_str().unwrap_or("?").to_owned();
    lan.finish()?;
    Ok((
        format!(
            "{protocol}: {} receivers verified, {multicast} over multicast and the {} deaf \
             ones ({dropped} multicast packets dropped on them) over TCP, in {}",
            n,
            deaf.len(),
            secs(took)
        ),
        None,
    ))
}

/// No receiver hears the group: the hybrid send is a TCP overlay (a chain
/// for this few) after its probe. Against `tcp-chain` run by hand on the same LAN first, its
/// time (from the receivers' start to the sender's exit, the probe
/// included) stays within 1.2 × of the chain's (the bound) plus
/// 0.3 s of this machine's noise.
pub(super) fn no_multicast(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let setup = Setup {
        receivers: 6,
        size: 8_000_000,
        rate_bits_per_s: 20_000_000,
    };
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup)?;
    let n = lan.setup.receivers as usize;
    for i in 1..=n {
        lan.drop_multicast(i)?;
    }
    let chain = {
        let s = lan.send_overlay("tcp-chain", n, &["--wait", "20s"])?;
        lan.pause(Duration::from_millis(300));
        let t = Instant::now();
        let r: Vec<P> = (1..=n)
            .map(|i| lan.recv_overlay(i))
            .collect::<Result<_>>()?;
        finished(&mut lan, s, &r, "tcp-chain")? - t
    };
    for i in 1..=n {
        clear(&lan, i)?;
    }
    let (hybrid, own) = {
        let rate = lan.setup.rate_bits_per_s;
        let s = lan.send_hybrid(n, rate, &["--wait", "20s"])?;
        lan.pause(Duration::from_millis(300));
        let t = Instant::now();
        let r: Vec<P> = (1..=n).map(|i| lan.recv_hybrid(i)).collect::<Result<_>>()?;
        let took = finished(&mut lan, s, &r, "hybrid")? - t;
        let report = lan.report(s)?;
        let tcp = names(&report["hybrid"]["tcp"]).len();
        ensure!(
            tcp == n && report["protocol"] == "tcp-chain",
            "want all {n} over tcp-chain: {report}"
        );
        (took, report["data_seconds"].as_f64().unwrap_or(0.0))
    };
    lan.finish()?;
    let ratio = hybrid.as_secs_f64() / chain.as_secs_f64();
    ensure!(
        hybrid <= chain.mul_f64(1.2) + Duration::from_millis(300),
        "hybrid without multicast took {}, tcp-chain by hand {}: {ratio:.2} ×, over 1.2 × + 0.3 s",
        secs(hybrid),
        secs(chain)
    );
    Ok((
        format!(
            "no multicast: the hybrid send fell back to tcp-chain for all {n}: {} from the \
             receivers' start to the sender's exit ({own:.2} s of data phase); tcp-chain by \
             hand {}: {ratio:.2} ×",
            secs(hybrid),
            secs(chain)
        ),
        None,
    ))
}

/// `rmcast bcast` as torchrun starts it on 9 ranks (h0 rank 0), ranks 3
/// and 6 on hosts whose networks drop multicast: rank 0's hybrid session
/// serves those two over TCP and the rest over multicast; every rank exits
/// 0, each copy byte-exact, rank 0's report naming the two that went TCP.
/// 8 MB at 40 Mbit/s per host.
pub(super) fn bcast_some_deaf(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let setup = Setup {
        receivers: 8,
        size: 8_000_000,
        rate_bits_per_s: 40_000_000,
    };
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup)?;
    let size = lan.setup.receivers as usize + 1;
    let deaf = [3, 6];
    for &i in &deaf {
        lan.drop_multicast(i)?;
    }
    std::fs::create_dir_all(lan.out_dir(0))?;
    let port = 29_500;
    let t0 = Instant::now();
    let ranks: Vec<P> = (0..size)
        .rev()
        .map(|i| lan.bcast(i, size, port, &[]))
        .collect::<Result<_>>()?;
    let ranks: Vec<P> = ranks.into_iter().rev().collect();
    let (exit, at) = lan.wait_exit(ranks[0], Duration::from_secs(45))?;
    let text = lan.text(ranks[0]);
    ensure!(exit == Exit::Code(0), "rank 0: {exit:?}\n{text}");
    let report = lan.report(ranks[0])?;
    let mut tcp: Vec<String> = names(&report["hybrid"]["tcp"]);
    tcp.sort();
    let want: Vec<String> = deaf.iter().map(|i| format!("rank {i} of {size}")).collect();
    ensure!(
        tcp.len() == want.len() && tcp.iter().zip(&want).all(|(t, w)| t.starts_with(w)),
        "went TCP: {tcp:?}, want the deaf ranks {want:?}"
    );
    for (i, &p) in ranks.iter().enumerate().skip(1) {
        let (e, _) = lan.wait_exit(p, Duration::from_secs(10))?;
        ensure!(e == Exit::Code(0), "rank {i}: {e:?}\n{}", lan.text(p));
        ensure!(lan.verified(i, 0)?, "rank {i}'s copy is not byte-exact");
    }
    let dropped = dropped_on(&lan, &deaf)?;
    let protocol = report["protocol"].as_str().unwrap_or("?").to_owned();
    let took = at - t0;
    lan.finish()?;
    Ok((
        format!(
            "{protocol}: all {size} ranks exit 0, {} over multicast and ranks {deaf:?} \
             ({dropped} multicast packets dropped on them) over TCP, in {}",
            size - 1 - deaf.len(),
            secs(took)
        ),
        None,
    ))
}

/// Waits for the sender `s` and the receivers `r`: all exit 0 with
/// byte-exact copies; when the sender exited.
fn finished(lan: &mut Lan, s: P, r: &[P], what: &str) -> Result<Instant> {
    let (exit, at) = lan.wait_exit(s, Duration::from_secs(30) + SLACK)?;
    ensure!(
        exit == Exit::Code(0),
        "{what} sender: {exit:?}\n{}",
        lan.text(s)
    );
    for (k, &p) in r.iter().enumerate() {
        let i = k + 1;
        let (e, _) = lan.wait_exit(p, Duration::from_secs(10))?;
        ensure!(e == Exit::Code(0), "{what} h{i}: {e:?}\n{}", lan.text(p));
        ensure!(lan.verified(i, 0)?, "{what}: h{i}'s copy is not byte-exact");
    }
    Ok(at)
}

/// Multicast packets the rules of the `deaf` hosts dropped, in all; each
/// must have dropped some, else the scenario proves nothing.
fn dropped_on(lan: &Lan, deaf: &[usize]) -> Result<u64> {
    let mut dropped = 0;
    for &i in deaf {
        let d = lan.multicast_drops(i)?;
        ensure!(
            d > 0,
            "h{i}'s rule dropped no multicast: the test proves nothing"
        );
        dropped += d;
    }
    Ok(dropped)
}

/// Removes receiver `i`'s copy, so the next transfer writes it anew.
fn clear(lan: &Lan, i: usize) -> Result<()> {
    for e in std::fs::read_dir(lan.out_dir(i))? {
        let p = e?.path();
        if p.is_file() {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(())
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_owned))
        .collect()
}
