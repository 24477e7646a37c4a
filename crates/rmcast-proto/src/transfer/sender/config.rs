//! How a sender runs a transfer ([`SenderConfig`]), and the checks that
//! refuse a configuration that cannot work ([`ConfigError`]).

use crate::security::{GroupKey, SESSION_NONCE_LEN};
use crate::{AutoConfig, FeedbackPolicy, RateControl, RateGroupConfig, TreeShape};
use rmcast_wire::{
    DATA_HEADER_LEN, FecShape, MAX_DATAGRAM, MAX_RECEIVERS, PARITY_HEADER_LEN, ProtocolId,
    SEAL_OVERHEAD_DATA,
};
use std::sync::Arc;
use std::time::Duration;

/// How a sender runs a transfer.
#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// Reliability protocol.
    pub protocol: ProtocolId,
    /// Receivers to wait for before sending (1..=65520).
    pub receivers: u16,
    /// Size of a data datagram including rmcast's 24-byte header (the UDP
    /// payload): 1472 fills a 1500-byte Ethernet MTU; up to 65,507 with IP
    /// fragmentation.
    pub packet_size: usize,
    /// Packets in flight before the sender waits for acknowledgements.
    pub window: u32,
    /// NAK-poll: packets between polls; `None` means 85 % of the window.
    pub poll_interval: Option<u32>,
    /// Initial retransmission timeout; doubles on each expiry in a row.
    pub rto: Duration,
    /// Ceiling of the backed-off retransmission timeout.
    pub rto_max: Duration,
    /// Minimum time between two transmissions of one packet on NAKs.
    pub suppress: Duration,
    /// A receiver that owes feedback and is silent this long is removed.
    pub peer_timeout: Duration,
    /// What to do with a receiver that falls far behind the rest of the
    /// group while it keeps answering (a slow disk, a slow link): wait for
    /// it (the group goes at its pace), or eject it.
    pub laggard: Laggard,
    /// The progress watchdog: a session that makes no progress (no new
    /// packet acknowledged by every receiver, no receiver accepting,
    /// verifying or removed, no change of phase) this long while sending
    /// or closing is aborted, naming what stalled. Receivers that are
    /// silent are removed first (`peer_timeout`); this catches the stalls
    /// where everyone still talks: a rate collapsed to its floor, a repair
    /// that never lands. Must exceed `peer_timeout + rto_max`. `None`: see
    /// [`SenderConfig::stall_timeout`].
    pub stall_timeout: Option<Duration>,
    /// How long to wait for `receivers` to register.
    pub join_wait: Duration,
    /// Start anyway when the join wait runs out with at least this many
    /// of `receivers` registered (`None`: all of them or fail). The
    /// session then runs with those; the outcome counts the others as
    /// missing and is not `ok`.
    pub min_receivers: Option<u16>,
    /// Period of the session announcement while waiting for receivers.
    pub hello_interval: Duration,
    /// Data pacing in bits per second on the wire: each datagram counts
    /// with its UDP, IPv4 and Ethernet headers ([`WIRE_OVERHEAD_BYTES`]),
    /// as `tc` counts a link's rate, so the link rate itself is a valid
    /// setting; `None`: window-limited.
    /// With `rate_control` unset this is today's fixed rate; under
    /// [`RateControl::Hunt`] it is the rate the controller starts at.
    pub rate_bits_per_s: Option<u64>,
    /// How the data rate is limited; `None` (the default) keeps the
    /// behaviour from before rate control existed: [`RateControl::Fixed`]
    /// at `rate_bits_per_s` if set, else [`RateControl::Off`]. See
    /// [`SenderConfig::rate_control`].
    pub rate_control: Option<RateControl>,
    /// Several senders on one group (only under [`RateControl::Hunt`]):
    /// take part in the group's membership and rate resynchronisation
    /// (`RateReport`, `RateSync`) and multicast a LAST `RateNak` on each
    /// acknowledgement timeout. `None` (the default): a lone sender. Under
    /// Hunt a sender backs off on other sessions' `RateNak`s either way.
    pub rate_group: Option<RateGroupConfig>,
    /// Test knob sent in the offer: receivers drop this many data packets
    /// per million (`--loss`). Zero in production.
    pub test_loss_ppm: u32,
    /// How lost packets are repaired.
    pub repair: Repair,
    /// Block FEC (`--fec K:P`): losses are repaired with parity packets,
    /// each of which repairs a different loss at every receiver, instead
    /// of resending data; with P > 0 every block of K data packets is
    /// followed by P parity packets before anyone asks. Needs
    /// [`Repair::Selective`]. `None` (the default): repair by resending.
    pub fec: Option<FecShape>,
    /// `--protocol auto`: when registration closes, choose `protocol`,
    /// `fec`, `window` and `poll_interval` for the group that registered
    /// from the decision table ([`crate::auto`]), keeping those the
    /// [`AutoConfig`] says the user fixed. The values here are then the
    /// provisional ones (the `Hello` carries `protocol`). `None` (the
    /// default): run exactly what is configured.
    pub auto: Option<AutoConfig>,
    /// Tree protocol: chain length H of the flat tree.
    pub tree_height: u16,
    /// Tree protocol: flat chains or a binary tree.
    pub tree_shape: TreeShape,
    /// The group key: every datagram of the session is sealed under it
    /// (`crate::security`), and every datagram received must open under
    /// it. `None` runs insecure, which the receivers must do too.
    pub group_key: Option<Arc<GroupKey>>,
    /// The session's nonce (fresh randomness from the driver, per
    /// session): with the session id it makes the session's keys unique.
    /// Unused without a key.
    pub session_nonce: [u8; SESSION_NONCE_LEN],
    /// Resume and delta: the object's first `have_after` bytes (a tree's
    /// manifest) go first; then the window waits for every receiver's
    /// `Have` report of the packets it holds already, and packets every
    /// receiver holds are not sent. `None` (the default): no reports,
    /// every packet goes.
    pub have_after: Option<u64>,
    /// How long the window waits at the manifest's end for a receiver that
    /// has neither reported nor said it is still looking; it is then taken
    /// to hold nothing.
    pub have_wait: Duration,
    /// Longest wait at the manifest's end in all (receivers still looking
    /// through what they hold).
    pub have_wait_max: Duration,
}

