//! Command-line arguments: what every flag means and its default.

use anyhow::{Result, bail};
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use rmcast::HumanDuration;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

/// Reliable multicast: send one file to many receivers at once, verified.
///
/// Receivers join a multicast group and wait; the sender announces a
/// session, waits for the expected number of receivers, sends the file once
/// for all of them, repairs losses, and exits 0 only when every receiver
/// has confirmed a BLAKE3-verified copy.
///
/// By default everything stays on this machine: multicast goes out through
/// the loopback interface (127.0.0.1) with TTL 1.
#[derive(Parser, Debug)]
#[command(name = "rmcast", version, propagate_version = true)]
#[command(after_help = "EXAMPLES:
  rmcast demo --receivers 8 --size 64MiB --protocol nak-poll --loss 0.05
  rmcast keygen -o group.key                                # once; copy it to every node
  rmcast recv --key group.key --out /tmp/in                 # on each receiver
  rmcast send big.iso --key group.key --receivers 8
  rmcast pipe recv --key group.key > copy                   # on each receiver
  tar c dir | rmcast pipe send --key group.key --receivers 8   # a stream, not a file")]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace; or RMCAST_LOG).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// What every exit status means; appended to every `--help` and manual page.
const EXIT_STATUS: &str = "EXIT STATUS:
  0    done (send: every receiver verified its copy; recv: the copy is verified and in place;
       bcast: every rank verified, the same status on every rank)
  1    failed; the message names what (a receiver and why, the network, the input)
  2    the command line is wrong (unknown flag, bad value)
  3    send --min-receivers, pipe send: it reached some receivers, not all (the others are named)
  130  interrupted (Ctrl-C); a sender says goodbye, a receiver removes its partial file";

/// The command-line definition: [`Cli`] with the exit statuses appended to
/// the help of rmcast and of every subcommand, for the parser, the manual
/// pages and the completion scripts alike.
pub fn command() -> clap::Command {
    // `relay` takes send's flags for its downstream session but names its
    // groups --from/--to: send's --group and --iface (refused there), and
    // the tcp-* overlays' flags (no overlay crosses a relay), stay out of
    // its help.
    let hidden = ["group", "iface", "control", "segment_size", "fanout"];
    with_exit_status(Cli::command()).mut_subcommand("relay", |c| {
        hidden
            .iter()
            .fold(c, |c, id| c.mut_arg(*id, |a| a.hide(true)))
    })
}

fn with_exit_status(cmd: clap::Command) -> clap::Command {
    let help = match cmd.get_after_help() {
        Some(h) => format!("{h}\n\n{EXIT_STATUS}"),
        None => EXIT_STATUS.to_owned(),
    };
    cmd.after_help(help).mut_subcommands(with_exit_status)
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Make a group key: `rmcast keygen > group.key`, then pass `--key
    /// group.key` to every sender and receiver of the group.
    Keygen(KeygenArgs),
    /// Send a file or a directory tree to N receivers; exit 0 only when all verified it.
    Send(SendArgs),
    /// Receive one file into a directory (written atomically after the hash matches).
    Recv(RecvArgs),
    /// A receiving service: take session after session into one directory,
    /// one log line each, until stopped (systemd: docs/rmcast-serve.service).
    Serve(ServeArgs),
    /// Run a sender and N receivers on loopback in one process and report.
    Demo(DemoArgs),
    /// Forward a session from one group to another (another LAN segment):
    /// a receiver upstream, a sender downstream, forwarding as data
    /// arrives; exit 0 only when its copy and every receiver behind it
    /// verified. Relays cascade.
    Relay(crate::relay::RelayArgs),
    /// Stream stdin to the stdout of every receiver (PRMP, TCP-like reliable multicast).
    Pipe(crate::pipe::PipeArgs),
    /// Under a cluster's launcher (mpirun, srun, torchrun): rank 0 sends
    /// PATH, every other rank receives it; every rank exits 0 only when all
    /// verified (docs/clusters.md).
    Bcast(crate::bcast::BcastArgs),
    /// Measurement lab: network-namespace testbeds, scenario runs against
    /// peer tools (udpcast, uftp, NORM, TCP), failure detection, reports.
    Lab(rmcast_lab::LabArgs),
    /// Print a shell completion script: `rmcast completions bash >
    /// /etc/bash_completion.d/rmcast` (zsh: a `_rmcast` file on $fpath;
    /// fish: ~/.config/fish/completions/rmcast.fish).
    Completions(CompletionsArgs),
    /// Print the manual page (roff) of rmcast or of one subcommand, or
    /// write every page into a directory: `rmcast man --out /usr/local/share/man/man1`.
    Man(ManArgs),
}

