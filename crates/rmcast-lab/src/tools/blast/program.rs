//! The blast programs: `rmcast lab blast-send` paces datagrams on an
//! absolute schedule, `rmcast lab blast-recv` counts what arrived.

use super::wire::{HEADER_LEN, Header, Kind, MAX_DATAGRAM, RecvReport, SendReport};
use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::Write as _;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `lab blast-send`.
#[derive(Args, Debug, Clone)]
pub struct BlastSendArgs {
    /// Multicast group and port.
    #[arg(long, value_name = "ADDR:PORT")]
    pub group: SocketAddrV4,
    /// Local address whose interface sends (IP_MULTICAST_IF).
    #[arg(long, default_value = "127.0.0.1")]
    pub iface: Ipv4Addr,
    /// Datagrams per second (0: as fast as the socket takes them).
    #[arg(long, default_value_t = 10_000.0)]
    pub pps: f64,
    /// Pace by payload bytes per second instead (pps = this / --size).
    #[arg(long, conflicts_with = "pps")]
    pub bytes_per_s: Option<f64>,
    /// UDP payload bytes per datagram, header included (24..=65507).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Data datagrams to send.
    #[arg(long)]
    pub count: Option<u64>,
    /// Send for this many seconds (with --count: whichever ends first).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Multicast TTL.
    #[arg(long, default_value_t = 1)]
    pub ttl: u32,
    /// End markers sent after the data, 20 ms apart.
    #[arg(long, default_value_t = 8)]
    pub end_markers: u32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// Also write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// `lab blast-recv`.
#[derive(Args, Debug, Clone)]
pub struct BlastRecvArgs {
    /// Multicast group and port.
    #[arg(long, value_name = "ADDR:PORT")]
    pub group: SocketAddrV4,
    /// Local address whose interface joins the group.
    #[arg(long, default_value = "127.0.0.1")]
    pub iface: Ipv4Addr,
    /// Give up if nothing ends the blast within this many seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// Stop when nothing arrived for this many seconds after the first datagram.
    #[arg(long, default_value_t = 3.0)]
    pub idle: f64,
    /// SO_RCVBUF in bytes [default: the system's].
    #[arg(long)]
    pub rcvbuf: Option<usize>,
    /// Also write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Sleeps until `due` (coarse sleep, then a short spin).
fn wait_until(due: Instant) {
    const SPIN: Duration = Duration::from_micros(60);
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        let left = due - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        } else {
            std::hint::spin_loop();
        }
    }
}

fn write_report<T: Serialize>(path: Option<&PathBuf>, r: &T) -> Result<()> {
    let line = serde_json::to_string(r)?;
    println!("{line}");
    std::io::stdout().flush().ok();
    if let Some(p) = path {
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).ok();
        }
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, format!("{line}\n"))
            .with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, p).with_context(|| format!("write {}", p.display()))?;
    }
    Ok(())
}

/// A multicast sending socket: IP_MULTICAST_IF = `iface`, the given TTL, loop on.
pub fn send_socket(iface: Ipv4Addr, ttl: u32) -> Result<Socket> {
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    sock.bind(&SockAddr::from(SocketAddrV4::new(iface, 0)))
        .with_context(|| format!("bind to {iface}"))?;
    sock.set_multicast_if_v4(&iface)
        .with_context(|| format!("IP_MULTICAST_IF {iface}"))?;
    sock.set_multicast_ttl_v4(ttl)?;
    sock.set_multicast_loop_v4(true)?;
    Ok(sock)
}

/// A socket joined to `group` on the interface of `iface`.
pub fn recv_socket(group: SocketAddrV4, iface: Ipv4Addr, rcvbuf: Option<usize>) -> Result<Socket> {
    if !group.ip().is_multicast() {
        bail!("{} is not a multicast address", group.ip());
    }
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_address(true)?;
    if let Some(b) = rcvbuf {
        sock.set_recv_buffer_size(b)?;
    }
    sock.bind(&SockAddr::from(group))
        .with_context(|| format!("bind to {group}"))?;
    sock.join_multicast_v4(group.ip(), &iface)
        .with_context(|| format!("join {} on {iface}", group.ip()))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    Ok(sock)
}

/// The sender; exit code 0 when it sent everything it was asked to.
pub fn blast_send(a: &BlastSendArgs) -> Result<i32> {
    let r = send(a)?;
    write_report(a.report.as_ref(), &r)?;
    Ok(0)
}