/// How the sender repairs losses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair {
    /// The paper's Go-back-N: resend everything from the first packet some
    /// receiver lacks.
    GoBackN,
    /// Selective repeat: resend only the packets some receiver reported
    /// missing, by unicast when exactly one receiver lacks it, by multicast
    /// otherwise.
    Selective,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            protocol: ProtocolId::NakPoll,
            receivers: 1,
            packet_size: 1472,
            window: 512,
            poll_interval: None,
            rto: Duration::from_millis(50),
            rto_max: Duration::from_millis(800),
            suppress: Duration::from_millis(5),
            peer_timeout: Duration::from_secs(5),
            laggard: Laggard::Wait,
            stall_timeout: None,
            join_wait: Duration::from_secs(30),
            min_receivers: None,
            hello_interval: Duration::from_millis(100),
            rate_bits_per_s: None,
            rate_control: None,
            rate_group: None,
            test_loss_ppm: 0,
            repair: Repair::Selective,
            fec: None,
            auto: None,
            tree_height: 10,
            tree_shape: TreeShape::Flat,
            group_key: None,
            session_nonce: [0; SESSION_NONCE_LEN],
            have_after: None,
            have_wait: Duration::from_secs(2),
            have_wait_max: Duration::from_secs(120),
        }
    }
}

