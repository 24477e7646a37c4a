//! What a simulation run looks like: the network, the hosts, the faults and
//! the protocol configuration.

use rmcast_proto::{ReceiverConfig, SenderConfig};
use std::time::Duration;

/// How data packets are lost on a receiver's switch output port.
#[derive(Clone, Debug, PartialEq)]
pub enum LossModel {
    /// Nothing is lost.
    None,
    /// Each data packet is lost independently with this probability.
    Bernoulli(f64),
    /// Two-state burst loss (Gilbert–Elliott), one chain per receiver port,
    /// stepped once per full-size frame time on the link (at least once per
    /// data frame), so bursts have a duration in time, not in packets.
    GilbertElliott {
        /// Probability of moving from the good to the bad state.
        p_good_to_bad: f64,
        /// Probability of moving from the bad to the good state.
        p_bad_to_good: f64,
        /// Loss probability in the bad state.
        loss_in_bad: f64,
        /// Loss probability in the good state.
        loss_in_good: f64,
    },
    /// Exactly these data frames are lost on every receiver port, counted
    /// from 0 in the order they reach the port (for scripted tests).
    Frames(Vec<u64>),
}

impl LossModel {
    /// Bursty loss averaging about `mean` with bursts of about `burst` packets
    /// (all packets in a burst are lost, none outside it).
    #[must_use]
    pub fn bursty(mean: f64, burst: f64) -> Self {
        let p_bad_to_good = 1.0 / burst.max(1.0);
        // Stationary bad-state share π_b = p_gb / (p_gb + p_bg) = mean.
        let p_good_to_bad = mean * p_bad_to_good / (1.0 - mean).max(f64::MIN_POSITIVE);
        LossModel::GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_in_bad: 1.0,
            loss_in_good: 0.0,
        }
    }

    /// Long-run share of data packets lost.
    #[must_use]
    pub fn mean_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli(p) => p,
            LossModel::Frames(_) => 0.0,
            LossModel::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_in_bad,
                loss_in_good,
            } => {
                let total = p_good_to_bad + p_bad_to_good;
                if total == 0.0 {
                    return loss_in_good;
                }
                let bad = p_good_to_bad / total;
                bad * loss_in_bad + (1.0 - bad) * loss_in_good
            }
        }
    }
}

/// Receiver `receiver` (1..=N, named `r{receiver}`; host S-1+receiver) stops dead at virtual time `at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The receiver's host number, 1..=N.
    pub receiver: u16,
    /// Virtual time since the start of the run.
    pub at: Duration,
}

/// Receiver `receiver` (1..=N) stops for `duration` from virtual time `at`
/// (as SIGSTOP does): it reads nothing, so its socket buffer fills and
/// overflows, and its timers wait; then it goes on where it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pause {
    /// The receiver's host number, 1..=N.
    pub receiver: u16,
    /// Virtual time since the start of the run.
    pub at: Duration,
    /// How long it stays stopped.
    pub duration: Duration,
}

/// Receiver `receiver` (1..=N) is cut off from the switch for `duration`
/// from virtual time `at` (a cable pulled, `ip link set down`): every frame
/// to or from it is lost meanwhile; the host itself runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkDown {
    /// The receiver's host number, 1..=N.
    pub receiver: u16,
    /// Virtual time since the start of the run.
    pub at: Duration,
    /// How long the link stays down.
    pub duration: Duration,
}

/// The sender dies at `at` (SIGKILL), and a new one starts `after` later
/// on the same group: a new session id, a new port, the same object (as a
/// supervisor, systemd's `Restart=` or an operator would start it again).
/// Receivers take two sessions (as `serve` does): the dead session must
/// end at every receiver by itself, and the new one must deliver to all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restart {
    /// When the first sender dies.
    pub at: Duration,
    /// How long until the new sender starts.
    pub after: Duration,
}

