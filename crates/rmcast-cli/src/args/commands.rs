//! The flags of each subcommand that moves data (`keygen`, `send`, `recv`,
//! `serve`, `demo`), and the group key they share.

use super::parse::*;
use super::*;

#[derive(Args, Debug, Clone, Default)]
pub struct KeyArgs {
    /// Group key file (from `rmcast keygen`): every packet is authenticated
    /// and encrypted under it. Every member of the group needs the same one.
    /// [default: $RMCAST_KEY_FILE]
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Run without a group key: unauthenticated and in the clear, so anyone
    /// on the network can read, forge or end the session. The other side
    /// must run --insecure too. Overrides $RMCAST_KEY_FILE.
    #[arg(long, conflicts_with = "key")]
    pub insecure: bool,
}

/// `rmcast keygen`.
#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Write the key to FILE (created with mode 0600; never overwritten)
    /// instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Make an Ed25519 signing key pair instead of a group key: FILE (secret,
    /// for `rmcast send --sign FILE`) and FILE.pub (for `rmcast recv --trust
    /// FILE.pub`). Needs -o.
    #[arg(long, requires = "out")]
    pub signing: bool,
}

/// `rmcast send`.
#[derive(Args, Debug)]
pub struct SendArgs {
    /// The file, or the directory tree, to send. A tree travels in one
    /// session (its files, empty directories, modes, mtimes and symbolic
    /// links that stay inside it) and is stored by receivers as a directory
    /// of the same name, swapped in whole once every file verified.
    #[arg(value_name = "PATH")]
    pub file: PathBuf,
    /// Receivers to wait for before sending [default with --expect: the
    /// number of names in its file].
    #[arg(long, short = 'n', value_parser = clap::value_parser!(u16).range(1..=65520),
          required_unless_present = "expect")]
    pub receivers: Option<u16>,
    /// Give up if fewer receivers registered within this time (see
    /// --min-receivers).
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub wait: HumanDuration,
    /// Start anyway when --wait runs out with at least M of the receivers
    /// registered: those get the file; the report names who never came and
    /// the exit status is 3 if every receiver that came verified. (UDP
    /// protocols.)
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u16).range(1..=65520))]
    pub min_receivers: Option<u16>,
    /// The receivers expected, one name per line (a receiver's --name, or
    /// the host part of its default HOST:PID name; `#` starts a comment):
    /// the report names those that never registered.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// Write one JSON object per line on stdout for each event as it
    /// happens (joined, progress every second, receiver_done,
    /// receiver_failed, finished with the --json report); no progress bar.
    #[arg(long, conflicts_with = "json")]
    pub json_events: bool,
    /// Several senders on one group (needs --rate-control hunt): join the
    /// group to hear the other senders and the receivers' rate NAKs, back
    /// off on any member's loss, and resynchronise rates with the other
    /// senders (the leader multicasts their average every 500 ms and on
    /// every join or leave). Give it to every sender of the group; the
    /// receivers run `rmcast recv --sessions N`.
    #[arg(long)]
    pub rate_group: bool,
    /// Write Hunt's controller trace to FILE as CSV: one row per change,
    /// t_s,spacing_us,rate_pps,state,sent,rtt_us (needs --rate-control hunt;
    /// plot it with `rmcast lab plot-trace`).
    #[arg(long, value_name = "FILE")]
    pub rate_trace: Option<PathBuf>,
    /// Kernel buffers of the sender's socket (SO_SNDBUF and SO_RCVBUF; the
    /// kernel doubles them). What a full send buffer holds is queued in
    /// front of the interface: a small one makes `EAGAIN` (Hunt's back
    /// pressure) come sooner.
    #[arg(long, default_value = "4MiB", value_parser = parse_size, value_name = "BYTES")]
    pub socket_buffer: u64,
    /// Sign the file (its hash, size and name) with this signing key (from
    /// `rmcast keygen --signing`): receivers run with `--trust FILE.pub`
    /// then keep it, and refuse content any other member sends.
    #[arg(long, value_name = "FILE")]
    pub sign: Option<PathBuf>,
    /// --protocol auto on an --iface other than loopback opens a lobby at
    /// the --iface address and the group's port + 1 (TCP), where receivers
    /// that may not hear the group register (`recv --sender HOST`): those
    /// that do not hear it get the file over TCP in the same session. This
    /// says not to (the port is taken, or a firewall would rather not see
    /// it); --control ADDR:PORT puts the lobby elsewhere.
    #[arg(long, conflicts_with = "control")]
    pub no_lobby: bool,
    #[command(flatten)]
    pub keys: KeyArgs,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `rmcast recv`.
