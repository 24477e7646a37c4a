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
    /// stepped once per data packet.
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

/// Receiver `receiver` (1..=N, named `r{receiver}`) stops dead at virtual time `at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The receiver's host number, 1..=N.
    pub receiver: u16,
    /// Virtual time since the start of the run.
    pub at: Duration,
}

/// One simulation run: topology, link and host parameters, faults, protocol.
///
/// The defaults model a quiet 100 Mbit/s switched Ethernet: 5 µs propagation
/// per hop, 38 bytes of Ethernet overhead per frame (header, FCS, preamble,
/// inter-frame gap), 256 KiB drop-tail queues on every uplink and switch
/// port, 4 MiB socket receive buffers, 2 µs of CPU per packet received and per
/// packet sent plus up to 1 µs of receive jitter, no loss, no faults, and a
/// 600 s virtual-time limit.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Number of receivers (hosts 1..=N; host 0 is the sender). Overrides `config.receivers`.
    pub receivers: u16,
    /// Size of the object sent, in bytes (pseudo-random content from the seed).
    pub object_size: u64,
    /// The sender's protocol configuration (`receivers` is taken from above).
    pub config: SenderConfig,
    /// Template for every receiver's configuration (`receiver_id` and `name` are set per host).
    pub receiver: ReceiverConfig,
    /// First data sequence number; `None` draws it from the seed.
    pub isn: Option<u32>,
    /// Rate of every link and switch port, in bits per second.
    pub link_rate_bits_per_s: u64,
    /// Propagation delay of each hop (host to switch, switch to host).
    pub propagation_delay: Duration,
    /// Per-frame Ethernet overhead added to the IP datagram (header, FCS, preamble, gap).
    pub ethernet_overhead_bytes: usize,
    /// Drop-tail limit of each host's uplink queue (the NIC), in wire bytes.
    pub uplink_queue_bytes: usize,
    /// Drop-tail limit of each switch output port, in wire bytes.
    pub port_queue_bytes: usize,
    /// Socket receive buffer of every host, in UDP payload bytes.
    pub socket_buffer_bytes: usize,
    /// CPU time a host spends on each datagram it receives.
    pub recv_cost: Duration,
    /// CPU time a host spends on each datagram it sends.
    pub send_cost: Duration,
    /// Extra receive cost drawn uniformly from `0..=cpu_jitter` per datagram, so
    /// hosts that get the same multicast do not answer in perfect lockstep.
    pub cpu_jitter: Duration,
    /// Loss of data packets on each receiver's switch port.
    pub loss: LossModel,
    /// Loss probability of receiver-to-sender packets on the sender's switch port.
    pub control_loss: f64,
    /// Receivers that crash, and when.
    pub crashes: Vec<Crash>,
    /// Mean rate of injected garbage datagrams (random bytes and foreign sessions), per virtual second.
    pub garbage_per_s: f64,
    /// Seed of every random choice in the run.
    pub seed: u64,
    /// Virtual time by which the sender must have finished.
    pub time_limit: Duration,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            receivers: 1,
            object_size: 1 << 20,
            config: SenderConfig::default(),
            receiver: ReceiverConfig::default(),
            isn: None,
            link_rate_bits_per_s: 100_000_000,
            propagation_delay: Duration::from_micros(5),
            ethernet_overhead_bytes: 38,
            uplink_queue_bytes: 256 * 1024,
            port_queue_bytes: 256 * 1024,
            socket_buffer_bytes: 4 * 1024 * 1024,
            recv_cost: Duration::from_micros(2),
            send_cost: Duration::from_micros(2),
            cpu_jitter: Duration::from_micros(1),
            loss: LossModel::None,
            control_loss: 0.0,
            crashes: Vec::new(),
            garbage_per_s: 0.0,
            seed: 1,
            time_limit: Duration::from_secs(600),
        }
    }
}

impl Scenario {
    /// Bytes a datagram of `udp_payload` bytes occupies on the wire (IP + UDP + Ethernet).
    #[must_use]
    pub fn wire_bytes(&self, udp_payload: usize) -> usize {
        udp_payload + 28 + self.ethernet_overhead_bytes
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
        assert_eq!(Scenario::default().wire_bytes(1472), 1538);
    }
}