fn send(a: &BlastSendArgs) -> Result<SendReport> {
    if !(HEADER_LEN..=MAX_DATAGRAM).contains(&a.size) {
        bail!("--size must be in {HEADER_LEN}..={MAX_DATAGRAM}");
    }
    if a.count.is_none() && a.seconds.is_none() {
        bail!("give --count or --seconds");
    }
    let pps = a.bytes_per_s.map_or(a.pps, |b| b / a.size as f64);
    if !(pps >= 0.0 && pps.is_finite()) {
        bail!("--pps / --bytes-per-s must be a non-negative number");
    }
    // Fine-grained sleeps: the default 50 µs timer slack would blur pacing.
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes an integer and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
    let sock = send_socket(a.iface, a.ttl)?;
    let dst = SockAddr::from(a.group);
    let mut buf = vec![0u8; a.size];
    for (i, b) in buf.iter_mut().enumerate().skip(HEADER_LEN) {
        *b = i as u8;
    }
    let interval = (pps > 0.0).then(|| Duration::from_secs_f64(1.0 / pps));
    let count = a.count.unwrap_or(u64::MAX);
    let start = Instant::now();
    let hard = start + Duration::from_secs_f64(a.timeout);
    let stop_at = a.seconds.map(|s| start + Duration::from_secs_f64(s));
    let mut r = SendReport {
        role: "blast-send".into(),
        size: a.size,
        target_pps: pps,
        ..SendReport::default()
    };
    let (mut first, mut last) = (None, start);
    let mut slot: u32 = 0;
    while r.sent < count {
        if let Some(iv) = interval {
            let due = start + iv * slot;
            // A sender that falls behind its schedule still stops on time.
            let now = Instant::now();
            if stop_at.is_some_and(|s| due >= s || now >= s) || now >= hard {
                break;
            }
            wait_until(due);
            slot = slot.saturating_add(1);
        } else {
            let now = Instant::now();
            if stop_at.is_some_and(|s| now >= s) || now >= hard {
                break;
            }
        }
        Header {
            kind: Kind::Data,
            seq: r.sent,
            stamp_ns: now_ns(),
        }
        .encode(&mut buf);
        match sock.send_to(&buf, &dst) {
            Ok(_) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                r.sent += 1;
            }
            Err(e) => {
                r.errors += 1;
                match e.raw_os_error() {
                    Some(libc::ENOBUFS) => r.enobufs += 1,
                    Some(libc::EAGAIN) => r.eagain += 1,
                    _ => {}
                }
                if r.errors <= 3 {
                    eprintln!("blast-send: send error (counted): {e}");
                }
                if r.sent == 0 && r.errors >= 1000 {
                    bail!("every send fails: {e}");
                }
            }
        }
    }
    if let Some(f) = first {
        r.seconds = last.duration_since(f).as_secs_f64();
        if r.seconds > 0.0 && r.sent > 1 {
            // n datagrams span n − 1 intervals.
            r.pps = (r.sent - 1) as f64 / r.seconds;
            r.bytes_per_s = r.pps * a.size as f64;
        }
    }
    for k in 0..a.end_markers {
        if k > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        Header {
            kind: Kind::End,
            seq: r.sent,
            stamp_ns: now_ns(),
        }
        .encode(&mut buf[..HEADER_LEN]);
        if let Err(e) = sock.send_to(&buf[..HEADER_LEN], &dst) {
            eprintln!("blast-send: end marker: {e}");
        }
    }
    Ok(r)
}

/// Distinct sequence numbers, as a growable bitmap.
#[derive(Default)]
struct Seen {
    bits: Vec<u64>,
}

impl Seen {
    /// The largest sequence number tracked (larger ones are ignored as bogus).
    const LIMIT: u64 = 1 << 30;

    /// Marks `seq`; `Some(true)` if new, `Some(false)` if seen, `None` if out of range.
    fn insert(&mut self, seq: u64) -> Option<bool> {
        if seq >= Self::LIMIT {
            return None;
        }
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if w >= self.bits.len() {
            self.bits.resize((w + 1).max(self.bits.len() * 2), 0);
        }
        let new = self.bits[w] & (1 << b) == 0;
        self.bits[w] |= 1 << b;
        Some(new)
    }
}

/// The receiver; exit code 0 once it reported (1 if nothing arrived).
pub fn blast_recv(a: &BlastRecvArgs) -> Result<i32> {
    let r = receive(a)?;
    let ok = r.received > 0 || r.end_seen;
    write_report(a.report.as_ref(), &r)?;
    if !ok {
        eprintln!("blast-recv: nothing received");
    }
    Ok(i32::from(!ok))
}