/// What a host's CPU spends on each datagram: a fixed per-packet cost
/// (system call, UDP/IP, driver, the protocol's own bookkeeping) plus a
/// per-byte cost (copies and checksums), separately for sending and
/// receiving. A datagram of `b` UDP payload bytes costs
/// `send_per_packet + b × send_ps_per_byte` to send and
/// `recv_per_packet + b × recv_ps_per_byte` (+ up to `jitter`) to receive;
/// the host's one CPU does nothing else meanwhile. Fragmentation and
/// reassembly are not charged separately: on real hosts the per-fragment
/// interrupt and driver work is small next to the copies and is folded into
/// the per-byte figure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostCost {
    /// Fixed CPU time per datagram sent.
    pub send_per_packet: Duration,
    /// CPU time per UDP payload byte sent, in picoseconds.
    pub send_ps_per_byte: u64,
    /// Fixed CPU time per datagram received (after reassembly).
    pub recv_per_packet: Duration,
    /// CPU time per UDP payload byte received, in picoseconds.
    pub recv_ps_per_byte: u64,
    /// Extra receive cost drawn uniformly from `0..=jitter` per datagram, so
    /// hosts that get the same multicast do not answer in perfect lockstep.
    pub jitter: Duration,
}

impl Default for HostCost {
    fn default() -> Self {
        Self::modern()
    }
}

impl HostCost {
    /// A current server (the default): 2 µs per datagram each way (a
    /// `sendmsg`/`recvmsg` of one MTU-sized UDP datagram without GSO/GRO on a
    /// 2020s x86 core) and 0.1 ns per byte (one copy at ~10 GB/s), plus up to
    /// 1 µs of receive jitter. Not calibrated to any measurement here; it is
    /// simply small next to a 100 Mbit/s or 1 Gbit/s wire, so that the
    /// network, not the hosts, shapes the results.
    #[must_use]
    pub fn modern() -> Self {
        Self {
            send_per_packet: Duration::from_micros(2),
            send_ps_per_byte: 100,
            recv_per_packet: Duration::from_micros(2),
            recv_ps_per_byte: 100,
            jitter: Duration::from_micros(1),
        }
    }

    /// A Pentium III 650 MHz host with Linux 2.2 running a user-level
    /// protocol over UDP, as in the paper's cluster (section 5): 20 µs per
    /// datagram sent, 30 µs per datagram received, 6 ns per byte each way,
    /// up to 5 µs of receive jitter.
    ///
    /// Where the numbers come from (era measurements, not fitted to the
    /// paper's throughputs):
    ///
    /// * Per packet. Kernel UDP over Fast Ethernet on Linux 2.2 and
    ///   400–650 MHz Pentium II/III measured about 50–70 µs one-way for a
    ///   small message (the M-VIA / GAMMA / U-Net comparisons of the time),
    ///   of which the wire and switch are ~15 µs. Splitting the rest as
    ///   ~15 µs to send (syscall, UDP/IP, driver) and ~25 µs to receive
    ///   (interrupt, stack, wake-up, `recvfrom`), and adding ~5 µs of the
    ///   protocol's own work per packet (the paper calls `gettimeofday()` on
    ///   every send and every loop iteration, `select()`s, and walks its
    ///   window), gives 20 µs and 30 µs.
    /// * Per byte. A 650 MHz Coppermine on PC100/PC133 SDRAM copies about
    ///   300–350 MB/s out of cache (STREAM "copy"), i.e. ~3 ns per byte.
    ///   Both directions make two such passes: the kernel's combined
    ///   copy-and-checksum between user and kernel, and the protocol's own
    ///   copy between the application's message and its window buffer (the
    ///   copy the paper's Figure 9 blames for most of its overhead on large
    ///   messages). Hence 6 ns per byte.
    ///
    /// What that reproduces (checked in `tests/fragments_and_costs.rs`):
    ///
    /// * A stream of 1472-byte datagrams costs the sender 20 + 8.8 ≈ 29 µs
    ///   and a receiver 30 + 8.8 ≈ 39 µs each, against 123 µs on the wire:
    ///   raw UDP runs at the wire's ~94 Mbit/s of payload, hosts ~30 % busy,
    ///   as 100 Mbit/s Ethernet did on such hosts.
    /// * In the ack protocol the sender handles N acks per data packet.
    ///   With N = 30 that is ~0.9 ms of CPU per packet, which makes the
    ///   sender, not the wire, the bottleneck unless a packet takes longer
    ///   than that on the wire (> ~11 KB): ack goodput at N = 30 rises
    ///   steeply with the packet size and peaks at the largest packets, the
    ///   paper's Figure 10 shape and its choice of 50 KB packets.
    /// * Nak-poll with a poll every ~40 packets costs the sender under 1 ack
    ///   per packet, so it stays wire-bound from 1472-byte packets up.
    ///
    /// What it does not reproduce: the paper's ack protocol at 50 KB packets
    /// (68.0 Mbit/s in Table 3). With 50 KB on the wire taking 4.2 ms and
    /// 30 acks taking 0.9 ms, any plausible per-packet cost leaves that case
    /// wire-bound near 90 Mbit/s here; making it CPU-bound at 68 Mbit/s would
    /// need ~190 µs per ack or ~90 ns per byte, neither defensible. The gap
    /// is in what the simulator leaves out (kernel scheduling, the ack burst
    /// colliding on the sender's port with the next data, the paper's
    /// Go-back-N timer handling), not in these costs.
    #[must_use]
    pub fn pentium3_650mhz() -> Self {
        Self {
            send_per_packet: Duration::from_micros(20),
            send_ps_per_byte: 6_000,
            recv_per_packet: Duration::from_micros(30),
            recv_ps_per_byte: 6_000,
            jitter: Duration::from_micros(5),
        }
    }