/// What a sender does with a receiver that falls far behind the group
/// (`rmcast send --laggard`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Laggard {
    /// Wait for it: the window holds at its point, so the whole group
    /// goes at its pace (every receiver, however slow, gets the object).
    #[default]
    Wait,
    /// Eject it once it has been at least half a window behind the
    /// group's median receiver for `after` in a row: it is named as
    /// failed, and the others go on at their own pace.
    Eject {
        /// How long it may stay that far behind (at least 100 ms).
        after: Duration,
    },
    /// Move it, by the same rule as `Eject`, to a TCP catch-up: it is sent
    /// a `Move` naming `port`, stops taking the multicast data and fetches
    /// the rest of the object over TCP from the sender (the driver serves
    /// the port and reports the outcome with
    /// [`Sender::catch_up_done`](crate::Sender::catch_up_done)). The group
    /// goes on at its own pace, and the session ends once the moved
    /// receivers are done too.
    Tcp {
        /// How long it may stay that far behind (at least 100 ms).
        after: Duration,
        /// The driver's TCP port for catch-ups; 0 until the driver binds
        /// one (a sender that must move a receiver with port 0 ejects it).
        port: u16,
    },
}

impl Laggard {
    /// How long a receiver may stay far behind by default (`rmcast send
    /// --laggard-after`'s default).
    pub const DEFAULT_AFTER: Duration = Duration::from_secs(2);

    /// The user's setting: `mode` `"tcp"`, `"eject"` or `"wait"` (as
    /// `rmcast send --laggard`), and how long a receiver may stay far
    /// behind (`None`: [`Laggard::DEFAULT_AFTER`]; only with tcp and
    /// eject). A `Tcp`'s port is the driver's to bind. The error says what
    /// is wrong, for a human.
    pub fn from_setting(mode: &str, after: Option<Duration>) -> Result<Self, String> {
        let after_or_default = after.unwrap_or(Self::DEFAULT_AFTER);
        match mode {
            "wait" if after.is_some() => {
                Err("a laggard delay applies to the tcp and eject modes, not wait".into())
            }
            "wait" => Ok(Self::Wait),
            "eject" => Ok(Self::Eject {
                after: after_or_default,
            }),
            "tcp" => Ok(Self::Tcp {
                after: after_or_default,
                port: 0,
            }),
            other => Err(format!(
                "unknown laggard mode {other:?}: one of tcp, eject, wait"
            )),
        }
    }

    /// How long a receiver may stay far behind before it is ejected or
    /// moved; `None` for [`Laggard::Wait`].
    #[must_use]
    pub fn after(self) -> Option<Duration> {
        match self {
            Self::Wait => None,
            Self::Eject { after } | Self::Tcp { after, .. } => Some(after),
        }
    }
}

