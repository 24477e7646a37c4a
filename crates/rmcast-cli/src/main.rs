//! `rmcast`: send a file reliably to many receivers over IP multicast.

mod args;
mod bcast;
mod events;
mod man;
mod pipe;
mod relay;
mod report;
mod serve;

use anyhow::{Context, Result, bail};
use args::{Cli, Command, CommonArgs, DemoArgs, KeyArgs, KeygenArgs, RecvArgs, SendArgs};
use clap::FromArgMatches;
use clap::parser::ValueSource;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Parses the command line, recording which shared flags it gave.
fn parse() -> Cli {
    parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
}

/// Parses `argv` (the program's name first), as [`parse`] does.
fn parse_from<I, T>(argv: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let command = args::command();
    let matches = command.clone().try_get_matches_from(argv)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    let common = match &mut cli.command {
        Command::Send(a) => Some(&mut a.common),
        Command::Demo(a) => Some(&mut a.common),
        Command::Relay(a) => Some(&mut a.common),
        _ => None,
    };
    if let (Some(common), Some((name, sub))) = (common, matches.subcommand())
        && let Some(sub_command) = command.find_subcommand(name)
    {
        common.given = sub_command
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .filter(|id| sub.value_source(id) == Some(ValueSource::CommandLine))
            .map(str::to_owned)
            .collect();
    }
    Ok(cli)
}

/// Runs `rmcast send` with the arguments `argv` (as a user would type
/// them, the program's name first); `true` when every receiver verified.
pub fn send_argv(argv: &[std::ffi::OsString], cancel: Arc<AtomicBool>) -> Result<bool> {
    let cli = parse_from(argv).map_err(|e| anyhow::anyhow!("{e}"))?;
    let Command::Send(a) = cli.command else {
        unreachable!("a send command line");
    };
    Ok(send(a, cancel)? == Outcome::Done)
}

fn main() -> ExitCode {
    let cli = parse();
    init_tracing(cli.verbose);
    if let Command::Lab(a) = cli.command {
        // The lab installs its own signal handling (it must tear down its
        // namespaces on Ctrl-C).
        return match rmcast_lab::run(a) {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => {
                eprintln!("rmcast lab: error: {}", error_text(&e));
                ExitCode::from(1)
            }
        };
    }
    if let Command::Pipe(a) = cli.command {
        // No Ctrl-C handler: the blocking stream ends with the process
        // (receivers time out, the sender removes what it cannot reach).
        return pipe::run(a);
    }
    match &cli.command {
        Command::Completions(a) => {
            return finish(man::completions(a).map(|()| Outcome::Done), false);
        }
        Command::Man(a) => return finish(man::man(a).map(|()| Outcome::Done), false),
        _ => {}
    }
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let cancel = cancel.clone();
        // A second Ctrl-C kills the process the usual way.
        let _ = ctrlc::set_handler(move || {
            if cancel.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
        });
    }
    let result = match cli.command {
        Command::Keygen(a) => keygen(&a).map(Outcome::from),
        Command::Send(a) => send(a, cancel.clone()),
        Command::Recv(a) => recv(a, cancel.clone()).map(Outcome::from),
        Command::Serve(a) => serve::run(a, cancel.clone()).map(Outcome::from),
        Command::Demo(a) => demo(a, cancel.clone()).map(Outcome::from),
        Command::Bcast(a) => bcast::run(a, cancel.clone()).map(Outcome::from),
        Command::Relay(a) => relay::run(a, cancel.clone()).map(Outcome::from),
        Command::Lab(_) | Command::Pipe(_) | Command::Completions(_) | Command::Man(_) => {
            unreachable!("handled above")
        }
    };
    finish(result, cancel.load(Ordering::SeqCst))
}

/// How a command ended, for its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Everything asked for was done.
    Done,
    /// It failed; the report says why.
    Failed,
    /// Some receivers got it, others never came (exit status 3).
    Partial,
}

impl From<bool> for Outcome {
    fn from(ok: bool) -> Self {
        if ok { Outcome::Done } else { Outcome::Failed }
    }
}

/// The exit status (listed under EXIT STATUS in `--help`): 0 done, 1
/// failed, 3 partial, 130 interrupted (Ctrl-C), whatever the interrupted
/// call returned.
fn finish(result: Result<Outcome>, interrupted: bool) -> ExitCode {
    let code = match result {
        Ok(Outcome::Done) => 0,
        Ok(Outcome::Failed) => 1,
        Ok(Outcome::Partial) => 3,
        Err(e) => {
            eprintln!("rmcast: error: {}", error_text(&e));
            1
        }
    };
    ExitCode::from(if interrupted { 130 } else { code })
}