    /// Nanoseconds of CPU to send a datagram of `udp_payload` bytes.
    #[must_use]
    pub fn send_ns(&self, udp_payload: usize) -> u64 {
        cost_ns(self.send_per_packet, self.send_ps_per_byte, udp_payload)
    }

    /// Nanoseconds of CPU to receive a datagram of `udp_payload` bytes (without jitter).
    #[must_use]
    pub fn recv_ns(&self, udp_payload: usize) -> u64 {
        cost_ns(self.recv_per_packet, self.recv_ps_per_byte, udp_payload)
    }
}

fn cost_ns(per_packet: Duration, ps_per_byte: u64, bytes: usize) -> u64 {
    let fixed = u64::try_from(per_packet.as_nanos()).unwrap_or(u64::MAX);
    fixed.saturating_add((bytes as u64).saturating_mul(ps_per_byte) / 1000)
}

/// Smallest MTU an IPv4 link may have (RFC 791).
pub const MIN_MTU: usize = 68;
/// IPv4 header without options.
const IP_HEADER: usize = 20;
/// UDP header.
const UDP_HEADER: usize = 8;
/// Smallest Ethernet payload; shorter frames are padded.
const MIN_ETHERNET_PAYLOAD: usize = 46;

/// One simulation run: topology, link and host parameters, faults, protocol.
///
/// The defaults model a quiet 100 Mbit/s switched Ethernet with a 1500-byte
/// MTU: 5 µs propagation per hop, 38 bytes of Ethernet overhead per frame
/// (header, FCS, preamble, inter-frame gap), 256 KiB drop-tail queues on
/// every uplink and switch port (a host's own sends wait while its uplink
/// is full, like a UDP socket's send buffer), 4 MiB socket receive buffers,
/// [`HostCost::modern`] hosts, no loss, no faults, and a 600 s virtual-time
/// limit. [`Scenario::fsu_2004`] is the paper's cluster.
///
/// A datagram larger than the MTU travels as IP fragments, each its own
/// frame on every link: own wire size, own place in the queues, own loss
/// draw. The receiving host reassembles it and hands it to the socket only
/// if every fragment arrived (see [`Scenario::fragments`]).
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Number of senders (hosts 0..S), each with its own session, object
    /// (`object_size` bytes, its own content) and rate state, all to one
    /// group; every receiver runs one receiver machine per sender. At
    /// least 1 (the default: the single-sender model, where the sender
    /// is no member of its group).
    pub senders: u16,
    /// Number of receivers (hosts S..S+N, named `r1`..`rN`; with one
    /// sender hosts 1..=N). Overrides `config.receivers`.
    pub receivers: u16,
    /// Size of the object sent, in bytes (pseudo-random content from the seed).
    pub object_size: u64,
    /// The sender's protocol configuration (`receivers` is taken from above).
    pub config: SenderConfig,
    /// Template for every receiver's configuration (`receiver_id` and `name` are set per host).
    /// By default its FEC keeps no copy of the data (`fec_read_back`): the
    /// simulator's storage is the object, read back where a packet was
    /// delivered, so 10,000 receivers need no block buffers of their own.
    /// Set it `false` to run the receivers that keep their copies.
    pub receiver: ReceiverConfig,
    /// First data sequence number; `None` draws it from the seed.
    pub isn: Option<u32>,
    /// Rate of every link and switch port, in bits per second.
    pub link_rate_bits_per_s: u64,
    /// Propagation delay of each hop (host to switch, switch to host).
    pub propagation_delay: Duration,
    /// Largest IP packet a link carries, in bytes (at least [`MIN_MTU`]).
    pub mtu: usize,
    /// Per-frame Ethernet overhead added to the IP packet (header, FCS, preamble, gap).
    /// IP packets shorter than 46 bytes are padded to 46 first.
    pub ethernet_overhead_bytes: usize,
    /// Drop-tail limit of each host's uplink queue (the NIC), in wire bytes.
    pub uplink_queue_bytes: usize,
    /// Whether a host whose uplink is full holds its next datagram until it
    /// fits, meanwhile still reading its socket and serving its timers (a
    /// protocol that polls a non-blocking socket for writability; a full
    /// socket send buffer stops `sendto` the same way). When false the
    /// datagram is sent into the full queue and dropped
    /// (`Drops::uplink_overflow`).
    pub blocking_send: bool,
    /// Drop-tail limit of each switch output port, in wire bytes.
    pub port_queue_bytes: usize,
    /// Socket receive buffer of every host, in UDP payload bytes (of whole datagrams).
    pub socket_buffer_bytes: usize,
    /// Per host, the fragments of incomplete datagrams it holds at most, in
    /// IP payload bytes; over it the oldest incomplete datagram is dropped.
    pub reassembly_buffer_bytes: usize,
    /// An incomplete datagram is dropped this long after its first fragment arrived.
    pub reassembly_timeout: Duration,
    /// CPU cost of sending and receiving datagrams, for every host not in
    /// `receiver_costs`.
    pub cost: HostCost,
    /// Per-receiver overrides of `cost` (receiver number 1..=N, its cost): a
    /// slower receiver takes fewer packets per second (its capacity is
    /// about 1 / `recv_ns(packet)`).
    pub receiver_costs: Vec<(u16, HostCost)>,
    /// Loss of data frames (every fragment draws separately) on each receiver's switch port.
    pub loss: LossModel,
    /// Loss probability of each receiver-to-sender frame on the sender's switch port.
    pub control_loss: f64,
    /// Receivers that crash, and when.
    pub crashes: Vec<Crash>,
    /// Receivers that stop for a while, and when.
    pub pauses: Vec<Pause>,
    /// Receivers whose link goes down for a while, and when.
    pub link_downs: Vec<LinkDown>,
    /// Mean rate of injected garbage datagrams (random bytes and foreign sessions), per virtual second.
    pub garbage_per_s: f64,
    /// Seed of every random choice in the run.
    pub seed: u64,
    /// Virtual time by which the sender must have finished.
    pub time_limit: Duration,
    /// Record [`crate::RunReport::outstanding_trace`]: the sender's
    /// outstanding packets after every step of its machine (off by default;
    /// it costs memory proportional to the object's packets).
    pub trace_outstanding: bool,
    /// Record [`crate::RunReport::rate_trace`]: the sender's Hunt spacing
    /// whenever it changes (only under `RateControl::Hunt`).
    pub trace_rate: bool,
    /// When each sender's driver has the object's hash (the runtime hashes
    /// in the background while sending; `Close` carries the hash, so it
    /// waits for it): `None` gives it up front, `Some(d)` at `d` of
    /// virtual time (`Sender::set_object_hash`).
    pub hash_ready_at: Option<Duration>,
    /// Resume and delta (with `config.have_after` set): per receiver
    /// (number 1..=N), the packets it finds on its disk once the
    /// manifest's packets are in, as `(first, count)` ranges. Its
    /// application then stores their bytes and reports them
    /// (`Receiver::report_held`); receivers not named hold nothing.
    pub held: Vec<(u16, Vec<(u32, u32)>)>,
    /// Probability that a datagram (one that fits a frame) reaching a host
    /// arrives twice, the copy a quarter of `reorder_delay` later.
    pub duplicate: f64,
    /// Probability that such a datagram is held back `reorder_delay`, so
    /// the ones sent after it overtake it.
    pub reorder: f64,
    /// How long a reordered datagram is held back.
    pub reorder_delay: Duration,
    /// The sender dies and a new one starts (one sender only): the run's
    /// report is the new sender's.
    pub restart: Option<Restart>,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            senders: 1,
            receivers: 1,
            object_size: 1 << 20,
            config: SenderConfig::default(),
            receiver: ReceiverConfig {
                fec_read_back: true,
                ..ReceiverConfig::default()
            },
            isn: None,
            link_rate_bits_per_s: 100_000_000,
            propagation_delay: Duration::from_micros(5),
            mtu: 1500,
            ethernet_overhead_bytes: 38,
            uplink_queue_bytes: 256 * 1024,
            blocking_send: true,
            port_queue_bytes: 256 * 1024,
            socket_buffer_bytes: 4 * 1024 * 1024,
            reassembly_buffer_bytes: 256 * 1024,
            reassembly_timeout: Duration::from_millis(30),
            cost: HostCost::modern(),
            receiver_costs: Vec::new(),
            loss: LossModel::None,
            control_loss: 0.0,
            crashes: Vec::new(),
            pauses: Vec::new(),
            link_downs: Vec::new(),
            garbage_per_s: 0.0,
            seed: 1,
            time_limit: Duration::from_secs(600),
            trace_outstanding: false,
            trace_rate: false,
            hash_ready_at: None,
            held: Vec::new(),
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(500),
            restart: None,
        }
    }
}

