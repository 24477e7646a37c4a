//! NORM: the lab's own file sender and receiver over libnorm
//! (`rmcast lab norm-send` / `norm-recv`, compiled in when libnorm-dev is
//! installed), fixed rate, watermark acknowledgements from every receiver.

use super::driver::{Completion, Ctx, Plan, Tool, paced_rate, s};
use anyhow::{Context, Result};
use clap::Args;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// The NORM plan.
pub fn plan(tool: &Tool, c: &Ctx) -> std::result::Result<Plan, String> {
    let paced = paced_rate(tool, c.rate_bits_per_s);
    if !NORM_BUILT {
        return Err(s(
            "unavailable: rmcast-lab was built without libnorm (apt-get install libnorm-dev, then rebuild)",
        ));
    }
    let recv = c
        .receivers()
        .map(|i| {
            let mut args = vec![
                s("norm-recv"),
                s("--dir"),
                c.out(i),
                s("--addr"),
                s(c.group),
                s("--port"),
                s(c.port),
                s("--iface"),
                s(c.tb.iface(i)),
                s("--id"),
                s(i + 1),
                s("--timeout"),
                s(c.limit_s.ceil()),
                s("--linger"),
                s(2),
            ];
            args.extend(tool.recv_args.iter().cloned());
            c.hidden(i, args)
        })
        .collect();
    let ids: Vec<String> = (2..=c.n + 1).map(s).collect();
    let mut args = vec![
        s("norm-send"),
        c.object_arg(),
        s("--addr"),
        s(c.group),
        s("--port"),
        s(c.port),
        s("--iface"),
        s(c.tb.iface(0)),
        s("--rate-bps"),
        s(paced.unwrap_or(950_000_000)),
        s("--ids"),
        ids.join(","),
        s("--id"),
        s(1),
        s("--timeout"),
        s(c.limit_s.ceil()),
    ];
    args.extend(tool.args.iter().cloned());
    Ok(Plan {
        relays: Vec::new(),
        receivers: recv,
        sender: c.hidden(0, args),
        daemon_status: None,
        completion: Completion::SenderExit,
        verify: true,
        served: c.n,
        settle_s: 0.3,
    })
}

/// Whether the NORM driver was compiled in (libnorm-dev present at build time).
pub const NORM_BUILT: bool = cfg!(rml_norm);

#[cfg(rml_norm)]
unsafe extern "C" {
    fn rml_norm_send(
        file: *const libc::c_char,
        addr: *const libc::c_char,
        port: libc::c_int,
        iface: *const libc::c_char,
        rate_bps: f64,
        ids: *const libc::c_uint,
        n_ids: libc::c_int,
        my_id: libc::c_uint,
        timeout_s: f64,
        num_parity: libc::c_uint,
        auto_parity: libc::c_uint,
    ) -> libc::c_int;
    fn rml_norm_recv(
        dir: *const libc::c_char,
        addr: *const libc::c_char,
        port: libc::c_int,
        iface: *const libc::c_char,
        my_id: libc::c_uint,
        timeout_s: f64,
        linger_s: f64,
    ) -> libc::c_int;
}

/// `lab norm-send`.
#[derive(Args, Debug)]
pub struct NormSendArgs {
    /// File to send.
    pub file: PathBuf,
    /// Multicast address.
    #[arg(long)]
    pub addr: Ipv4Addr,
    /// Port.
    #[arg(long)]
    pub port: u16,
    /// Interface name.
    #[arg(long)]
    pub iface: String,
    /// Fixed sending rate, bits per second (congestion control off).
    #[arg(long)]
    pub rate_bps: f64,
    /// NORM node ids of the receivers that must acknowledge.
    #[arg(long, value_delimiter = ',')]
    pub ids: Vec<u32>,
    /// This node's id.
    #[arg(long)]
    pub id: u32,
    /// Give up after this many seconds.
    #[arg(long)]
    pub timeout: f64,
    /// NORM's Reed–Solomon parity: up to this many parity packets per
    /// block of 64 answer NACKs (0: plain retransmission).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=128))]
    pub parity: u32,
    /// Of those, this many go with every block before anyone asks.
    #[arg(long, default_value_t = 0)]
    pub auto_parity: u32,
}

/// `lab norm-recv`.
#[derive(Args, Debug)]
pub struct NormRecvArgs {
    /// Directory for the received file (stored as `object`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Multicast address.
    #[arg(long)]
    pub addr: Ipv4Addr,
    /// Port.
    #[arg(long)]
    pub port: u16,
    /// Interface name.
    #[arg(long)]
    pub iface: String,
    /// This node's id.
    #[arg(long)]
    pub id: u32,
    /// Give up after this many seconds.
    #[arg(long)]
    pub timeout: f64,
    /// Seconds to stay after completion so the acknowledgement gets out.
    #[arg(long, default_value_t = 2.0)]
    pub linger: f64,
}

fn cstr(x: &str) -> Result<std::ffi::CString> {
    std::ffi::CString::new(x).context("NUL in argument")
}

/// Runs the NORM sender; exit code 0 once every receiver acknowledged.
pub fn norm_send(a: &NormSendArgs) -> Result<i32> {
    if a.auto_parity > a.parity {
        anyhow::bail!(
            "--auto-parity {} exceeds --parity {}: proactive parity is drawn from the block's parity",
            a.auto_parity,
            a.parity
        );
    }
    #[cfg(rml_norm)]
    {
        let file = cstr(&a.file.display().to_string())?;
        let addr = cstr(&a.addr.to_string())?;
        let iface = cstr(&a.iface)?;
        // SAFETY: every pointer is a live NUL-terminated string or a slice of n_ids u32s.
        let rc = unsafe {
            rml_norm_send(
                file.as_ptr(),
                addr.as_ptr(),
                a.port.into(),
                iface.as_ptr(),
                a.rate_bps,
                a.ids.as_ptr(),
                a.ids.len() as libc::c_int,
                a.id,
                a.timeout,
                a.parity,
                a.auto_parity,
            )
        };
        Ok(rc)
    }
    #[cfg(not(rml_norm))]
    {
        let _ = (a, cstr);
        anyhow::bail!("built without libnorm-dev: NORM is unavailable")
    }
}

/// Runs the NORM receiver; exit code 0 with a complete file.
pub fn norm_recv(a: &NormRecvArgs) -> Result<i32> {
    #[cfg(rml_norm)]
    {
        std::fs::create_dir_all(&a.dir)?;
        let dir = cstr(&a.dir.display().to_string())?;
        let addr = cstr(&a.addr.to_string())?;
        let iface = cstr(&a.iface)?;
        // SAFETY: every pointer is a live NUL-terminated string.
        let rc = unsafe {
            rml_norm_recv(
                dir.as_ptr(),
                addr.as_ptr(),
                a.port.into(),
                iface.as_ptr(),
                a.id,
                a.timeout,
                a.linger,
            )
        };
        Ok(rc)
    }
    #[cfg(not(rml_norm))]
    {
        let _ = a;
        anyhow::bail!("built without libnorm-dev: NORM is unavailable")
    }
}