/// `e` and its causes on one line, as `{:#}` prints them, but a cause
/// whose text its parent already ends with is said once: the library's
/// errors show their system error in their own text *and* as their source
/// (for programs that print only the top), which `{:#}` would repeat
/// ("cannot listen on ...: Address already in use (os error 98): Address
/// already in use (os error 98)").
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.is_empty() {
            text = part;
        } else if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
    }
    text
}

fn init_tracing(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RMCAST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Colour only for a person at a terminal who has not asked for none
    // (https://no-color.org); logs piped to a file or journald stay plain.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
}

/// A progress bar on a terminal; nothing under `--json` or when piped.
pub fn progress_bar(json: bool, what: &str) -> Option<ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} {msg:<10} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(what.to_owned());
    Some(bar)
}

pub fn progress_fn(bar: &Option<ProgressBar>) -> impl FnMut(rmcast::Progress) + '_ {
    move |p: rmcast::Progress| {
        if let Some(bar) = &bar {
            bar.set_length(p.total_bytes);
            bar.set_position(p.done_bytes);
            match p.joined {
                // While waiting, who has come, not an empty bar.
                Some((joined, wanted)) => bar.set_message(format!("{joined}/{wanted} joined")),
                None => bar.set_message(p.phase),
            }
        }
    }
}

/// `rmcast keygen`: a fresh group key on stdout or into a new 0600 file.
fn keygen(a: &KeygenArgs) -> Result<bool> {
    if a.signing {
        let path = a.out.as_ref().expect("clap: --signing requires -o");
        let key = rmcast::generate_signing_key();
        let public = rmcast::write_signing_key(path, &key)?;
        eprintln!(
            "rmcast: wrote signing key {} (secret: `rmcast send --sign`) and {} (for `rmcast recv --trust`)",
            path.display(),
            public.display()
        );
        return Ok(true);
    }
    let key = rmcast::generate_key();
    match &a.out {
        Some(path) => {
            rmcast::write_key(path, &key)?;
            eprintln!("rmcast: wrote group key {} to {}", key.id(), path.display());
        }
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(key.to_file().as_bytes())
                .and_then(|()| out.flush())
                .context("writing the key to stdout")?;
            if std::io::stdout().is_terminal() {
                eprintln!(
                    "rmcast: redirect this into a file: `rmcast keygen > group.key` (or -o FILE)"
                );
            }
        }
    }
    Ok(true)
}

/// The group key `send`, `recv` and `pipe` run under: `--key` (or
/// RMCAST_KEY_FILE), or none with `--insecure` (said once on stderr), or
/// an error that says how to make one.
pub fn session_key(keys: &KeyArgs, command: &str) -> Result<Option<Arc<rmcast::GroupKey>>> {
    match (key_path(keys), keys.insecure) {
        (Some(path), _) => {
            let key = rmcast::load_key(&path)?;
            tracing::info!("group key {} from {}", key.id(), path.display());
            Ok(Some(key))
        }
        (None, true) => {
            eprintln!(
                "rmcast: warning: --insecure: this session is not authenticated or encrypted; \
                 anyone on the network can read it, forge its data or end it"
            );
            Ok(None)
        }
        (None, false) => bail!(
            "`rmcast {command}` needs a group key: {}",
            rmcast::KEY_HOWTO
        ),
    }
}

/// The key file to use: `--key`, else `RMCAST_KEY_FILE` unless `--insecure`
/// (an explicit choice overrides the environment).
fn key_path(keys: &KeyArgs) -> Option<std::path::PathBuf> {
    let from_env = std::env::var_os(rmcast::KEY_FILE_ENV)
        .filter(|v| !v.is_empty() && !keys.insecure)
        .map(std::path::PathBuf::from);
    keys.key.clone().or(from_env)
}

/// `demo`'s key: the one given, none with --insecure, else a fresh one
/// that lives as long as the demo (so the one-liner needs no file).
fn demo_key(keys: &KeyArgs) -> Result<Option<Arc<rmcast::GroupKey>>> {
    match (key_path(keys), keys.insecure) {
        (Some(path), _) => Ok(Some(rmcast::load_key(&path)?)),
        (None, true) => Ok(None),
        (None, false) => Ok(Some(Arc::new(rmcast::generate_key()))),
    }
}