fn receive(a: &BlastRecvArgs) -> Result<RecvReport> {
    let sock = recv_socket(a.group, a.iface, a.rcvbuf)?;
    let start = Instant::now();
    let hard = start + Duration::from_secs_f64(a.timeout);
    let idle = Duration::from_secs_f64(a.idle);
    let mut buf = vec![MaybeUninit::<u8>::uninit(); MAX_DATAGRAM + 1];
    let mut seen = Seen::default();
    let mut r = RecvReport {
        role: "blast-recv".into(),
        ..RecvReport::default()
    };
    let mut highest: Option<u64> = None;
    let (mut first, mut last): (Option<Instant>, Instant) = (None, start);
    let mut end_at: Option<Instant> = None;
    let mut delays: Vec<f64> = Vec::new();
    let mut next_progress = start + Duration::from_secs(1);
    let mut progress_count = 0;
    loop {
        let now = Instant::now();
        if now >= hard {
            break;
        }
        // After the first end marker, drain briefly for stragglers.
        if end_at.is_some_and(|t| now.duration_since(t) > Duration::from_millis(100)) {
            break;
        }
        if first.is_some() && end_at.is_none() && now.duration_since(last) > idle {
            break;
        }
        if now >= next_progress {
            next_progress = now + Duration::from_secs(1);
            // A line on stderr while datagrams arrive: the runner's stall
            // detector watches processes' writes.
            if r.received != progress_count {
                progress_count = r.received;
                eprintln!("blast-recv: {} datagrams", r.received);
            }
        }
        let len = match sock.recv_from(&mut buf) {
            Ok((len, _)) => len,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e).context("recv"),
        };
        // SAFETY: recv_from initialised the first `len` bytes.
        let data: &[u8] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), len) };
        let Some(h) = Header::decode(data) else {
            r.foreign += 1;
            continue;
        };
        match h.kind {
            Kind::End => {
                r.end_seen = true;
                r.expected = r.expected.max(h.seq);
                end_at.get_or_insert(Instant::now());
            }
            Kind::Data => {
                let t = Instant::now();
                match seen.insert(h.seq) {
                    None => r.foreign += 1,
                    Some(false) => r.duplicates += 1,
                    Some(true) => {
                        if highest.is_some_and(|hi| h.seq < hi) {
                            r.reordered += 1;
                        }
                        highest = Some(highest.map_or(h.seq, |hi| hi.max(h.seq)));
                        r.received += 1;
                        r.bytes += len as u64;
                        first.get_or_insert(t);
                        last = t;
                        if delays.len() < 100_000 && r.received % 16 == 1 {
                            let d = now_ns().saturating_sub(h.stamp_ns) as f64 / 1e6;
                            delays.push(d);
                        }
                    }
                }
            }
        }
    }
    if !r.end_seen {
        r.expected = highest.map_or(0, |h| h + 1);
    }
    r.expected = r.expected.max(r.received);
    if r.expected > 0 {
        r.loss = 1.0 - r.received as f64 / r.expected as f64;
    }
    if let Some(f) = first {
        r.seconds = last.duration_since(f).as_secs_f64();
        if r.seconds > 0.0 && r.received > 1 {
            r.pps = (r.received - 1) as f64 / r.seconds;
            r.bytes_per_s =
                r.bytes as f64 * (r.received - 1) as f64 / r.received as f64 / r.seconds;
        }
    }
    if !delays.is_empty() {
        delays.sort_by(f64::total_cmp);
        r.delay_ms_median = Some(delays[delays.len() / 2]);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_counts_distinct_and_refuses_huge_sequence_numbers() {
        let mut s = Seen::default();
        assert_eq!(s.insert(5), Some(true));
        assert_eq!(s.insert(5), Some(false));
        assert_eq!(s.insert(100_000), Some(true));
        assert_eq!(s.insert(Seen::LIMIT), None);
    }

    #[test]
    fn loopback_blast_is_received_by_two_receivers() {
        // Root namespace: loopback only (IP_MULTICAST_IF 127.0.0.1, TTL 1).
        let port = 31000 + (std::process::id() % 2000) as u16 * 2;
        let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 9), port);
        let recv_args = BlastRecvArgs {
            group,
            iface: Ipv4Addr::LOCALHOST,
            timeout: 20.0,
            idle: 2.0,
            rcvbuf: Some(4 << 20),
            report: None,
        };
        let receivers: Vec<_> = (0..2)
            .map(|_| {
                let a = recv_args.clone();
                std::thread::spawn(move || receive(&a))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let sent = send(&BlastSendArgs {
            group,
            iface: Ipv4Addr::LOCALHOST,
            pps: 2000.0,
            bytes_per_s: None,
            size: 200,
            count: Some(300),
            seconds: None,
            ttl: 1,
            end_markers: 4,
            timeout: 20.0,
            report: None,
        })
        .unwrap();
        assert_eq!(sent.sent, 300);
        assert_eq!(sent.errors, 0);
        assert!(sent.pps > 1000.0 && sent.pps < 3000.0, "{sent:?}");
        for h in receivers {
            let r = h.join().unwrap().unwrap();
            assert!(r.end_seen, "{r:?}");
            assert_eq!(r.expected, 300, "{r:?}");
            // Loopback at 2000 pps with a 4 MiB buffer loses nothing.
            assert_eq!(r.received, 300, "{r:?}");
            assert_eq!(r.duplicates, 0);
            assert_eq!(r.loss, 0.0);
            assert_eq!(r.bytes, 300 * 200);
        }
    }
}