/// Flags of `rmcast completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Flags of `rmcast man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// The subcommand whose page to print, as words (`pipe send`); none:
    /// the page of rmcast itself.
    #[arg(value_name = "SUBCOMMAND", conflicts_with = "out")]
    pub command: Vec<String>,
    /// Write every page (rmcast.1, rmcast-send.1, rmcast-pipe-send.1, ...)
    /// into this directory (created if missing) instead of printing one.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Reliability protocol.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Chosen for the group once it has registered, from a table measured
    /// in the simulator and checked on real runs (docs/auto.md): nak-poll,
    /// with FEC parity (64:2) from 32 receivers, a window of 2048 and 8
    /// blocks interleaved (64:2:8) from 300, a window of 8192 from 2,000,
    /// three parity packets per block (64:3:8) from 4,000, and a window of
    /// 16384 from 8,000; flags given on the command line are kept.
    /// --explain prints the choice and why.
    Auto,
    /// Every receiver acknowledges every packet (simple, N acks per packet).
    Ack,
    /// Receivers NAK gaps; every i-th packet polls all for an ack (fastest).
    NakPoll,
    /// Receivers take turns acknowledging: one ack per packet; window > receivers.
    Ring,
    /// Acks relayed along chains of --tree-height receivers (or a binary tree).
    Tree,
    /// No multicast: the sender writes to every receiver over TCP (MultiTCP).
    TcpDirect,
    /// No multicast: store-and-forward TCP tree of --fanout children per node.
    TcpTree,
    /// No multicast: store-and-forward binomial tree over TCP.
    TcpBinomial,
    /// No multicast: a pipelined TCP chain through all receivers.
    TcpChain,
    /// No multicast: two pipelined binary TCP trees fed alternate segments.
    TcpBintree,
    /// No multicast: the binomial pipeline over TCP (every node sends and
    /// receives at once, log2 N hops).
    TcpPipeline,
}

impl Protocol {
    /// The UDP multicast protocol, or `None` for a TCP overlay.
    pub fn multicast(self) -> Option<rmcast::ProtocolId> {
        Some(match self {
            // Provisional: the sender chooses once the group is known.
            Protocol::Auto | Protocol::NakPoll => rmcast::ProtocolId::NakPoll,
            Protocol::Ack => rmcast::ProtocolId::Ack,
            Protocol::Ring => rmcast::ProtocolId::Ring,
            Protocol::Tree => rmcast::ProtocolId::Tree,
            _ => return None,
        })
    }

    /// The TCP overlay shape, or `None` for a multicast protocol.
    pub fn overlay(self, fanout: u32) -> Option<rmcast::overlay::OverlayShape> {
        use rmcast::overlay::OverlayShape as S;
        Some(match self {
            Protocol::TcpDirect => S::Direct,
            Protocol::TcpTree => S::Tree { fanout },
            Protocol::TcpBinomial => S::Binomial,
            Protocol::TcpChain => S::Chain,
            Protocol::TcpBintree => S::Bintree,
            Protocol::TcpPipeline => S::Pipeline,
            _ => return None,
        })
    }
}

/// How losses are repaired.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairArg {
    /// Resend only what some receiver lacks (unicast if only one lacks it).
    Selective,
    /// Resend everything from the first lost packet (the paper's scheme).
    GoBackN,
}

/// How the sender limits the rate at which data enters the network.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateControlArg {
    /// Hunt's send-rate flow control: start at --rate (default 500
    /// packets/s), shorten the spacing between packets while no receiver
    /// reports a loss, back off (doubling the step on each loss in a row)
    /// when one does, and settle just below what the slowest receiver can
    /// take in. For groups whose slowest member, not the wire, limits.
    Hunt,
    /// A constant --rate (a token bucket); without --rate, unpaced.
    Fixed,
    /// No pacing: the window alone limits the sender; --rate is refused.
    Off,
    /// Find the path's rate: pace at the group's measured delivery rate
    /// (what every receiver acknowledged, over 10 ms or a window's time),
    /// doubling from 1 Gbit/s while the path keeps up, then probing a
    /// quarter above it now and then; --rate is refused.
    Find,
}

/// What the sender does with a receiver that falls far behind the group.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaggardArg {
    /// Wait for it: the whole group goes at its pace, and every receiver
    /// gets the file.
    Wait,
    /// Eject it once it has been half a window behind the group's median
    /// receiver for --laggard-after: it is named as failed (exit 1), and
    /// the others go on at their own pace.
    Eject,
    /// Move it, by the same rule, to a TCP catch-up with the sender: it
    /// fetches the rest of the file there while the group goes on at its
    /// own pace, and still gets a verified copy.
    Tcp,
}

