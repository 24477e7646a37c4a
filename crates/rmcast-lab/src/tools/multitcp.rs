//! MultiTCP: one TCP connection from the sender to each receiver, the
//! lab's own `rmcast lab tcp-send` / `tcp-recv`.

use super::driver::{Completion, Ctx, Plan, Tool, s};
use anyhow::{Context, Result, bail};
use clap::Args;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The MultiTCP plan (it takes no extra arguments: `args` are ignored).
pub fn plan(_tool: &Tool, c: &Ctx) -> std::result::Result<Plan, String> {
    let port = |i: usize| c.port as usize + i;
    let recv = c
        .receivers()
        .map(|i| {
            let args = vec![
                s("tcp-recv"),
                s("--listen"),
                format!("{}:{}", c.addr(i), port(i)),
                s("--out"),
                format!("{}/object.bin", c.out(i)),
                s("--timeout"),
                s(c.limit_s.ceil()),
            ];
            c.hidden(i, args)
        })
        .collect();
    let to: Vec<String> = (1..=c.n)
        .map(|i| format!("{}:{}", c.addr(i), port(i)))
        .collect();
    let args = vec![
        s("tcp-send"),
        c.object_arg(),
        s("--to"),
        to.join(","),
        s("--timeout"),
        s(c.limit_s.ceil()),
    ];
    Ok(Plan {
        receivers: recv,
        relays: Vec::new(),
        sender: c.hidden(0, args),
        daemon_status: None,
        completion: Completion::SenderExit,
        verify: true,
        served: c.n,
        settle_s: 0.3,
    })
}

/// `lab tcp-send`.
#[derive(Args, Debug)]
pub struct TcpSendArgs {
    /// File to send.
    pub file: PathBuf,
    /// Receivers (ADDR:PORT, comma-separated): one TCP connection each.
    #[arg(long, value_delimiter = ',')]
    pub to: Vec<SocketAddr>,
    /// Give up after this many seconds.
    #[arg(long)]
    pub timeout: f64,
}

/// `lab tcp-recv`.
#[derive(Args, Debug)]
pub struct TcpRecvArgs {
    /// Address to listen on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// File to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Give up after this many seconds.
    #[arg(long)]
    pub timeout: f64,
}

/// MultiTCP sender: one thread and connection per receiver; each sends the
/// size (8 bytes, big endian) and the file, then waits for a one-byte
/// acknowledgement sent after the receiver wrote everything.
pub fn tcp_send(a: &TcpSendArgs) -> Result<i32> {
    let deadline = Instant::now() + Duration::from_secs_f64(a.timeout);
    let handles: Vec<_> =
        a.to.iter()
            .map(|&to| {
                let file = a.file.clone();
                std::thread::spawn(move || -> Result<()> {
                    let mut stream = loop {
                        match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
                            Ok(s) => break s,
                            Err(e) if Instant::now() < deadline => {
                                let _ = e;
                                std::thread::sleep(Duration::from_millis(50));
                            }
                            Err(e) => return Err(e).with_context(|| format!("connect {to}")),
                        }
                    };
                    let remaining = deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(1));
                    stream.set_write_timeout(Some(remaining))?;
                    stream.set_read_timeout(Some(remaining))?;
                    let mut f = std::fs::File::open(&file)?;
                    let size = f.metadata()?.len();
                    stream.write_all(&size.to_be_bytes())?;
                    let sent = std::io::copy(&mut f, &mut stream)
                        .with_context(|| format!("send to {to}"))?;
                    if sent != size {
                        bail!("sent {sent} of {size} bytes to {to}");
                    }
                    let mut ack = [0u8; 1];
                    stream
                        .read_exact(&mut ack)
                        .with_context(|| format!("acknowledgement from {to}"))?;
                    if ack[0] != 1 {
                        bail!("{to} reported a failure");
                    }
                    Ok(())
                })
            })
            .collect();
    let mut failed = 0;
    for (h, to) in handles.into_iter().zip(&a.to) {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("tcp-send: {to}: {e:#}");
                failed += 1;
            }
            Err(_) => {
                eprintln!("tcp-send: {to}: thread panicked");
                failed += 1;
            }
        }
    }
    Ok(i32::from(failed > 0))
}

/// MultiTCP receiver: accepts one connection, stores the file, acknowledges.
pub fn tcp_recv(a: &TcpRecvArgs) -> Result<i32> {
    let deadline = Instant::now() + Duration::from_secs_f64(a.timeout);
    let listener =
        TcpListener::bind(a.listen).with_context(|| format!("listen on {}", a.listen))?;
    listener.set_nonblocking(true)?;
    let mut stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).context("no sender connected"),
        }
    };
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ))?;
    let mut size = [0u8; 8];
    stream.read_exact(&mut size)?;
    let size = u64::from_be_bytes(size);
    if let Some(dir) = a.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::File::create(&a.out)?;
    let got = std::io::copy(&mut (&mut stream).take(size), &mut f)?;
    f.flush()?;
    let ok = got == size;
    stream.write_all(&[u8::from(ok)])?;
    if !ok {
        eprintln!("tcp-recv: got {got} of {size} bytes");
    }
    Ok(i32::from(!ok))
}