impl Scenario {
    /// This scenario with every datagram sealed under one group key (the
    /// product's default; a scenario without it runs insecure, as the
    /// papers' protocols did and the golden files record). Each sender's
    /// session nonce is drawn from the seed.
    #[must_use]
    pub fn sealed(mut self) -> Self {
        let key = std::sync::Arc::new(rmcast_proto::security::GroupKey::from_secret(
            [0x5E; rmcast_proto::security::KEY_LEN],
        ));
        self.config.group_key = Some(key.clone());
        self.receiver.group_key = Some(key);
        self
    }

    /// The paper's cluster (section 5): 30 receivers and a 2 MB (10^6)
    /// object, 100 Mbit/s switched Ethernet with a 1500-byte MTU, and
    /// [`HostCost::pentium3_650mhz`] hosts. Linux 2.2's defaults set the
    /// buffers: a 64 KiB socket receive buffer (`rmem_default`, room for one
    /// maximal datagram), a NIC queue of 100 frames (`txqueuelen`, ~150 KB)
    /// that a sender waits on, and 256 KiB of reassembly memory
    /// (`ipfrag_high_thresh`). The switch ports keep the default 256 KiB.
    /// The paper's two cascaded switches are one switch here, and its
    /// 2-round-trip buffer-management handshake is rmcast's offer/accept.
    /// The protocol configuration is left at its default: set
    /// `config.protocol`, `packet_size`, `window` and `poll_interval`.
    #[must_use]
    pub fn fsu_2004() -> Self {
        Self {
            receivers: 30,
            object_size: 2_000_000,
            socket_buffer_bytes: 64 * 1024,
            uplink_queue_bytes: 100 * 1538,
            reassembly_buffer_bytes: 256 * 1024,
            cost: HostCost::pentium3_650mhz(),
            ..Self::default()
        }
    }