/// Shape of the tree protocol's acknowledgement tree.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeArg {
    /// Chains of --tree-height receivers; the sender hears the chain heads.
    Flat,
    /// A binary tree growing with the group (log2 N levels).
    Binary,
}

/// Flags shared by `send` and `demo`.
#[derive(Args, Debug)]
pub struct CommonArgs {
    /// Multicast group and port.
    #[arg(long, default_value = "239.77.0.1:7700", value_name = "ADDR:PORT")]
    pub group: SocketAddrV4,
    /// Local interface address to send and join on.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub iface: Ipv4Addr,
    /// Multicast TTL (1 keeps packets on the local network).
    #[arg(long, default_value_t = 1)]
    pub ttl: u32,
    /// Reliability protocol.
    #[arg(long, value_enum, default_value_t = Protocol::Auto)]
    pub protocol: Protocol,
    /// --protocol auto: print on stderr what it chose for the group, from
    /// which inputs (receivers, object size, rate) and which row of the
    /// table, and why, as soon as the group is known.
    #[arg(long)]
    pub explain: bool,
    /// Datagram size in bytes including rmcast's 24-byte header; 1472 fits a
    /// 1500-byte Ethernet MTU, up to 65507 uses IP fragmentation.
    #[arg(long, default_value_t = 1472, value_name = "BYTES")]
    pub packet_size: usize,
    /// Packets in flight before waiting for acknowledgements (--protocol
    /// auto: 1024, or 2048 for 300 receivers or more, unless given).
    #[arg(long, default_value_t = 512, value_name = "PACKETS")]
    pub window: u32,
    /// nak-poll: packets between polls [default: 85 % of the window].
    #[arg(long, value_name = "PACKETS")]
    pub poll_interval: Option<u32>,
    /// tree: receivers per chain (H); 1 behaves like ack.
    #[arg(long, default_value_t = 10, value_name = "H")]
    pub tree_height: u16,
    /// tree: flat chains or a binary tree.
    #[arg(long, value_enum, default_value_t = ShapeArg::Flat)]
    pub tree_shape: ShapeArg,
    /// How lost packets are resent.
    #[arg(long, value_enum, default_value_t = RepairArg::Selective)]
    pub repair: RepairArg,
    /// Block FEC: `K:P` groups every K data packets (1..=1024) into a block
    /// and repairs losses with Reed–Solomon parity packets instead of
    /// resending data: the sender answers each block with as many new
    /// parity packets as the receiver lacking most needs, multicast, and
    /// each repairs a different loss at every receiver, so repair traffic
    /// stops growing with the group. P parity packets follow every block
    /// before anyone asks (0: only on demand). `K:P:D` interleaves D
    /// blocks (1..=64): each takes every D-th packet of a group of K·D, so
    /// a burst of D losses in a row costs each block one packet (needs
    /// --window K·D or more; 2·K·D keeps data flowing). `off`: resend lost
    /// packets. Large groups on lossy links gain most (e.g. 64:0, 64:2
    /// where loss is steady, 64:2:8 where it comes in bursts); needs
    /// --repair selective. [default: --protocol auto's choice for the
    /// group (docs/auto.md); off with a protocol given]
    #[arg(long, default_value = "off", hide_default_value = true, value_parser = parse_fec, value_name = "K:P[:D]|off")]
    pub fec: FecArg,
    /// tcp-*: object bytes per segment relayed along the overlay. `auto`:
    /// the largest of 8 KiB … 128 KiB whose pipeline fill (two segments per
    /// hop over the overlay's depth) costs at most 2 % of the object's time:
    /// 8 KiB for small objects and long chains, more for large objects on
    /// shallow overlays.
    #[arg(long, default_value = "auto", value_parser = parse_segment_size, value_name = "BYTES|auto")]
    pub segment_size: SegmentSize,
    /// tcp-tree: children per node.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub fanout: u32,
    /// tcp-*: address the sender accepts receiver registrations on
    /// [default: the --iface address at the group's port + 1, where `recv
    /// --sender HOST` looks: 127.0.0.1:7701 unless --iface or --group say
    /// otherwise]. With a multicast protocol, `send --control` runs a
    /// hybrid session: receivers that may not hear the group register here
    /// (`recv --sender ADDR:PORT`) and listen for it for 250 ms; those that
    /// hear nothing get the file over a TCP chain (a bintree beyond 8) in
    /// the same send. `send --protocol auto` (the default) on an --iface
    /// other than loopback opens this lobby by itself at the --iface
    /// address and the group's port + 1 (see --no-lobby)
    #[arg(
        long,
        default_value = "127.0.0.1:7701",
        hide_default_value = true,
        value_name = "ADDR:PORT"
    )]
    pub control: std::net::SocketAddr,
    /// Initial retransmission timeout (doubles while nothing moves).
    #[arg(long, default_value = "50ms", value_name = "DURATION")]
    pub rto: HumanDuration,
    /// Minimum time between two retransmissions of one packet, however many NAKs arrive.
    #[arg(long, default_value = "5ms", value_name = "DURATION")]
    pub suppress: HumanDuration,
    /// Remove a receiver that owes feedback and stays silent this long.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub peer_timeout: HumanDuration,
    /// A receiver that falls far behind the rest while it keeps answering
    /// (a slow disk, a slow link): `tcp` moves it to a TCP catch-up with
    /// the sender (on --iface, a free port): the group goes on at its own
    /// pace, and once the group's data is out the laggard fetches the rest
    /// there at its own, still verified; `eject` fails it, named, so the
    /// others go on at theirs; `wait` lets it set the group's pace. A
    /// relay's downstream session waits.
    #[arg(long, value_enum, default_value = "tcp")]
    pub laggard: LaggardArg,
    /// With --laggard eject or tcp: how long a receiver may stay half a window
    /// behind the group's median receiver before it is ejected.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub laggard_after: HumanDuration,
    /// End the session, naming what stalled, when it makes no progress
    /// this long while sending or closing (no new packet acknowledged by
    /// every receiver, no receiver accepting, verifying or removed): a
    /// collapsed rate or a repair that never lands ends instead of hanging.
    /// Must exceed --peer-timeout plus the largest RTO (800ms), so a silent
    /// receiver is removed and named first. [default: 20s, or four times
    /// --peer-timeout plus the largest RTO, or the time four windows take
    /// at --rate, whichever is longest]. With --protocol tcp-*: a
    /// receiver of a pipelined overlay (chain, bintree, pipeline) that
    /// stores nothing for half of it while the nodes feeding it go on is
    /// cut out and named, and the nodes it fed are re-attached to the
    /// sender; no receiver storing a new byte this long ends the session,
    /// naming the receivers furthest behind; must exceed --peer-timeout
    /// [default: 20s].
    #[arg(long, value_name = "DURATION")]
    pub stall_timeout: Option<HumanDuration>,
    /// Pace data at this rate (e.g. 100mbit, 1gbit) [default: unpaced, window-limited].
    /// Counted on the wire as tc counts it (each datagram plus 42 bytes of
    /// UDP, IP and Ethernet headers), so the link's own rate fills the link.
    /// Under --rate-control fixed the constant rate; under hunt the rate it
    /// starts at before it adapts.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<u64>,
    /// How the data rate is limited: hunt adapts it to the slowest
    /// receiver (losses slow it down, quiet periods speed it up), fixed
    /// holds --rate, off sends as fast as the window allows.
    #[arg(long, value_enum, default_value_t = RateControlArg::Fixed, value_name = "MODE")]
    pub rate_control: RateControlArg,
    /// TESTING: every receiver drops incoming data packets with probability P (0..1).
    #[arg(long, value_name = "P", value_parser = parse_probability)]
    pub loss: Option<f64>,
    /// Seed for --loss and for the demo's data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print exactly one JSON object on stdout at the end (no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Which of these flags the command line gave (clap ids), as clap saw
    /// them: filled in by `main` from the matches, so that a flag's value
    /// that merely looks like a flag does not count.
    #[arg(skip)]
    pub given: Vec<String>,
}