pub fn send_config(common: &CommonArgs, cancel: Arc<AtomicBool>) -> Result<rmcast::SendConfig> {
    let mut cfg = rmcast::SendConfig {
        group: common.group,
        iface: common.iface,
        ttl: common.ttl,
        cancel: Some(cancel),
        ..rmcast::SendConfig::default()
    };
    common.apply(&mut cfg.proto)?;
    cfg.loss = common.loss.unwrap_or(0.0);
    Ok(cfg)
}

/// What the sender tells as it happens: `--json-events` lines, and
/// `--explain`'s account of auto's choice on stderr.
pub fn event_hook(events: Option<Arc<events::Events>>, explain: bool) -> Option<rmcast::EventHook> {
    if events.is_none() && !explain {
        return None;
    }
    Some(rmcast::EventHook(Arc::new(move |e| {
        if let Some(ev) = &events {
            ev.sender(e);
        }
        if let (true, rmcast::SenderEvent::Chose(c)) = (explain, e) {
            eprintln!("rmcast: {c}");
        }
    })))
}

fn send(a: SendArgs, cancel: Arc<AtomicBool>) -> Result<Outcome> {
    let tree = a.file.is_dir();
    if !tree && !a.file.is_file() {
        bail!("{} is not a readable file or directory", a.file.display());
    }
    let expected = a.expect.as_deref().map(read_expected).transpose()?;
    let receivers = match (a.receivers, &expected) {
        (Some(n), _) => n,
        (None, Some(names)) => u16::try_from(names.len())
            .ok()
            .filter(|&n| (1..=65520).contains(&n))
            .with_context(|| {
                format!(
                    "--expect names {} receivers; give 1 to 65520, or --receivers",
                    names.len()
                )
            })?,
        (None, None) => unreachable!("clap requires --receivers or --expect"),
    };
    let key = session_key(&a.keys, "send")?;
    let mut cfg = send_config(&a.common, cancel.clone())?;
    cfg.proto.min_receivers = a.min_receivers;
    cfg.proto.group_key = key;
    if let Some(path) = &a.sign {
        cfg.signing_key = Some(rmcast::load_signing_key(path)?);
    }
    cfg.proto.receivers = receivers;
    cfg.proto.join_wait = a.wait.0;
    let hunt = a.common.rate_control == args::RateControlArg::Hunt;
    if (a.rate_group || a.rate_trace.is_some()) && !hunt {
        bail!("--rate-group and --rate-trace need --rate-control hunt");
    }
    if a.rate_group {
        cfg.proto.rate_group = Some(rmcast::RateGroupConfig::default());
    }
    cfg.rate_trace = a.rate_trace.clone();
    cfg.socket_buffer_bytes = usize::try_from(a.socket_buffer).unwrap_or(usize::MAX);
    let events = a.json_events.then(events::Events::new);
    cfg.on_event = event_hook(events.clone(), a.common.explain);
    let bar = progress_bar(a.common.json || a.json_events, "send");
    let mut bar_progress = progress_fn(&bar);
    let mut progress = |p: rmcast::Progress| {
        bar_progress(p);
        if let Some(ev) = &events {
            ev.progress(p);
        }
    };
    let report = if let Some(mut ov) = a.common.overlay() {
        if tree {
            bail!(
                "{} is a directory: the TCP overlays send one file; send the tree with a \
                 multicast --protocol, or tar it first",
                a.file.display()
            );
        }
        ov.key = cfg.proto.group_key.clone();
        ov.signing_key = cfg.signing_key.clone();
        if a.min_receivers.is_some() {
            bail!("--min-receivers applies to the multicast protocols, not to the TCP overlays");
        }
        ov.receivers = receivers;
        ov.join_wait = a.wait.0;
        ov.cancel = Some(cancel);
        rmcast::overlay::send_file(&a.file, &ov, Some(&mut progress))
    } else if let Some((mut ov, asked)) = a.common.hybrid(a.no_lobby) {
        // A tree goes over multicast only: the lobby refuses, by name,
        // receivers that do not hear the group.
        ov.key = cfg.proto.group_key.clone();
        ov.signing_key = cfg.signing_key.clone();
        ov.cancel = Some(cancel);
        let h = rmcast::hybrid::HybridConfig {
            multicast: cfg,
            overlay: ov,
            tcp_shape: None,
            probe_wait: rmcast::hybrid::DEFAULT_PROBE_WAIT,
        };
        match rmcast::hybrid::HybridSender::bind(&h) {
            Ok(lobby) => lobby.send_file(&a.file, Some(&mut progress)).map(|mut r| {
                // A lobby nobody needed is no news: the session was all
                // multicast, as without one.
                if !asked
                    && r.hybrid
                        .as_ref()
                        .is_some_and(|h| h.tcp.is_empty() && h.refused.is_empty())
                {
                    r.hybrid = None;
                }
                r
            }),
            Err(e) if !asked => {
                eprintln!(
                    "rmcast: warning: no lobby: {e}; receivers that cannot hear the group \
                     cannot register (--control ADDR:PORT puts the lobby elsewhere, \
                     --no-lobby goes without)"
                );
                rmcast::send_path(&a.file, &h.multicast, Some(&mut progress))
            }
            Err(e) => Err(e),
        }
    } else {
        rmcast::send_path(&a.file, &cfg, Some(&mut progress))
    }
    .with_context(|| format!("sending {}", a.file.display()))?;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let never_came = expected
        .as_deref()
        .map(|names| report::never_came(names, &report))
        .unwrap_or_default();
    match &events {
        Some(ev) => {
            let v = report::send_json_expected(&report, &never_came);
            ev.emit(
                "finished",
                serde_json::json!({ "ok": report.ok, "report": v }),
            );
        }
        None => report::print_send_expected(&report, a.common.json, &never_came),
    }
    if report::partial(&report) {
        return Ok(Outcome::Partial);
    }
    Ok(Outcome::from(report.ok))
}

