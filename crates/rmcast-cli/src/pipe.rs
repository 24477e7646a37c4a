//! `rmcast pipe`: a byte stream from one sender's stdin to the stdout of
//! every receiver, over PRMP (`docs/prmp.md`).

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use rmcast::HumanDuration;
use rmcast::stream::{
    Admission, CongestionControl, MemberInfo, SenderEvent, StreamEvent, StreamReceiver,
    StreamReceiverEvent, StreamRecvConfig, StreamSendConfig, StreamSender,
};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::ExitCode;
use std::time::Duration;

/// Exit code of a sender whose stream did not reach every receiver.
const EXIT_PARTIAL: u8 = 3;

/// Stream stdin to the stdout of every receiver (PRMP, TCP-like reliable multicast).
///
/// `rmcast pipe recv` on each receiving host writes the stream to stdout,
/// byte for byte; `rmcast pipe send` reads stdin and multicasts it to all of
/// them at once. The stream is reliable and in order for every receiver that
/// stays in the session; flow control never lets the sender overrun a slow
/// reader (it waits for the slowest); a receiver that stops answering is
/// suspected, then removed, and the others go on. Events (joined, suspected,
/// removed and why, left, closed) go to stderr.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:
  # announcement: receivers listen, the sender admits the first 4 that ask
  rmcast pipe recv --group 239.77.0.1:7710 > copy.bin        # on each receiver
  rmcast pipe send --group 239.77.0.1:7710 --receivers 4 < data.bin

  # invitation: the sender contacts known receivers
  rmcast pipe recv --group 239.77.0.1:7710 --port 7800 > copy.bin
  rmcast pipe send --group 239.77.0.1:7710 --invite 127.0.0.1:7800,127.0.0.1:7801 < data.bin

  tar c dir | rmcast pipe send --receivers 3 --congestion tcp-like")]
pub struct PipeArgs {
    #[command(subcommand)]
    pub command: PipeCommand,
}

/// `rmcast pipe send` / `recv`.
#[derive(Subcommand, Debug)]
pub enum PipeCommand {
    /// Read stdin and stream it to every receiver; exit 0 only when every
    /// receiver confirmed it holds everything.
    #[command(long_about = SEND_ABOUT)]
    Send(PipeSendArgs),
    /// Join a stream and write it to stdout; exit 0 when the stream ended and
    /// all of it was written.
    Recv(PipeRecvArgs),
}

const SEND_ABOUT: &str = "Read stdin and stream it to every receiver.

Admission. Either the sender announces the session on the group and admits
the first --receivers N receivers that ask (announcement model; admission
ends as soon as N joined, or after --wait with fewer, which is an error),
or it invites receivers it already knows (--invite ADDR,...: each receiver's
unicast address, `rmcast pipe recv --port P`), a three-way handshake each;
an invitee that does not answer is removed (no answer). Membership is fixed
once the stream starts: a new receiver needs a new session.

Feedback. Receivers speak only when polled; polls are planned so that at
most --response-rate responses per second reach the sender, whatever the
number of receivers (the paper's implosion control). Each response is an
ACK, a NACK bitmap and the receiver's free buffer (its advertised window):
the sender never sends beyond the smallest window, so a slow reader slows
the stream down and is never overrun. Lost packets are resent by multicast
when several receivers lack them, else by unicast.

Failure. A receiver that leaves several polls in a row unanswered is
suspected, then removed (the others go on); `removed` on stderr names it
with the reason. Exit codes: 0 every receiver confirmed the whole stream;
3 some receiver was removed or left, or fewer than --receivers joined
(stderr names them); 1 a local error.";

/// Group congestion control.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CongestionArg {
    /// No congestion window: only the receivers' windows limit the stream (a LAN).
    Off,
    /// One TCP-like window for the group: slow start, additive increase,
    /// back to one packet on a loss (for shared or wide-area paths).
    TcpLike,
}