/// A sender configuration or object that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A minimum of receivers that is zero or above the receivers expected.
    #[error("--min-receivers {min} is outside 1..={receivers} (the receivers expected)")]
    MinReceivers {
        /// Requested minimum.
        min: u16,
        /// Receivers expected.
        receivers: u16,
    },
    /// Packet size outside 25..=65507.
    #[error("packet size {0} is outside {min}..={max} bytes", min = DATA_HEADER_LEN + 1, max = MAX_DATAGRAM)]
    PacketSize(usize),
    /// Window of zero packets or more than 2^20.
    #[error("window {0} is outside 1..=1048576 packets")]
    Window(u32),
    /// Poll interval zero or larger than the window.
    #[error("poll interval {interval} is outside 1..={window} (the window)")]
    PollInterval {
        /// Requested interval.
        interval: u32,
        /// Configured window.
        window: u32,
    },
    /// Receiver count zero or too large.
    #[error("receiver count {0} is outside 1..={max}", max = MAX_RECEIVERS)]
    Receivers(u16),
    /// A laggard ejected after less than 100 ms: ordinary repair jitter.
    #[error("--laggard-after {0:?} is under 100 ms: a repair in flight would eject receivers")]
    LaggardAfter(Duration),
    /// The ring needs a window larger than the group.
    #[error(
        "the ring protocol needs a window larger than the number of receivers \
         (window {window}, {receivers} receivers): use --window {min} or more",
        min = u32::from(*receivers) + 1
    )]
    RingWindow {
        /// Configured window.
        window: u32,
        /// Receivers in the ring.
        receivers: u16,
    },
    /// A FEC shape outside the code's limits.
    #[error(
        "FEC of {} data and {} proactive parity packets per block is outside the code's \
         limits (K in 1..=1024, P in 0..=1024)",
        .0.data,
        .0.proactive
    )]
    Fec(FecShape),
    /// FEC repairs by parity: Go-back-N resends data instead.
    #[error("FEC repairs with parity packets and cannot run with Go-back-N repair")]
    FecGoBackN,
    /// A FEC block (or interleaving group of K·D packets) larger than the
    /// window: its parity could not go before the window moved, and the
    /// window waits for its repair.
    #[error(
        "FEC blocks spanning {data} packets (K·D) do not fit a window of {window}: use \
         --window {data} or more (twice that keeps data flowing while a group is repaired), \
         or a smaller K or D"
    )]
    FecWindow {
        /// K·D: the packets one block spans.
        data: u32,
        /// The window.
        window: u32,
    },
    /// Receivers would need more than [`crate::fec::MAX_RING_BYTES`] to
    /// keep the window's blocks.
    #[error(
        "FEC over this window and packet size needs {} MiB of buffers at every receiver \
         (at most {} MiB): use a smaller --window or --packet-size",
        bytes >> 20,
        crate::fec::MAX_RING_BYTES >> 20
    )]
    FecBuffers {
        /// Bytes a receiver would need.
        bytes: u64,
    },
    /// FEC rebuilds packets from those a receiver received; packets it
    /// found on its disk (resume, delta) are not in its buffers.
    #[error("FEC cannot run with resume or delta transfers (--resume, a tree's delta)")]
    FecDelta,
    /// Tree height zero or above 32767.
    #[error("tree height {0} is outside 1..=32767")]
    TreeHeight(u16),
    /// The object needs more than 2^32 - 1 packets.
    #[error("object of {size} bytes needs more than 2^32-1 packets of {payload} bytes")]
    ObjectTooLarge {
        /// Object size in bytes.
        size: u64,
        /// Payload bytes per packet.
        payload: usize,
    },
    /// The stall timeout would fire before a silent receiver is removed.
    #[error(
        "stall timeout {stall:?} must exceed the peer timeout plus the largest RTO ({floor:?})"
    )]
    StallTimeout {
        /// Configured stall timeout.
        stall: Duration,
        /// `peer_timeout + rto_max`.
        floor: Duration,
    },
    /// The object name is longer than 255 bytes.
    #[error("object name is {0} bytes; at most 255")]
    NameTooLong(usize),
}

impl SenderConfig {
    /// Object bytes carried by one full data packet: the packet size less
    /// the data header and, when sealing, the seal's counter and tag.
    #[must_use]
    /// Under FEC it is even and 4 bytes shorter, so that a parity packet
    /// (a longer header, an even symbol) is no longer than a data packet.
    pub fn payload_size(&self) -> usize {
        let plain = self
            .packet_size
            .saturating_sub(DATA_HEADER_LEN + self.seal_overhead());
        match self.fec {
            None => plain,
            Some(_) => plain.saturating_sub(PARITY_HEADER_LEN - DATA_HEADER_LEN) & !1,
        }
    }

    /// Bytes sealing adds to a data packet (zero when insecure).
    #[must_use]
    pub fn seal_overhead(&self) -> usize {
        if self.group_key.is_some() {
            SEAL_OVERHEAD_DATA
        } else {
            0
        }
    }

    /// NAK-poll's default packets between polls: 85 % of the window.
    /// Interleaved FEC leaves a receiver's cumulative point up to a group
    /// of K·D packets behind what it received (a loss waits for its
    /// group's parity), so the answer to one poll may leave the window
    /// that much shorter: then 85 % of the window less a group, so that
    /// the next poll goes before the window can fill.
    fn default_poll_interval(&self) -> u32 {
        let room = match self.fec {
            Some(f) if f.depth > 1 => self.window.saturating_sub(f.group_len()),
            _ => self.window,
        };
        ((u64::from(room) * 85 / 100) as u32).max(1)
    }