impl CommonArgs {
    /// Whether the flag with clap id `id` (the field name) was given.
    pub fn given(&self, id: &str) -> bool {
        self.given.iter().any(|g| g == id)
    }

    /// Copies the protocol knobs into an engine configuration.
    pub fn apply(&self, proto: &mut rmcast::SenderConfig) -> Result<()> {
        if self.protocol.multicast().is_none() {
            return self.check_overlay_flags();
        }
        proto.protocol = self.protocol.multicast().expect("multicast protocol");
        proto.auto = (self.protocol == Protocol::Auto).then(|| rmcast::AutoConfig {
            keep_window: self.given("window"),
            keep_fec: self.given("fec"),
            keep_poll_interval: self.given("poll_interval"),
        });
        if self.explain && proto.auto.is_none() {
            bail!("--explain explains --protocol auto's choice; drop it or use --protocol auto");
        }
        proto.packet_size = self.packet_size;
        proto.window = self.window;
        proto.poll_interval = self.poll_interval;
        proto.rto = self.rto.0;
        proto.rto_max = proto.rto_max.max(self.rto.0);
        proto.suppress = self.suppress.0;
        proto.peer_timeout = self.peer_timeout.0;
        proto.laggard = match self.laggard {
            LaggardArg::Wait if self.given("laggard_after") => {
                bail!("--laggard-after applies to --laggard tcp and --laggard eject, not wait")
            }
            LaggardArg::Wait => rmcast::Laggard::Wait,
            LaggardArg::Eject => rmcast::Laggard::Eject {
                after: self.laggard_after.0,
            },
            // The port is the sender's to bind when the session starts.
            LaggardArg::Tcp => rmcast::Laggard::Tcp {
                after: self.laggard_after.0,
                port: 0,
            },
        };
        proto.stall_timeout = self.stall_timeout.map(|d| d.0);
        proto.rate_bits_per_s = self.rate;
        proto.rate_control = match self.rate_control {
            // Fixed without --rate is today's unpaced default.
            RateControlArg::Fixed => None,
            RateControlArg::Hunt => Some(rmcast::RateControl::Hunt(rmcast::HuntParams::default())),
            RateControlArg::Off if self.rate.is_some() => {
                bail!("--rate-control off sends unpaced; drop --rate or use --rate-control fixed")
            }
            RateControlArg::Off => Some(rmcast::RateControl::Off),
            RateControlArg::Find if self.rate.is_some() => {
                bail!("--rate-control find finds the rate itself; drop --rate")
            }
            RateControlArg::Find => Some(rmcast::RateControl::Find),
        };
        proto.tree_height = self.tree_height;
        proto.tree_shape = match self.tree_shape {
            ShapeArg::Flat => rmcast::TreeShape::Flat,
            ShapeArg::Binary => rmcast::TreeShape::Binary,
        };
        proto.repair = match self.repair {
            RepairArg::Selective => rmcast::Repair::Selective,
            RepairArg::GoBackN => rmcast::Repair::GoBackN,
        };
        proto.fec = self.fec.0;
        if proto.fec.is_some() && self.repair == RepairArg::GoBackN {
            bail!("--fec repairs with parity packets; it cannot run with --repair go-back-n");
        }
        if self.poll_interval.is_some()
            && !matches!(self.protocol, Protocol::NakPoll | Protocol::Auto)
        {
            bail!("--poll-interval applies to --protocol nak-poll only");
        }
        if (self.given("tree_height") || self.given("tree_shape"))
            && self.protocol != Protocol::Tree
        {
            bail!("--tree-height and --tree-shape apply to --protocol tree only");
        }
        proto.validate()?;
        Ok(())
    }