    /// IP payload bytes in every fragment but the last: the MTU less the IP
    /// header, rounded down to a multiple of 8 (fragment offsets count
    /// 8-byte units).
    fn fragment_data(&self) -> usize {
        (self.mtu.max(MIN_MTU) - IP_HEADER) & !7
    }

    /// IP fragments a datagram of `udp_payload` bytes travels as: 1 when
    /// `udp_payload + 28 <= mtu`, else ⌈(udp_payload + 8) / fragment data⌉,
    /// the fragment data being `mtu - 20` rounded down to a multiple of 8
    /// (1480 for a 1500-byte MTU: a 65,507-byte datagram is 45 fragments).
    #[must_use]
    pub fn fragments(&self, udp_payload: usize) -> usize {
        if udp_payload + UDP_HEADER + IP_HEADER <= self.mtu {
            1
        } else {
            (udp_payload + UDP_HEADER).div_ceil(self.fragment_data())
        }
    }

    /// IP payload bytes of fragment `index` (0-based) of a datagram of
    /// `udp_payload` bytes (the first one carries the UDP header).
    #[must_use]
    pub fn fragment_ip_payload(&self, udp_payload: usize, index: usize) -> usize {
        let k = self.fragments(udp_payload);
        let total = udp_payload + UDP_HEADER;
        if k == 1 {
            return total;
        }
        let d = self.fragment_data();
        if index + 1 < k {
            d
        } else {
            total - d * (k - 1)
        }
    }