#[derive(Args, Debug)]
pub struct RecvArgs {
    /// Directory to store the received file in (created if missing).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: PathBuf,
    /// Multicast group and port.
    #[arg(long, default_value = "239.77.0.1:7700", value_name = "ADDR:PORT")]
    pub group: SocketAddrV4,
    /// Local interface address to join on.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub iface: Ipv4Addr,
    /// Name shown in the sender's report [default: HOST:PID].
    #[arg(long)]
    pub name: Option<String>,
    /// Register with the sender at HOST (a name or an IPv4 address) and
    /// PORT [default: the group's port + 1] instead of joining a multicast
    /// group: a tcp-* sender serves this receiver over its TCP overlay; a
    /// hybrid sender (a multicast protocol with --control, or the default
    /// auto on a LAN, which opens its lobby at the group's port + 1) has it
    /// listen on its group (--iface) first, and serves it over TCP if the
    /// group is not heard (networks without multicast), then tells it
    /// whether every receiver of the session verified (it waits for that
    /// word before it exits).
    #[arg(long, value_name = "HOST[:PORT]", value_parser = parse_sender)]
    pub sender: Option<SenderArg>,
    /// With --sender: address to accept the TCP overlay's data connections
    /// on (port 0: any free port) [default: the --iface address, any port].
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// Give up if no session is announced within this time [default: wait forever].
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<HumanDuration>,
    /// Give up when the sender is silent this long during a transfer.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub sender_timeout: HumanDuration,
    /// TESTING: drop incoming data packets with probability P (0..1).
    #[arg(long, value_name = "P", value_parser = parse_probability)]
    pub loss: Option<f64>,
    /// Seed for --loss.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Receive this many sessions at once (several senders on one group,
    /// e.g. `rmcast send --rate-group`): one per sender, each stored in
    /// --out under its own name; exit 0 only if all N verified. --timeout
    /// then bounds the wait for each next session.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub sessions: u16,
    /// Hunt's multicast rate NAK: on a new gap in a sender's stream also
    /// multicast a NAK to the whole group, so every sender backs off; at
    /// most one per this interval per sender (0: off) [default: 2ms with
    /// --sessions above 1, else off].
    #[arg(long, value_name = "DURATION")]
    pub rate_nak_interval: Option<HumanDuration>,
    /// Kernel receive buffer of the multicast socket (SO_RCVBUF; the kernel
    /// doubles it). A small one makes a receiver that falls behind lose
    /// packets quickly, as a slow receiver does (lab and tests).
    #[arg(long, default_value = "4MiB", value_parser = parse_size, value_name = "BYTES")]
    pub socket_buffer: u64,
    /// How a tree takes its place: `true` swaps the whole directory in at
    /// once (the previous version disappears in the same instant);
    /// `false` merges it file by file into what is there (files it does
    /// not name are kept).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub atomic_tree: bool,
    /// Refuse a file whose name is already taken under --out instead of
    /// replacing it with the new version once verified (the report says
    /// when a file was replaced).
    #[arg(long)]
    pub no_clobber: bool,
    /// Print exactly one JSON object on stdout at the end (no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Write one JSON object per line on stdout for each event as it
    /// happens (progress every second, finished with the --json report).
    #[arg(long, conflicts_with = "json")]
    pub json_events: bool,
    /// Keep only files signed by the owner of this public key (FILE.pub
    /// from `rmcast keygen --signing`; repeat for several): an unsigned
    /// file, or one signed by anyone else, even a member holding the group
    /// key, is refused and not kept.
    #[arg(long, value_name = "FILE")]
    pub trust: Vec<PathBuf>,
    #[command(flatten)]
    pub keys: KeyArgs,
}

impl RecvArgs {
    /// The receivers' rate NAK interval: the flag, else on (2 ms) with
    /// several sessions, as the simulator's multi-sender runs do.
    pub fn rate_nak_interval(&self) -> Option<Duration> {
        match self.rate_nak_interval {
            Some(HumanDuration(d)) if d.is_zero() => None,
            Some(HumanDuration(d)) => Some(d),
            None if self.sessions > 1 => Some(Duration::from_millis(2)),
            None => None,
        }
    }
}