/// The names of `--expect FILE`: one per line, `#` comments and blank
/// lines skipped, each at most once.
fn read_expected(path: &std::path::Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the expected receivers from {}", path.display()))?;
    let mut names: Vec<String> = Vec::new();
    for line in text.lines() {
        let name = line.split('#').next().unwrap_or("").trim();
        if !name.is_empty() && !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    if names.is_empty() {
        bail!("{} names no receiver (one name per line)", path.display());
    }
    Ok(names)
}

/// What every receiving command needs before it listens: the group key
/// (or the explicit choice to run without), the keys to trust, and the
/// output directory, created if missing.
pub fn receiver_setup(
    keys: &KeyArgs,
    trust: &[std::path::PathBuf],
    out: &std::path::Path,
    command: &str,
) -> Result<(Option<Arc<rmcast::GroupKey>>, Vec<rmcast::PublicKey>)> {
    let key = session_key(keys, command)?;
    let trust = trust
        .iter()
        .map(|p| rmcast::load_public_key(p))
        .collect::<Result<Vec<_>, _>>()?;
    std::fs::create_dir_all(out)
        .with_context(|| format!("creating output directory {}", out.display()))?;
    Ok((key, trust))
}

fn recv(a: RecvArgs, cancel: Arc<AtomicBool>) -> Result<bool> {
    let (key, trust) = receiver_setup(&a.keys, &a.trust, &a.out, "recv")?;
    let mut cfg = rmcast::RecvConfig {
        group: a.group,
        iface: a.iface,
        out_dir: a.out.clone(),
        loss: a.loss.unwrap_or(0.0),
        seed: a.seed,
        sender_timeout: a.sender_timeout.0,
        listen_timeout: a.timeout.map(|d| d.0),
        cancel: Some(cancel),
        rate_nak_interval: a.rate_nak_interval(),
        socket_buffer_bytes: usize::try_from(a.socket_buffer).unwrap_or(usize::MAX),
        group_key: key,
        trust,
        no_clobber: a.no_clobber,
        merge_tree: !a.atomic_tree,
        ..rmcast::RecvConfig::default()
    };
    if let Some(name) = &a.name {
        cfg.name = name.clone();
    }
    let events = a.json_events.then(events::Events::new);
    let bar = progress_bar(a.json || a.json_events, "recv");
    let mut bar_progress = progress_fn(&bar);
    let mut progress = |p: rmcast::Progress| {
        bar_progress(p);
        if let Some(ev) = &events {
            ev.progress(p);
        }
    };
    if a.sessions > 1 {
        if a.sender.is_some() {
            bail!("--sessions applies to multicast sessions, not to --sender (tcp-*)");
        }
        let results =
            rmcast::recv_sessions_to_dir(&cfg, usize::from(a.sessions), Some(&mut progress))?;
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        if let Some(ev) = &events {
            let ok = results.iter().all(|r| r.as_ref().is_ok_and(|r| r.verified));
            let sessions: Vec<_> = results
                .iter()
                .map(|r| match r {
                    Ok(r) => report::recv_json(r),
                    Err(e) => serde_json::json!({ "ok": false, "error": e.to_string() }),
                })
                .collect();
            ev.emit(
                "finished",
                serde_json::json!({ "ok": ok, "sessions": sessions }),
            );
            return Ok(ok);
        }
        return Ok(report::print_recv_sessions(&results, a.json));
    }
    let result = match &a.sender {
        Some(sender) => {
            let ov = rmcast::overlay::OverlayRecvConfig {
                sender: sender.resolve(a.group)?,
                listen: a.listen(),
                out_dir: cfg.out_dir.clone(),
                name: cfg.name.clone(),
                connect_timeout: cfg.listen_timeout,
                inactivity: cfg.sender_timeout,
                cancel: cfg.cancel.clone(),
                key: cfg.group_key.clone(),
                trust: cfg.trust.clone(),
                no_clobber: cfg.no_clobber,
                multicast: Some(cfg.clone()),
                ..rmcast::overlay::OverlayRecvConfig::default()
            };
            rmcast::overlay::recv_to_dir(&ov, Some(&mut progress))
        }
        None => rmcast::recv_to_dir(&cfg, Some(&mut progress)),
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    if let Some(ev) = &events {
        let (ok, v) = match &result {
            Ok(r) => (r.verified, report::recv_json(r)),
            Err(e) => (
                false,
                serde_json::json!({ "ok": false, "error": e.to_string() }),
            ),
        };
        ev.emit("finished", serde_json::json!({ "ok": ok, "report": v }));
        return Ok(ok);
    }
    match result {
        Ok(r) => {
            report::print_recv(Ok(&r), a.json);
            Ok(true)
        }
        Err(e) => {
            report::print_recv(Err(&e.to_string()), a.json);
            Ok(false)
        }
    }
}

fn demo(a: DemoArgs, cancel: Arc<AtomicBool>) -> Result<bool> {
    if let Some(mut ov) = a.common.overlay() {
        a.common.check_overlay_flags()?;
        ov.cancel = Some(cancel);
        ov.key = demo_key(&a.keys)?;
        if !a.common.given("control") {
            ov.control = "127.0.0.1:0".parse().expect("address");
        }
        let cfg = rmcast::overlay::OverlayDemoConfig {
            receivers: a.receivers,
            size: a.size,
            seed: a.common.seed,
            send: ov,
            keep_dir: a.keep.clone(),
        };
        let bar = progress_bar(a.common.json, "demo");
        let mut progress = progress_fn(&bar);
        let report = rmcast::overlay::demo(&cfg, Some(&mut progress))?;
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        report::print_send(&report.send, a.common.json, Some(&report));
        return Ok(report.send.ok && report.all_files_match);
    }
    let mut send = send_config(&a.common, cancel)?;
    send.proto.group_key = demo_key(&a.keys)?;
    send.proto.receivers = a.receivers;
    send.on_event = event_hook(None, a.common.explain);
    // The demo picks a free random port unless one was given explicitly.
    if !a.common.group_given() {
        send.group = rmcast::random_group();
    }
    let cfg = rmcast::DemoConfig {
        receivers: a.receivers,
        size: a.size,
        seed: a.common.seed,
        loss: a.common.loss.unwrap_or(0.0),
        keep_dir: a.keep.clone(),
        send,
    };
    let bar = progress_bar(a.common.json, "demo");
    let mut progress = progress_fn(&bar);
    let report = rmcast::demo(&cfg, Some(&mut progress))?;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    report::print_send(&report.send, a.common.json, Some(&report));
    Ok(report.send.ok && report.all_files_match)
}

#[cfg(test)]
mod tests {
    use super::error_text;
    use anyhow::Context;

    #[test]
    fn an_error_says_each_cause_once() {
        let io = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let lib = rmcast::Error::Io {
            context: "cannot listen for receivers on 127.0.0.1:7701".into(),
            source: io,
        };
        let e = Err::<(), _>(lib).context("sending ckpt.bin").unwrap_err();
        let text = error_text(&e);
        assert_eq!(
            text,
            "sending ckpt.bin: cannot listen for receivers on 127.0.0.1:7701: address in use"
        );
        // A cause its parent does not already say is kept.
        let e = Err::<(), _>(std::io::Error::other("disk full"))
            .context("writing out/a")
            .unwrap_err();
        assert_eq!(error_text(&e), "writing out/a: disk full");
    }
}