    /// Bytes fragment `index` of a datagram of `udp_payload` bytes occupies
    /// on the wire: its IP payload + 20 bytes of IP header (padded to the
    /// Ethernet minimum) + the Ethernet overhead.
    #[must_use]
    pub fn frame_wire_bytes(&self, udp_payload: usize, index: usize) -> usize {
        let ip = self.fragment_ip_payload(udp_payload, index) + IP_HEADER;
        ip.max(MIN_ETHERNET_PAYLOAD) + self.ethernet_overhead_bytes
    }

    /// The CPU cost of host `h` (hosts 0..S are the senders; receiver
    /// `k` of `receiver_costs` is host S-1+k).
    #[must_use]
    pub fn cost_of(&self, h: usize) -> &HostCost {
        let senders = usize::from(self.senders.max(1));
        let Some(k) = (h + 1).checked_sub(senders).filter(|_| h >= senders) else {
            return &self.cost;
        };
        self.receiver_costs
            .iter()
            .rev()
            .find(|(r, _)| usize::from(*r) == k)
            .map_or(&self.cost, |(_, c)| c)
    }

    /// Bytes a datagram of `udp_payload` bytes occupies on the wire, all its
    /// fragments together (IP + UDP + Ethernet).
    #[must_use]
    pub fn wire_bytes(&self, udp_payload: usize) -> usize {
        (0..self.fragments(udp_payload))
            .map(|i| self.frame_wire_bytes(udp_payload, i))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursty_loss_has_the_requested_mean() {
        let m = LossModel::bursty(0.03, 4.0);
        assert!((m.mean_loss() - 0.03).abs() < 1e-9, "{m:?}");
    }

    #[test]
    fn wire_size_adds_ip_udp_and_ethernet() {
        let s = Scenario::default();
        assert_eq!(s.wire_bytes(1472), 1538);
        assert_eq!(s.fragments(1472), 1);
        // Short packets are padded to Ethernet's 46-byte minimum payload.
        assert_eq!(s.wire_bytes(10), 46 + 38);
    }

    #[test]
    fn datagrams_over_the_mtu_fragment() {
        let s = Scenario::default();
        assert_eq!(s.fragments(1473), 2);
        // ⌈(65507 + 8) / 1480⌉ = 45 fragments, the last with 395 bytes.
        assert_eq!(s.fragments(65_507), 45);
        assert_eq!(s.fragment_ip_payload(65_507, 0), 1480);
        assert_eq!(s.fragment_ip_payload(65_507, 44), 65_515 - 44 * 1480);
        assert_eq!(s.wire_bytes(65_507), 65_515 + 45 * (20 + 38));
        // 8 KB packets: 6 fragments.
        assert_eq!(s.fragments(8192), 6);
        // Fragment data is a multiple of 8: a 1006-byte MTU carries 984.
        let odd = Scenario {
            mtu: 1006,
            ..Scenario::default()
        };
        assert_eq!(odd.fragment_ip_payload(5000, 0), 984);
        assert_eq!(odd.fragments(5000), 5008usize.div_ceil(984));
    }

    #[test]
    fn host_cost_is_per_packet_plus_per_byte() {
        let p3 = HostCost::pentium3_650mhz();
        assert_eq!(p3.send_ns(0), 20_000);
        assert_eq!(p3.send_ns(1472), 20_000 + 8_832);
        assert_eq!(p3.recv_ns(50_000), 30_000 + 300_000);
        assert_eq!(HostCost::modern().recv_ns(1000), 2_100);
    }
}