/// `rmcast pipe send`.
#[derive(Args, Debug)]
pub struct PipeSendArgs {
    /// Multicast group and port.
    #[arg(long, default_value = "239.77.0.1:7710", value_name = "ADDR:PORT")]
    pub group: SocketAddrV4,
    /// Local interface address to send from (multicast leaves through it).
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub iface: Ipv4Addr,
    /// Multicast TTL (1 keeps packets on the local network).
    #[arg(long, default_value_t = 1)]
    pub ttl: u32,
    /// Receivers to admit (announcement model); with --invite, defaults to
    /// the number of addresses.
    #[arg(long, short = 'n', value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub receivers: Option<u16>,
    /// Invite these receivers (their `pipe recv --port` addresses) instead
    /// of announcing; the i-th gets rank i.
    #[arg(long, value_delimiter = ',', value_name = "ADDR:PORT,...")]
    pub invite: Vec<SocketAddr>,
    /// Announcement model: how long admission stays open at most.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub wait: HumanDuration,
    /// Most responses per second the sender plans to receive (the paper's RR).
    #[arg(long, default_value_t = 2000, value_name = "PER_SECOND")]
    pub response_rate: u32,
    /// Group congestion window.
    #[arg(long, value_enum, default_value_t = CongestionArg::Off)]
    pub congestion: CongestionArg,
    /// Send buffer in packets (unacknowledged plus queued; each holds --payload bytes).
    #[arg(long, default_value_t = 1024, value_name = "PACKETS")]
    pub buffer: u32,
    /// Stream bytes per data packet (1200 fits any Ethernet path; loopback takes up to 8900).
    #[arg(long, default_value_t = 1200, value_name = "BYTES")]
    pub payload: u16,
    /// Bytes of stdin per message (the unit receivers get whole).
    #[arg(long, default_value = "64KiB", value_name = "BYTES", value_parser = rmcast::parse_size)]
    pub message: u64,
    /// Unanswered polls in a row before a receiver is removed (suspected at half).
    #[arg(long, default_value_t = 6, value_name = "POLLS")]
    pub remove_after: u32,
    /// Remove a receiver whose window stays closed this long while data
    /// waits for it (its reader stopped: `| sleep`, a full disk), so one
    /// stuck reader cannot hold the group for ever; `0s`: wait for ever.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub stall_timeout: HumanDuration,
    #[command(flatten)]
    pub keys: crate::args::KeyArgs,
}

/// `rmcast pipe recv`.
#[derive(Args, Debug)]
pub struct PipeRecvArgs {
    /// Multicast group and port.
    #[arg(long, default_value = "239.77.0.1:7710", value_name = "ADDR:PORT")]
    pub group: SocketAddrV4,
    /// Local interface address to join on and answer from.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub iface: Ipv4Addr,
    /// Unicast port invitations come to (0: any free port, fine for announcements).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Receive buffer in packets, advertised to the sender as the window.
    #[arg(long, default_value_t = 1024, value_name = "PACKETS")]
    pub buffer: u32,
    /// Name shown in the sender's events [default: HOST:PID].
    #[arg(long)]
    pub name: Option<String>,
    /// Give up if no sender admits this receiver within this time [default: wait forever].
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<HumanDuration>,
    /// Give up when the sender is silent this long during the stream.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub sender_timeout: HumanDuration,
    /// After the end, keep answering the sender's last polls this long.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub linger: HumanDuration,
    #[command(flatten)]
    pub keys: crate::args::KeyArgs,
}

/// Runs `rmcast pipe`.
pub fn run(a: PipeArgs) -> ExitCode {
    let result = match a.command {
        PipeCommand::Send(s) => send(s),
        PipeCommand::Recv(r) => recv(r),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rmcast pipe: error: {}", crate::error_text(&e));
            ExitCode::from(1)
        }
    }
}

fn who(m: &MemberInfo) -> String {
    if m.name.is_empty() {
        format!("rank {} ({})", m.id.0, m.addr)
    } else {
        format!("rank {} {:?} ({})", m.id.0, m.name, m.addr)
    }
}