    /// The feedback policy this configuration selects.
    pub fn policy(&self) -> Result<FeedbackPolicy, ConfigError> {
        match self.protocol {
            ProtocolId::Ack => Ok(FeedbackPolicy::Ack),
            ProtocolId::NakPoll => {
                let interval = self
                    .poll_interval
                    .unwrap_or_else(|| self.default_poll_interval());
                if interval == 0 || interval > self.window {
                    return Err(ConfigError::PollInterval {
                        interval,
                        window: self.window,
                    });
                }
                Ok(FeedbackPolicy::NakPoll {
                    poll_interval: interval,
                })
            }
            ProtocolId::Ring => {
                if self.window <= u32::from(self.receivers) {
                    return Err(ConfigError::RingWindow {
                        window: self.window,
                        receivers: self.receivers,
                    });
                }
                Ok(FeedbackPolicy::Ring {
                    receivers: self.receivers,
                })
            }
            ProtocolId::Tree => {
                let flat = self.tree_shape == TreeShape::Flat;
                if flat && self.tree_height == 0 || self.tree_height > 0x7FFF {
                    return Err(ConfigError::TreeHeight(self.tree_height));
                }
                Ok(FeedbackPolicy::Tree {
                    shape: self.tree_shape,
                    height: self.tree_height,
                    receivers: self.receivers,
                })
            }
        }
    }

    /// The rate control in effect: `rate_control` if set, else a fixed rate
    /// at `rate_bits_per_s`, else none. A Hunt controller given a
    /// `rate_bits_per_s` starts at that rate.
    #[must_use]
    pub fn rate_control(&self) -> RateControl {
        match (&self.rate_control, self.rate_bits_per_s) {
            (Some(RateControl::Hunt(p)), Some(bits)) => {
                let pps = bits as f64 / 8.0 / self.packet_size.max(1) as f64;
                RateControl::Hunt(p.clone().starting_at(pps))
            }
            (Some(rc), _) => rc.clone(),
            (None, Some(bits)) => RateControl::Fixed {
                bytes_per_s: bits / 8,
            },
            (None, None) => RateControl::Off,
        }
    }

    /// Checks every field; `Sender::new` calls it.
    /// The progress watchdog's period: as configured, else the longest of
    /// `DEFAULT_STALL_TIMEOUT` (20 s), four times `peer_timeout + rto_max`, and
    /// four windows at the starting rate (a paced sender with a large
    /// window may see its base move once a window).
    #[must_use]
    pub fn stall_timeout(&self) -> Duration {
        if let Some(t) = self.stall_timeout {
            return t;
        }
        let silent = self
            .peer_timeout
            .saturating_add(self.rto_max)
            .saturating_mul(4);
        let window = self
            .rate_bits_per_s
            .filter(|&r| r > 0)
            .map_or(Duration::ZERO, |rate| {
                let bits = u64::from(self.window)
                    .saturating_mul((self.packet_size + WIRE_OVERHEAD_BYTES) as u64)
                    .saturating_mul(8);
                Duration::from_secs_f64(bits as f64 / rate as f64).saturating_mul(4)
            });
        DEFAULT_STALL_TIMEOUT.max(silent).max(window)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(DATA_HEADER_LEN + self.seal_overhead() + 1..=MAX_DATAGRAM).contains(&self.packet_size)
        {
            return Err(ConfigError::PacketSize(self.packet_size));
        }
        if self.window == 0 || self.window > 1 << 20 {
            return Err(ConfigError::Window(self.window));
        }
        if self.receivers == 0 || self.receivers > MAX_RECEIVERS {
            return Err(ConfigError::Receivers(self.receivers));
        }
        if let Some(after) = self.laggard.after()
            && after < Duration::from_millis(100)
        {
            return Err(ConfigError::LaggardAfter(after));
        }
        if let Some(min) = self.min_receivers
            && (min == 0 || min > self.receivers)
        {
            return Err(ConfigError::MinReceivers {
                min,
                receivers: self.receivers,
            });
        }
        if let Some(fec) = self.fec {
            if !fec.is_valid() {
                return Err(ConfigError::Fec(fec));
            }
            if self.repair != Repair::Selective {
                return Err(ConfigError::FecGoBackN);
            }
            if self.payload_size() < 2 {
                return Err(ConfigError::PacketSize(self.packet_size));
            }
            if self.have_after.is_some() {
                return Err(ConfigError::FecDelta);
            }
            if fec.group_len() > self.window {
                return Err(ConfigError::FecWindow {
                    data: fec.group_len(),
                    window: self.window,
                });
            }
            let ring = crate::fec::ring_bytes(fec, self.payload_size(), self.window);
            if ring > crate::fec::MAX_RING_BYTES {
                return Err(ConfigError::FecBuffers { bytes: ring });
            }
        }
        let floor = self.peer_timeout.saturating_add(self.rto_max);
        if self.stall_timeout() <= floor {
            return Err(ConfigError::StallTimeout {
                stall: self.stall_timeout(),
                floor,
            });
        }
        self.policy().map(|_| ())
    }
}