    /// The overlay sender's configuration for a `tcp-*` protocol.
    pub fn overlay(&self) -> Option<rmcast::overlay::OverlaySendConfig> {
        Some(self.overlay_of(self.protocol.overlay(self.fanout)?))
    }

    /// Where a send's lobby listens, if it has one, and whether the user
    /// asked for it: `--control` with any multicast protocol; else, under
    /// `--protocol auto` on an interface other than loopback (where every
    /// receiver hears the group), the interface's address at the group's
    /// port + 1, which `recv --sender HOST` looks for, unless `no_lobby`.
    pub fn lobby(&self, no_lobby: bool) -> Option<(std::net::SocketAddr, bool)> {
        self.protocol.multicast()?;
        let addr = self.control_addr()?;
        if self.given("control") {
            return Some((addr, true));
        }
        let implied = self.protocol == Protocol::Auto && !no_lobby && !self.iface.is_loopback();
        implied.then_some((addr, false))
    }

    /// The TCP half of a hybrid session (a send with a lobby, see
    /// [`Self::lobby`]), from the overlay flags, and whether the user
    /// asked for the lobby; its shape is chosen once the session knows how
    /// many receivers it serves.
    pub fn hybrid(&self, no_lobby: bool) -> Option<(rmcast::overlay::OverlaySendConfig, bool)> {
        let (control, asked) = self.lobby(no_lobby)?;
        let ov = rmcast::overlay::OverlaySendConfig {
            control,
            ..self.overlay_of(rmcast::overlay::OverlayShape::Chain)
        };
        Some((ov, asked))
    }