/// `rmcast serve`.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:
  rmcast serve --out /data --key /etc/rmcast/group.key       # every node, e.g. as a systemd service
  rmcast send model.bin --key group.key --receivers 30       # any number of times, from anywhere
  rmcast serve --out /tmp/in --key group.key --once --json   # one session, then exit")]
pub struct ServeArgs {
    /// Directory every session's file is stored in, under the name its
    /// sender gives (created if missing).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: PathBuf,
    /// Multicast group and port.
    #[arg(long, default_value = "239.77.0.1:7700", value_name = "ADDR:PORT")]
    pub group: SocketAddrV4,
    /// Local interface address to join on.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub iface: Ipv4Addr,
    /// Name shown in senders' reports [default: HOST:PID].
    #[arg(long)]
    pub name: Option<String>,
    /// Exit after one session (0 if it verified, 1 if not).
    #[arg(long, conflicts_with = "sessions")]
    pub once: bool,
    /// Exit after this many sessions (0 if every one verified).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub sessions: Option<u64>,
    /// Take up to N sessions at once (several senders pushing to this node
    /// at the same time, each on the group): a session that ends frees its
    /// place for the next. Two running at once that offer the same name:
    /// the second is refused.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub max_concurrent: u16,
    /// Exit 1 after this long without a session announced [default: serve forever].
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<HumanDuration>,
    /// Give up a session whose sender is silent this long (the service goes on).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub sender_timeout: HumanDuration,
    /// How a tree takes its place: `true` swaps the whole directory in at
    /// once (the previous version disappears in the same instant);
    /// `false` merges it file by file into what is there (files it does
    /// not name are kept).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub atomic_tree: bool,
    /// Refuse a file whose name is already taken under --out instead of
    /// replacing it with the new version once verified.
    #[arg(long)]
    pub no_clobber: bool,
    /// Refuse files larger than this (e.g. 100GiB).
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    pub max_size: Option<u64>,
    /// Kernel receive buffer of the multicast socket (SO_RCVBUF).
    #[arg(long, default_value = "4MiB", value_parser = parse_size, value_name = "BYTES")]
    pub socket_buffer: u64,
    /// One JSON object per session on stdout (JSON lines), as `recv --json`
    /// prints, plus the time it ended; no log line.
    #[arg(long)]
    pub json: bool,
    /// One JSON object per line on stdout for each event as it happens:
    /// `progress` every second, `session` when one ends (with its `--json`
    /// report), `finished` when the service stops (sessions taken, failed).
    #[arg(long, conflicts_with = "json")]
    pub json_events: bool,
    /// Keep only files signed by the owner of this public key (repeatable).
    #[arg(long, value_name = "FILE")]
    pub trust: Vec<PathBuf>,
    #[command(flatten)]
    pub keys: KeyArgs,
}

/// `rmcast demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Receivers to run.
    #[arg(long, short = 'n', default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub receivers: u16,
    /// Object size (e.g. 64MiB, 10MB, 1000001).
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    pub size: u64,
    /// Keep the received files in this directory instead of a temporary one.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    #[command(flatten)]
    pub keys: KeyArgs,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl RecvArgs {
    /// Where the TCP overlay's peers reach this receiver: `--listen`, else
    /// the `--iface` address (the one a LAN's members share), any port.
    pub fn listen(&self) -> std::net::SocketAddr {
        self.listen
            .unwrap_or_else(|| std::net::SocketAddr::from((self.iface, 0)))
    }
}

/// `recv --sender`: a host and perhaps a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SenderArg {
    pub host: String,
    pub port: Option<u16>,
}

impl SenderArg {
    /// The sender's IPv4 address; the port, unless given, is the group's
    /// port + 1 (where a hybrid send's default lobby and a tcp-* sender's
    /// default --control listen).
    pub fn resolve(&self, group: SocketAddrV4) -> anyhow::Result<std::net::SocketAddr> {
        use anyhow::Context as _;
        let port = match self.port {
            Some(p) => p,
            None => group.port().checked_add(1).with_context(|| {
                format!(
                    "--sender {}: give the port (the group's port + 1 is past 65535)",
                    self.host
                )
            })?,
        };
        ipv4_addr(&self.host, port, "--sender")
    }
}
