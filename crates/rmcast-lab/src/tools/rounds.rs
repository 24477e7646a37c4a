//! `rounds`: one node of the PRMP paper's symmetric closed-group experiment
//! (Barcellos et al., Section 5; `docs/prmp.md` § The paper's experiment).
//!
//! N nodes, each sending `--bytes` in rounds of `--round` bytes. A round at
//! node i: send one message of S bytes to the group, wait until the
//! round's message of every other node has arrived (the paper's synchronous
//! rounds, after Lynch), then "process" for a uniform random 0..`--think-ms`
//! milliseconds. Before round 1 every node sends a one-byte READY message
//! and waits for everyone's: the paper's coordinator START, done in-band.
//!
//! Transports (`--proto`):
//! - `prmp`: node i opens one PRMP session (invitation model) to the
//!   others' receivers `addr_k:port+i·N+k`; it runs N−1 `StreamReceiver`s,
//!   one per other node's session, all on the same group port (sessions do
//!   not mix: each receiver binds to the session that invited it). Response
//!   rate `--response-rate` (the paper's RR, 20/s).
//! - `ff`: the same sessions with feedback uncontrolled (response rate
//!   1,000,000/s, 1 ms epochs): every receiver is polled as soon as it holds
//!   something unacknowledged, so each data packet of a round draws an
//!   acknowledgement from each receiver — the paper's Full Feedback, which
//!   "sends ACKs for each packet received".
//! - `multitcp`: one TCP connection per pair of nodes (N(N−1)/2, both
//!   directions, as the paper's footnote 5); node i connects to every j < i
//!   and accepts from every j > i on `port+N·N+i`. TCP_NODELAY.
//!
//! Every message starts with its node (u32 BE) and round (u32 BE); a
//! receiver checks both, so mixed sessions or reordering fail the run.
//! Progress goes to stderr (one line per round); the result is one JSON line
//! on stdout ([`NodeReport`]) and in `--report`.

use anyhow::{Context, Result, bail};
use clap::Args;
use rmcast::stream::{Admission, StreamReceiver, StreamRecvConfig, StreamSendConfig, StreamSender};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `rmcast lab rounds`.
#[derive(Args, Debug, Clone)]
pub struct RoundsArgs {
    /// This node's index in `--nodes`.
    #[arg(long)]
    pub node: usize,
    /// Every node's address, comma-separated (index = node).
    #[arg(long, value_delimiter = ',', required = true)]
    pub nodes: Vec<Ipv4Addr>,
    /// prmp | ff | multitcp.
    #[arg(long, default_value = "prmp")]
    pub proto: String,
    /// Bytes this node sends in all (the paper: 1,000,000).
    #[arg(long, default_value_t = 1_000_000)]
    pub bytes: u64,
    /// Message size S per round (the paper: 1000 or 4000).
    #[arg(long, default_value_t = 1000)]
    pub round: usize,
    /// Largest processing time per round, ms (uniform 0..think; the paper: 100).
    #[arg(long, default_value_t = 100.0)]
    pub think_ms: f64,
    /// Seed of the processing times (each node mixes in its index).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Multicast group (PRMP, FF).
    #[arg(long, default_value = "239.77.9.1")]
    pub group: Ipv4Addr,
    /// Group port; receivers' unicast ports and TCP ports are derived from it.
    #[arg(long, default_value_t = 7900)]
    pub port: u16,
    /// PRMP's response rate (responses/s per sender; the paper: 20).
    #[arg(long, default_value_t = 20)]
    pub response_rate: u32,
    /// Message bytes per data packet (the paper: 1000).
    #[arg(long, default_value_t = 1000)]
    pub payload: u16,
    /// Give up when the group is not up within this many seconds.
    #[arg(long, default_value_t = 20.0)]
    pub setup_timeout_s: f64,
    /// Also write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// What a node did (one JSON line).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeReport {
    /// Node index.
    pub node: usize,
    /// Nodes in the group.
    pub nodes: usize,
    /// prmp | ff | multitcp.
    pub proto: String,
    /// Rounds M.
    pub rounds: u64,
    /// Message size S.
    pub round_bytes: usize,
    /// Message bytes sent (READY excluded).
    pub bytes_sent: u64,
    /// Message bytes received from all others (READY excluded).
    pub bytes_received: u64,
    /// T_i: START (everyone's READY here) to the last message of round M, s.
    pub t_seconds: f64,
    /// Sum of this node's processing times, s (the lower bound on T_i).
    pub think_seconds: f64,
    /// Process start to START, s (session set-up and the READY exchange).
    pub setup_seconds: f64,
    /// End of round M to everything closed, s.
    pub close_seconds: f64,
    /// PRMP/FF: data packets first sent by this node's sender.
    pub data_packets: Option<u64>,
    /// PRMP/FF: repairs (multicast + unicast) this node's sender sent.
    pub repairs: Option<u64>,
    /// PRMP/FF: responses this node's sender received.
    pub responses: Option<u64>,
    /// PRMP/FF: polls this node's sender sent.
    pub polls: Option<u64>,
    /// Whether every session closed cleanly.
    pub ok: bool,
}