fn print_event(e: &SenderEvent) {
    let t = e.elapsed.as_secs_f64();
    let m = e.member.as_ref().map_or_else(String::new, who);
    match &e.event {
        StreamEvent::Joined(_) => eprintln!("rmcast pipe: {t:.3}s joined {m}"),
        StreamEvent::Established { members } => {
            eprintln!("rmcast pipe: {t:.3}s established with {members} receiver(s)");
        }
        StreamEvent::Suspected(_) => eprintln!("rmcast pipe: {t:.3}s suspected {m}"),
        StreamEvent::Unsuspected(_) => eprintln!("rmcast pipe: {t:.3}s answering again {m}"),
        StreamEvent::Removed { reason: r, .. } => {
            eprintln!("rmcast pipe: {t:.3}s removed {m}: {}", r.describe());
        }
        StreamEvent::Left(_) => eprintln!("rmcast pipe: {t:.3}s left {m}"),
        StreamEvent::Closed => eprintln!("rmcast pipe: {t:.3}s closed"),
    }
}

fn send(a: PipeSendArgs) -> Result<ExitCode> {
    let wanted = match (a.receivers, a.invite.len()) {
        (None, 0) => bail!(
            "say how many receivers to admit (--receivers N) or whom to invite (--invite ADDR,...)"
        ),
        (Some(n), 0) => usize::from(n),
        (None, k) => k,
        (Some(n), k) if usize::from(n) == k => k,
        (Some(n), k) => bail!("--receivers {n} but --invite names {k} address(es)"),
    };
    let message = usize::try_from(a.message).unwrap_or(usize::MAX);
    if message == 0 || message > 16 << 20 {
        bail!("--message must be 1 byte to 16 MiB");
    }
    let mut cfg = StreamSendConfig {
        group: a.group,
        iface: a.iface,
        ttl: a.ttl,
        wanted: Some(wanted),
        group_key: crate::session_key(&a.keys, "pipe send")?,
        ..StreamSendConfig::default()
    };
    let p = &mut cfg.proto;
    p.admission = if a.invite.is_empty() {
        Admission::Announce {
            duration: a.wait.0,
            interval: Duration::from_millis(100),
            receivers_max: u16::try_from(wanted).unwrap_or(u16::MAX),
        }
    } else {
        Admission::Invite {
            receivers: a.invite.clone(),
            concurrency: 16,
        }
    };
    p.response_rate = a.response_rate;
    p.congestion = match a.congestion {
        CongestionArg::Off => CongestionControl::Off,
        CongestionArg::TcpLike => CongestionControl::TcpLike,
    };
    p.payload_size = a.payload;
    p.send_buffer_packets = a.buffer;
    p.message_bytes_max = message as u32;
    p.remove_after = a.remove_after.max(1);
    p.stall_timeout = Some(a.stall_timeout.0).filter(|d| !d.is_zero());
    p.suspect_after = (a.remove_after / 2).max(1);
    p.group_key = cfg.group_key.clone();
    // Sealed packets carry the seal's counter and tag in place of as many
    // stream bytes.
    let payload = usize::from(p.packet_payload()).max(1);
    let need = message.div_ceil(payload);
    if need > a.buffer as usize {
        bail!(
            "a --message of {message} bytes needs {need} packets of {payload} stream bytes; --buffer {} cannot hold one",
            a.buffer
        );
    }

    let mut sender = StreamSender::open(cfg).context("opening the stream")?;
    let events = sender.take_events().expect("events");
    let printer = std::thread::spawn(move || {
        for e in events {
            print_event(&e);
        }
    });
    eprintln!(
        "rmcast pipe: session {} on {} from {}; {}",
        sender.session(),
        a.group,
        sender.local_addr(),
        if a.invite.is_empty() {
            format!("announcing, waiting for {wanted} receiver(s)")
        } else {
            format!("inviting {wanted} receiver(s)")
        }
    );
    let established = sender.wait_established(None)?.unwrap_or_default();
    if established < wanted {
        let report = sender.close().ok();
        let _ = printer.join();
        eprintln!("rmcast pipe: only {established} of {wanted} receiver(s) joined; nothing sent");
        if let Some(why) = report.and_then(|r| r.auth_failures) {
            eprintln!("rmcast pipe: packets that did not authenticate: {why}");
        }
        return Ok(ExitCode::from(EXIT_PARTIAL));
    }

    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; message];
    let mut failed = None;
    loop {
        let n = fill(&mut stdin, &mut buf).context("reading stdin")?;
        if n > 0
            && let Err(e) = sender.send(&buf[..n])
        {
            failed = Some(e);
            break;
        }
        if n < buf.len() {
            break;
        }
    }
    let report = sender.close().context("closing the stream")?;
    let _ = printer.join();
    let confirmed = report
        .members
        .iter()
        .filter(|m| m.close_confirmed && m.status == rmcast::stream::MemberStatus::Live)
        .count();
    eprintln!(
        "rmcast pipe: {} bytes in {} messages; {confirmed} of {} receiver(s) confirmed everything in {:.3} s ({:.1} Mbit/s)",
        report.bytes, report.messages, report.established, report.seconds, report.goodput_mbps
    );
    if let Some(e) = failed {
        eprintln!("rmcast pipe: stopped sending: {e}");
    }
    if report.ok {
        return Ok(ExitCode::SUCCESS);
    }
    for (m, r) in &report.removed {
        eprintln!(
            "rmcast pipe: not delivered to {}: removed, {}",
            who(m),
            r.describe()
        );
    }
    for m in &report.left {
        eprintln!("rmcast pipe: not delivered to {}: left", who(m));
    }
    Ok(ExitCode::from(EXIT_PARTIAL))
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn recv(a: PipeRecvArgs) -> Result<ExitCode> {
    let mut cfg = StreamRecvConfig {
        group: a.group,
        iface: a.iface,
        port: a.port,
        connect_timeout: a.timeout.map(|d| d.0),
        group_key: crate::session_key(&a.keys, "pipe recv")?,
        ..StreamRecvConfig::default()
    };
    cfg.proto.buffer_packets = a.buffer;
    cfg.proto.sender_timeout = a.sender_timeout.0;
    cfg.proto.linger = a.linger.0;
    if let Some(name) = a.name {
        cfg.proto.name = name;
    }
    let mut receiver = StreamReceiver::open(cfg).context("joining the group")?;
    eprintln!(
        "rmcast pipe: listening on {}, invitations to {}",
        a.group,
        receiver.local_addr()
    );
    let mut stdout = std::io::stdout().lock();
    let mut buf = Vec::with_capacity(64 << 10);
    let mut joined = false;
    let outcome = loop {
        buf.clear();
        let r = receiver.read_into(&mut buf);
        if !joined && let Some((session, rank)) = receiver.membership() {
            joined = true;
            eprintln!("rmcast pipe: joined session {session} with rank {rank}");
        }
        match r {
            Ok(Some(_)) => {
                if let Err(e) = stdout.write_all(&buf) {
                    break Err(format!("cannot write stdout: {e}"));
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.to_string()),
        }
    };
    let flushed = stdout.flush();
    for e in receiver.events() {
        match e {
            StreamReceiverEvent::Closed => eprintln!("rmcast pipe: closed by the sender"),
            StreamReceiverEvent::Left => eprintln!("rmcast pipe: left"),
            StreamReceiverEvent::Failed(why) => eprintln!("rmcast pipe: failed: {why}"),
            StreamReceiverEvent::Connected { .. } => {}
        }
    }
    let report = receiver.finish();
    match (outcome, flushed) {
        (Ok(()), Ok(())) if report.complete => {
            eprintln!(
                "rmcast pipe: {} bytes in {} messages, complete ({:.3} s, {:.1} Mbit/s)",
                report.bytes, report.messages, report.seconds, report.goodput_mbps
            );
            Ok(ExitCode::SUCCESS)
        }
        (Ok(()), Ok(())) => {
            eprintln!(
                "rmcast pipe: the stream ended incomplete after {} bytes",
                report.bytes
            );
            Ok(ExitCode::from(1))
        }
        (Err(e), _) => {
            eprintln!("rmcast pipe: {e} (after {} bytes)", report.bytes);
            Ok(ExitCode::from(1))
        }
        (Ok(()), Err(e)) => {
            eprintln!("rmcast pipe: cannot write stdout: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