    /// Where a sender accepts TCP registrations (a tcp-* overlay's, or a
    /// hybrid session's lobby): `--control`, else the `--iface` address at
    /// the group's port + 1, which is where `recv --sender HOST` looks
    /// (127.0.0.1:7701 with neither given). A sender on a cluster's
    /// interface is so reachable by its receivers without saying the
    /// address twice. `None` when the group's port is 65535 and
    /// `--control` was not given ([`Self::check_overlay_flags`] says so).
    fn control_addr(&self) -> Option<std::net::SocketAddr> {
        if self.given("control") {
            return Some(self.control);
        }
        let port = self.group.port().checked_add(1)?;
        Some(std::net::SocketAddr::from((self.iface, port)))
    }

    fn overlay_of(
        &self,
        shape: rmcast::overlay::OverlayShape,
    ) -> rmcast::overlay::OverlaySendConfig {
        let default = rmcast::overlay::OverlaySendConfig::default();
        rmcast::overlay::OverlaySendConfig {
            shape,
            control: self.control_addr().unwrap_or(self.control),
            segment_size: self.segment_size.0.map(|s| s as u32),
            inactivity: self.peer_timeout.0,
            stall_timeout: self.stall_timeout.map(|d| d.0).or(default.stall_timeout),
            ..default
        }
    }

    pub fn check_overlay_flags(&self) -> Result<()> {
        if let Some(seg) = self.segment_size.0
            && (seg == 0 || seg > 16 << 20)
        {
            bail!("segment size {seg} is outside 1 byte..16 MiB");
        }
        if self.explain {
            bail!("--explain explains --protocol auto's choice, not a tcp-* overlay's");
        }
        if self.control_addr().is_none() {
            bail!(
                "--group {}: the registrations of a tcp-* sender go to the group's port + 1, \
                 past 65535; give --control ADDR:PORT (and `recv --sender HOST:PORT`)",
                self.group
            );
        }
        let udp_only = [
            "loss",
            "rate",
            "rate_control",
            "window",
            "poll_interval",
            "repair",
            "fec",
            "tree_height",
            "tree_shape",
            "packet_size",
            "rto",
            "suppress",
            "laggard",
            "laggard_after",
        ];
        if let Some(id) = udp_only.iter().find(|id| self.given(id)) {
            bail!(
                "--{} applies to the UDP multicast protocols, not to --protocol tcp-*",
                id.replace('_', "-")
            );
        }
        if let Some(stall) = self.stall_timeout
            && stall.0 <= self.peer_timeout.0
        {
            bail!(
                "--stall-timeout {:?} must exceed --peer-timeout {:?}, so that a receiver \
                 that died is named before the session counts as stalled",
                stall.0,
                self.peer_timeout.0
            );
        }
        Ok(())
    }

    /// Whether `--group` was given (the demo otherwise picks a random port).
    pub fn group_given(&self) -> bool {
        self.given("group")
    }
}

/// The group key, or the explicit choice to run without one.
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

/// `host`'s first IPv4 address, at `port`; errors name it as `what` (the
/// flag or the role it came from).
pub fn ipv4_addr(host: &str, port: u16, what: &str) -> anyhow::Result<std::net::SocketAddr> {
    use anyhow::Context as _;
    use std::net::ToSocketAddrs as _;
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {what} {host:?}"))?
        .find(std::net::SocketAddr::is_ipv4)
        .with_context(|| format!("{what} {host:?} has no IPv4 address"))
}

fn parse_sender(s: &str) -> Result<SenderArg, String> {
    let bad = || format!("invalid sender `{s}`: expected HOST or HOST:PORT, like 10.0.0.1:7701");
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) => {
            let port = p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad)?;
            (h, Some(port))
        }
        None => (s, None),
    };
    if host.is_empty() || host.contains(':') || host.chars().any(char::is_whitespace) {
        return Err(bad());
    }
    Ok(SenderArg {
        host: host.to_owned(),
        port,
    })
}

fn parse_probability(s: &str) -> Result<f64, String> {
    let p: f64 = s
        .parse()
        .map_err(|_| format!("invalid probability `{s}`: expected a number like 0.05"))?;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("probability {p} is outside 0..1 (5 % is 0.05)"));
    }
    Ok(p)
}

/// `--fec`: a block shape, or `None` for `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FecArg(pub Option<rmcast::FecShape>);

fn parse_fec(s: &str) -> Result<FecArg, String> {
    rmcast::FecShape::from_setting(s).map(FecArg)
}

/// `--segment-size`: bytes, or `None` for `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSize(pub Option<u64>);