/// SplitMix64: the processing times (no `rand` in the lab).
struct Mix(u64);
impl Mix {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One transport: send to all, receive one message from each other node.
trait Mesh {
    fn send_all(&mut self, msg: &[u8]) -> Result<()>;
    /// The next message of node `from` into `buf`.
    fn recv_from(&mut self, from: usize, buf: &mut Vec<u8>) -> Result<()>;
    /// Closes everything; returns (ok, PRMP sender counters).
    fn close(self: Box<Self>) -> Result<(bool, Option<rmcast::stream::StreamSenderStats>)>;
}

/// Runs one node; prints and writes the report. Exit 0 when it all went well.
pub fn rounds(a: &RoundsArgs) -> Result<i32> {
    let n = a.nodes.len();
    if n < 2 || a.node >= n {
        bail!("--nodes must list 2 or more addresses and --node index one of them");
    }
    if a.round < 8 || a.round > 60_000 {
        bail!("--round must be 8..=60000 bytes (a message carries an 8-byte header)");
    }
    let rounds = a.bytes.div_ceil(a.round as u64).max(1);
    let t_open = Instant::now();
    let mut mesh: Box<dyn Mesh> = match a.proto.as_str() {
        "prmp" => {
            // An epoch must hold one response: at 20/s that is 50 ms.
            let epoch = Duration::from_millis(5)
                .max(Duration::from_secs_f64(1.0 / a.response_rate.max(1) as f64));
            Box::new(Prmp::open(a, a.response_rate, epoch)?)
        }
        "ff" => Box::new(Prmp::open(a, 1_000_000, Duration::from_millis(1))?),
        "multitcp" => Box::new(Tcp::open(a)?),
        p => bail!("unknown --proto {p} (prmp, ff, multitcp)"),
    };
    let me = a.node;
    let mut buf = Vec::with_capacity(a.round);
    // READY / START.
    mesh.send_all(&header(me, 0, 8))?;
    for j in (0..n).filter(|&j| j != me) {
        mesh.recv_from(j, &mut buf)?;
        check(&buf, j, 0, 8)?;
    }
    let start = Instant::now();
    let setup_seconds = start.duration_since(t_open).as_secs_f64();
    eprintln!("node {me}: START after {setup_seconds:.3} s");
    let mut mix = Mix(a.seed ^ (me as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let (mut sent, mut received, mut think) = (0u64, 0u64, 0.0f64);
    let mut t_last = start;
    for r in 1..=rounds {
        let len = (a.bytes - (r - 1) * a.round as u64).min(a.round as u64) as usize;
        let len = len.max(8);
        mesh.send_all(&header(me, r as u32, len))?;
        sent += len as u64;
        for j in (0..n).filter(|&j| j != me) {
            mesh.recv_from(j, &mut buf)?;
            check(&buf, j, r as u32, len)?;
            received += buf.len() as u64;
        }
        t_last = Instant::now();
        eprintln!("round {r}");
        if r < rounds {
            let p = mix.next_f64() * a.think_ms / 1e3;
            think += p;
            std::thread::sleep(Duration::from_secs_f64(p));
        }
    }
    // The paper's T_i ends with the last message of round M; the last
    // round's processing is not waited for (it would not change T's order).
    let t_seconds = t_last.duration_since(start).as_secs_f64();
    let (ok, stats) = mesh.close()?;
    let report = NodeReport {
        node: me,
        nodes: n,
        proto: a.proto.clone(),
        rounds,
        round_bytes: a.round,
        bytes_sent: sent,
        bytes_received: received,
        t_seconds,
        think_seconds: think,
        setup_seconds,
        close_seconds: t_last.elapsed().as_secs_f64(),
        data_packets: stats.as_ref().map(|s| s.data_packets),
        repairs: stats
            .as_ref()
            .map(|s| s.multicast_repairs + s.unicast_repairs),
        responses: stats.as_ref().map(|s| s.responses),
        polls: stats.as_ref().map(|s| s.polls),
        ok,
    };
    let line = serde_json::to_string(&report)?;
    println!("{line}");
    if let Some(p) = &a.report {
        std::fs::write(p, format!("{line}\n"))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(if ok { 0 } else { 3 })
}

/// A message of `len` bytes (≥ 8) from `node` in `round`.
fn header(node: usize, round: u32, len: usize) -> Vec<u8> {
    let mut m = vec![(node as u8) ^ (round as u8); len];
    m[..4].copy_from_slice(&(node as u32).to_be_bytes());
    m[4..8].copy_from_slice(&round.to_be_bytes());
    m
}

fn check(m: &[u8], node: usize, round: u32, len: usize) -> Result<()> {
    let got_node = m
        .get(..4)
        .map(|b| u32::from_be_bytes(b.try_into().unwrap()));
    let got_round = m
        .get(4..8)
        .map(|b| u32::from_be_bytes(b.try_into().unwrap()));
    if m.len() != len || got_node != Some(node as u32) || got_round != Some(round) {
        bail!(
            "unexpected message from node {node} in round {round}: {} bytes, node {got_node:?}, round {got_round:?}",
            m.len()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- PRMP / FF

struct Prmp {
    sender: StreamSender,
    /// Receiver of node j's session (None at j = me).
    receivers: Vec<Option<StreamReceiver>>,
}

impl Prmp {
    fn open(a: &RoundsArgs, response_rate: u32, epoch: Duration) -> Result<Prmp> {
        let n = a.nodes.len();
        let me = a.node;
        let group = SocketAddrV4::new(a.group, a.port);
        let iface = a.nodes[me];
        // Node k's receiver of node j's session listens on port + 1 + j·N + k.
        let rport = |j: usize, k: usize| a.port + 1 + (j * n + k) as u16;
        let mut receivers = Vec::with_capacity(n);
        for j in 0..n {
            if j == me {
                receivers.push(None);
                continue;
            }
            let mut cfg = StreamRecvConfig {
                group,
                iface,
                port: rport(j, me),
                connect_timeout: Some(Duration::from_secs_f64(a.setup_timeout_s)),
                ..StreamRecvConfig::default()
            };
            cfg.proto.name = format!("n{me}<-n{j}");
            cfg.proto.answer_announcements = false;
            cfg.proto.payload_max = cfg.proto.payload_max.max(a.payload);
            receivers.push(Some(
                StreamReceiver::open(cfg).with_context(|| format!("receiver of node {j}"))?,
            ));
        }
        let invite: Vec<SocketAddr> = (0..n)
            .filter(|&k| k != me)
            .map(|k| SocketAddr::V4(SocketAddrV4::new(a.nodes[k], rport(me, k))))
            .collect();
        let mut cfg = StreamSendConfig {
            group,
            iface,
            ..StreamSendConfig::default()
        };
        cfg.proto.admission = Admission::Invite {
            receivers: invite,
            concurrency: 16,
        };
        cfg.proto.payload_size = a.payload;
        cfg.proto.response_rate = response_rate;
        cfg.proto.epoch = epoch;
        // Peers start within about a second of each other: keep inviting.
        cfg.proto.handshake_tries = 100;
        let sender = StreamSender::open(cfg).context("PRMP sender")?;
        let up = sender
            .wait_established(Some(Duration::from_secs_f64(a.setup_timeout_s)))?
            .context("the session was not established in time")?;
        if up != n - 1 {
            bail!(
                "only {up} of {} receivers joined node {me}'s session",
                n - 1
            );
        }
        Ok(Prmp { sender, receivers })
    }
}

impl Mesh for Prmp {
    fn send_all(&mut self, msg: &[u8]) -> Result<()> {
        Ok(self.sender.send(msg)?)
    }
    fn recv_from(&mut self, from: usize, buf: &mut Vec<u8>) -> Result<()> {
        let r = self.receivers[from]
            .as_mut()
            .context("no receiver for this node")?;
        buf.clear(); // read_into appends
        match r.read_into(buf)? {
            Some(_) => Ok(()),
            None => bail!("node {from}'s stream ended early"),
        }
    }
    fn close(self: Box<Self>) -> Result<(bool, Option<rmcast::stream::StreamSenderStats>)> {
        let Prmp { sender, receivers } = *self;
        let closer = std::thread::spawn(move || sender.close());
        let mut ok = true;
        for (j, r) in receivers.into_iter().enumerate() {
            let Some(mut r) = r else { continue };
            let mut buf = Vec::new();
            match r.read_into(&mut buf) {
                Ok(None) => {}
                Ok(Some(k)) => {
                    eprintln!("node {j} sent {k} bytes after its last round");
                    ok = false;
                }
                Err(e) => {
                    eprintln!("node {j}'s stream: {e}");
                    ok = false;
                }
            }
            let rep = r.finish();
            ok &= rep.complete;
        }
        let rep = closer
            .join()
            .map_err(|_| anyhow::anyhow!("the closing thread panicked"))??;
        if !rep.ok {
            eprintln!("close: removed {:?}, left {:?}", rep.removed, rep.left);
        }
        Ok((ok && rep.ok, Some(rep.stats)))
    }
}

// ---------------------------------------------------------------- MultiTCP

struct Tcp {
    peers: Vec<Option<TcpStream>>,
}

impl Tcp {
    fn open(a: &RoundsArgs) -> Result<Tcp> {
        let n = a.nodes.len();
        let me = a.node;
        let tport = |k: usize| a.port + 1 + (n * n + k) as u16;
        let listener =
            TcpListener::bind(SocketAddrV4::new(a.nodes[me], tport(me))).context("TCP listener")?;
        let deadline = Instant::now() + Duration::from_secs_f64(a.setup_timeout_s);
        let mut peers: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        for (j, slot) in peers.iter_mut().enumerate().take(me) {
            let to = SocketAddr::V4(SocketAddrV4::new(a.nodes[j], tport(j)));
            let s = loop {
                match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => return Err(e).with_context(|| format!("connecting to node {j}")),
                }
            };
            s.set_nodelay(true)?;
            (&s).write_all(&(me as u32).to_be_bytes())?;
            *slot = Some(s);
        }
        listener.set_nonblocking(true)?;
        let mut waiting = n - 1 - me;
        while waiting > 0 {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)?;
                    s.set_nodelay(true)?;
                    let mut id = [0u8; 4];
                    (&s).read_exact(&mut id)?;
                    let j = u32::from_be_bytes(id) as usize;
                    if j <= me || j >= n || peers[j].is_some() {
                        bail!("unexpected TCP peer claiming node {j}");
                    }
                    peers[j] = Some(s);
                    waiting -= 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        bail!("{waiting} TCP peers never connected");
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Tcp { peers })
    }
}

impl Mesh for Tcp {
    fn send_all(&mut self, msg: &[u8]) -> Result<()> {
        let len = (msg.len() as u32).to_be_bytes();
        for s in self.peers.iter_mut().flatten() {
            // One write per message: length prefix and body together.
            let mut m = Vec::with_capacity(4 + msg.len());
            m.extend_from_slice(&len);
            m.extend_from_slice(msg);
            s.write_all(&m)?;
        }
        Ok(())
    }
    fn recv_from(&mut self, from: usize, buf: &mut Vec<u8>) -> Result<()> {
        let s = self.peers[from].as_mut().context("no connection")?;
        let mut len = [0u8; 4];
        s.read_exact(&mut len)?;
        buf.resize(u32::from_be_bytes(len) as usize, 0);
        s.read_exact(buf)?;
        Ok(())
    }
    fn close(self: Box<Self>) -> Result<(bool, Option<rmcast::stream::StreamSenderStats>)> {
        for s in self.peers.iter().flatten() {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        // Wait for every peer's end of stream: nothing is cut short.
        let mut ok = true;
        for mut s in self.peers.into_iter().flatten() {
            let mut rest = Vec::new();
            ok &= s.read_to_end(&mut rest).is_ok() && rest.is_empty();
        }
        Ok((ok, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_args(proto: &str, node: usize, n: usize, port: u16) -> RoundsArgs {
        RoundsArgs {
            node,
            nodes: vec![Ipv4Addr::LOCALHOST; n],
            proto: proto.into(),
            bytes: 20_000,
            round: 1000,
            think_ms: 5.0,
            seed: 7,
            group: Ipv4Addr::new(239, 77, 9, 3),
            port,
            response_rate: 20,
            payload: 1000,
            setup_timeout_s: 10.0,
            report: None,
        }
    }

    /// Three nodes in threads on loopback: every transport completes the rounds.
    #[test]
    fn three_nodes_on_loopback_complete_every_round() {
        for (k, proto) in ["prmp", "multitcp", "ff"].into_iter().enumerate() {
            // Below the kernel's ephemeral range (32768 and up), so no socket
            // of a test running beside this one can hold a node's fixed port
            // (it made a node's listener fail to bind and the others wait).
            let port = 20000 + (std::process::id() % 300) as u16 * 40 + k as u16 * 13;
            let handles: Vec<_> = (0..3)
                .map(|i| {
                    let a = node_args(proto, i, 3, port);
                    std::thread::spawn(move || rounds(&a))
                })
                .collect();
            for h in handles {
                let r = h.join().unwrap();
                assert!(matches!(r, Ok(0)), "{proto}: {r:?}");
            }
        }
    }

    #[test]
    fn messages_carry_node_and_round() {
        let m = header(3, 17, 1000);
        check(&m, 3, 17, 1000).unwrap();
        assert!(check(&m, 2, 17, 1000).is_err());
        assert!(check(&m, 3, 16, 1000).is_err());
        assert!(check(&m[..999], 3, 17, 1000).is_err());
    }
}
