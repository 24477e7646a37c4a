//! The flags `send` and `demo` share, and what they set in the engine.

use super::parse::*;
use super::*;

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