fn parse_segment_size(s: &str) -> Result<SegmentSize, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(SegmentSize(None));
    }
    parse_size(s)
        .map(|b| SegmentSize(Some(b)))
        .map_err(|e| format!("{e} (or `auto`)"))
}

fn parse_size(s: &str) -> Result<u64, String> {
    rmcast::parse_size(s)
}

fn parse_rate(s: &str) -> Result<u64, String> {
    let r = rmcast::parse_rate(s)?;
    if r == 0 {
        return Err("rate must be greater than zero".into());
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    fn send(argv: &[&str]) -> SendArgs {
        let mut all = vec!["rmcast", "send", "f", "-n", "2"];
        all.extend_from_slice(argv);
        let Command::Send(mut s) = Cli::try_parse_from(all).unwrap().command else {
            panic!()
        };
        // What main does from the matches.
        if argv.contains(&"--control") {
            s.common.given.push("control".into());
        }
        s
    }

    #[test]
    fn auto_opens_a_lobby_at_the_group_port_plus_one_off_loopback_only() {
        let lobby = |argv: &[&str]| {
            let s = send(argv);
            s.common.lobby(s.no_lobby)
        };
        let lan = ["--iface", "10.0.0.1", "--group", "239.1.2.3:9000"];
        assert_eq!(lobby(&lan), Some(("10.0.0.1:9001".parse().unwrap(), false)));
        assert_eq!(
            lobby(&[]),
            None,
            "on loopback every receiver hears the group"
        );
        assert_eq!(lobby(&[&lan[..], &["--no-lobby"]].concat()), None);
        let nak = [&lan[..], &["--protocol", "nak-poll"]].concat();
        assert_eq!(lobby(&nak), None, "a protocol named by hand runs as asked");
        let asked = [&nak[..], &["--control", "10.0.0.1:7000"]].concat();
        assert_eq!(
            lobby(&asked),
            Some(("10.0.0.1:7000".parse().unwrap(), true))
        );
        let tcp = [&lan[..], &["--protocol", "tcp-chain"]].concat();
        assert_eq!(lobby(&tcp), None, "an overlay is no hybrid session");
        let top = ["--iface", "10.0.0.1", "--group", "239.1.2.3:65535"];
        assert_eq!(lobby(&top), None, "no port + 1");
        let both = [
            "rmcast",
            "send",
            "f",
            "-n",
            "1",
            "--no-lobby",
            "--control",
            "1.2.3.4:5",
        ];
        assert!(
            Cli::try_parse_from(both).is_err(),
            "--no-lobby with --control"
        );
    }

    #[test]
    fn an_overlay_sender_registers_receivers_on_its_interface_at_the_group_port_plus_one() {
        let control = |argv: &[&str]| {
            let s = send(&[&["--protocol", "tcp-pipeline"], argv].concat());
            s.common
                .check_overlay_flags()
                .map(|()| s.common.overlay().unwrap().control)
        };
        let at = |a: &str| a.parse::<std::net::SocketAddr>().unwrap();
        assert_eq!(control(&[]).unwrap(), at("127.0.0.1:7701"));
        // Where `recv --sender 10.0.0.1` and `recv --group ...:9000
        // --sender HOST` look.
        assert_eq!(
            control(&["--iface", "10.0.0.1"]).unwrap(),
            at("10.0.0.1:7701")
        );
        let lan = ["--iface", "10.0.0.1", "--group", "239.1.2.3:9000"];
        assert_eq!(control(&lan).unwrap(), at("10.0.0.1:9001"));
        let told = [&lan[..], &["--control", "0.0.0.0:7000"]].concat();
        assert_eq!(control(&told).unwrap(), at("0.0.0.0:7000"));
        let top = control(&["--group", "239.1.2.3:65535"])
            .unwrap_err()
            .to_string();
        assert!(top.contains("give --control"), "{top}");
        let top_told = ["--group", "239.1.2.3:65535", "--control", "127.0.0.1:7000"];
        assert_eq!(control(&top_told).unwrap(), at("127.0.0.1:7000"));
    }

    #[test]
    fn a_receiver_listens_for_overlay_peers_on_its_interface_unless_told() {
        let listen = |argv: &[&str]| {
            let all = [&["rmcast", "recv", "-o", "d", "--sender", "10.0.0.1"], argv].concat();
            let Command::Recv(r) = Cli::try_parse_from(all).unwrap().command else {
                panic!()
            };
            r.listen()
        };
        assert_eq!(listen(&[]), "127.0.0.1:0".parse().unwrap());
        let lan = ["--iface", "10.0.0.7"];
        assert_eq!(listen(&lan), "10.0.0.7:0".parse().unwrap());
        let told = [&lan[..], &["--listen", "10.0.0.7:9000"]].concat();
        assert_eq!(listen(&told), "10.0.0.7:9000".parse().unwrap());
    }

    #[test]
    fn a_sender_is_a_host_with_the_group_port_plus_one_unless_a_port_is_given() {
        let group: SocketAddrV4 = "239.77.0.1:7700".parse().unwrap();
        let at =
            |s: &str| parse_sender(s).and_then(|a| a.resolve(group).map_err(|e| e.to_string()));
        assert_eq!(at("10.0.0.1").unwrap(), "10.0.0.1:7701".parse().unwrap());
        assert_eq!(at("10.0.0.1:9").unwrap(), "10.0.0.1:9".parse().unwrap());
        assert_eq!(at("localhost:9").unwrap(), "127.0.0.1:9".parse().unwrap());
        for bad in [
            "",
            ":7701",
            "10.0.0.1:",
            "10.0.0.1:0",
            "10.0.0.1:x",
            "a b",
            "::1",
        ] {
            let e = parse_sender(bad).unwrap_err();
            assert!(e.contains("HOST or HOST:PORT"), "{bad:?}: {e}");
        }
        let top: SocketAddrV4 = "239.77.0.1:65535".parse().unwrap();
        let e = parse_sender("10.0.0.1").unwrap().resolve(top).unwrap_err();
        assert!(e.to_string().contains("give the port"), "{e}");
    }

    #[test]
    fn probabilities_outside_zero_to_one_are_refused() {
        assert_eq!(parse_probability("0.05").unwrap(), 0.05);
        assert!(parse_probability("5").unwrap_err().contains("outside 0..1"));
        assert!(parse_probability("x").is_err());
    }

    #[test]
    fn poll_interval_with_ack_is_refused() {
        let cli = Cli::try_parse_from([
            "rmcast",
            "demo",
            "--protocol",
            "ack",
            "--poll-interval",
            "10",
        ])
        .unwrap();
        let Command::Demo(d) = cli.command else {
            panic!()
        };
        let mut cfg = rmcast::SenderConfig::default();
        let e = d.common.apply(&mut cfg).unwrap_err();
        assert!(e.to_string().contains("nak-poll only"), "{e}");
    }

    #[test]
    fn a_poll_interval_beyond_the_window_is_refused() {
        let cli =
            Cli::try_parse_from(["rmcast", "demo", "--window", "10", "--poll-interval", "20"])
                .unwrap();
        let Command::Demo(d) = cli.command else {
            panic!()
        };
        let mut cfg = rmcast::SenderConfig::default();
        let e = d.common.apply(&mut cfg).unwrap_err();
        assert!(e.to_string().contains("poll interval 20"), "{e}");
    }

    #[test]
    fn the_segment_size_is_auto_unless_given() {
        let demo = |extra: &[&str]| {
            let mut argv = vec!["rmcast", "demo", "--protocol", "tcp-chain"];
            argv.extend_from_slice(extra);
            let cli = Cli::try_parse_from(argv)?;
            let Command::Demo(d) = cli.command else {
                panic!()
            };
            Ok::<_, clap::Error>(d.common.overlay().expect("an overlay").segment_size)
        };
        assert_eq!(demo(&[]).unwrap(), None);
        assert_eq!(demo(&["--segment-size", "auto"]).unwrap(), None);
        assert_eq!(parse_fec("off"), Ok(FecArg(None)));
        assert_eq!(
            parse_fec("64:2"),
            Ok(FecArg(Some(rmcast::FecShape::new(64, 2))))
        );
        assert_eq!(
            parse_fec("64:2:8"),
            Ok(FecArg(Some(rmcast::FecShape::new(64, 2).with_depth(8))))
        );
        for (bad, says) in [
            ("64", "not K:P"),
            ("64:2:8:1", "not K:P"),
            ("64:2:0", "outside 1..=64"),
            ("64:2:65", "outside 1..=64"),
            ("64:2:x", "D in"),
            ("0:1", "outside 1..=1024"),
            ("2000:1", "outside 1..=1024"),
            ("8:2000", "outside 0..=1024"),
            ("x:1", "K in"),
            ("8:-1", "P in"),
        ] {
            let e = parse_fec(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(demo(&["--segment-size", "64KiB"]).unwrap(), Some(64 << 10));
        let e = demo(&["--segment-size", "big"]).unwrap_err().to_string();
        assert!(e.contains("or `auto`"), "{e}");
    }
}