/// Bytes a datagram costs on an Ethernet link beyond its UDP payload, as
/// the kernel's qdiscs (tc tbf, htb) count them: UDP (8) + IPv4 (20) +
/// Ethernet header (14). The pacer charges them so that `rate_bits_per_s`
/// is a link rate: counting payload alone, 1472-byte datagrams paced at
/// 0.95 of a link took 0.977 of it and 1472 bytes at exactly the link rate
/// would overrun it by 2.9 %. (Preamble, FCS and gap are not counted, as
/// tc does not count them; IP fragments' extra headers are not either.)
pub const WIRE_OVERHEAD_BYTES: usize = 42;

/// The shortest default [`SenderConfig::stall_timeout`]: well beyond a
/// peer timeout, so a receiver that stops answering is removed (and named)
/// first, and a window that waits for a few backed-off retransmissions is
/// not taken for a stall; a transfer whose window has not moved for 20 s
/// is not going to finish in any time a user waits for.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(20);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laggard_settings_read_as_the_cli_says_them() {
        let after = Some(Duration::from_millis(300));
        assert_eq!(Laggard::from_setting("wait", None), Ok(Laggard::Wait));
        assert_eq!(
            Laggard::from_setting("eject", None),
            Ok(Laggard::Eject {
                after: Laggard::DEFAULT_AFTER
            })
        );
        assert_eq!(
            Laggard::from_setting("tcp", after),
            Ok(Laggard::Tcp {
                after: Duration::from_millis(300),
                port: 0
            })
        );
        assert!(
            Laggard::from_setting("wait", after)
                .unwrap_err()
                .contains("not wait")
        );
        assert!(
            Laggard::from_setting("Tcp", None)
                .unwrap_err()
                .contains("one of tcp")
        );
    }

    #[test]
    fn the_default_stall_timeout_covers_a_paced_window_and_a_silent_receiver() {
        let c = SenderConfig::default();
        // 4 × (peer timeout 5 s + largest RTO 0.8 s).
        assert_eq!(c.stall_timeout(), Duration::from_millis(23_200));
        let slow = SenderConfig {
            rate_bits_per_s: Some(1_000_000),
            ..SenderConfig::default()
        };
        // Four windows of 512 × 1514 wire bytes at 1 Mbit/s: 24.8 s.
        assert_eq!(slow.stall_timeout().as_millis(), 24_805);
        let short = SenderConfig {
            stall_timeout: Some(Duration::from_secs(5)),
            ..SenderConfig::default()
        };
        assert!(matches!(
            short.validate(),
            Err(ConfigError::StallTimeout { .. })
        ));
    }
}
