//! How a sender runs a stream: admission model, buffer, planning, timeouts,
//! repair and congestion settings, and their validation.

use super::super::cc::CongestionControl;
use super::super::seal::packet_payload;
use crate::security::GroupKey;
use rmcast_wire::MAX_DATAGRAM;
use rmcast_wire::stream::{MAX_POLL_ENTRIES, STREAM_DATA_OVERHEAD, poll_request_len};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How receivers are admitted.
#[derive(Clone, Debug)]
pub enum Admission {
    /// Invitation model: the sender contacts each address, at most
    /// `concurrency` handshakes at a time.
    Invite {
        /// Receivers to invite; the i-th gets rank i.
        receivers: Vec<SocketAddr>,
        /// Handshakes in progress at once.
        concurrency: usize,
    },
    /// Announcement model: the sender announces on the group for `duration`
    /// and admits those who ask, up to `receivers_max`.
    Announce {
        /// How long admission stays open.
        duration: Duration,
        /// Announcement period.
        interval: Duration,
        /// Most receivers admitted.
        receivers_max: u16,
    },
}

/// How a sender runs a stream.
#[derive(Clone, Debug)]
pub struct StreamSenderConfig {
    /// How receivers are admitted.
    pub admission: Admission,
    /// Bytes of payload per data packet when unsealed. A keyed sender puts
    /// [`SEAL_DATA_OVERHEAD`](crate::stream::SEAL_DATA_OVERHEAD) fewer
    /// message bytes in each ([`StreamSenderConfig::packet_payload`]), so its
    /// sealed data datagrams keep the size this gives plain ones.
    pub payload_size: u16,
    /// Largest message in bytes (a receiver's buffer must hold one).
    pub message_bytes_max: u32,
    /// Send buffer in packets: unacknowledged plus queued packets.
    pub send_buffer_packets: u32,
    /// Most responses per second the sender plans to receive (`--response-rate`).
    pub response_rate: u32,
    /// Length of a planning epoch; `response_rate × epoch` responses fit in one.
    pub epoch: Duration,
    /// Epochs ahead the planner looks.
    pub planning_horizon_epochs: u32,
    /// RTT assumed before a receiver's first response.
    pub rtt_initial: Duration,
    /// Smallest poll timeout.
    pub rto_min: Duration,
    /// Largest poll timeout (after doubling on each unanswered poll).
    pub rto_max: Duration,
    /// Unanswered polls in a row after which a receiver is suspected.
    pub suspect_after: u32,
    /// Unanswered polls in a row after which a receiver is removed.
    pub remove_after: u32,
    /// A receiver not heard from this long is polled (keepalive).
    pub keepalive: Duration,
    /// Longest spacing of window probes to a receiver with a closed window.
    pub probe_max: Duration,
    /// A receiver whose window stays closed this long while data waits for
    /// it is removed ([`RemoveReason::Stalled`](super::RemoveReason)): one
    /// reader that stopped reading would otherwise hold the whole group
    /// forever (TCP's zero-window persist has no end). `None`: wait for
    /// ever, as TCP does.
    pub stall_timeout: Option<Duration>,
    /// Handshake retransmission interval.
    pub handshake_interval: Duration,
    /// Handshake attempts before giving up on a receiver.
    pub handshake_tries: u32,
    /// A lost packet goes by multicast when at least this many receivers lack it.
    pub repair_multicast_min: u16,
    /// Longest wait gathering NACKs for a packet before repairing it.
    pub repair_gather: Duration,
    /// Group congestion window, off by default.
    pub congestion: CongestionControl,
    /// The group key every datagram is sealed under; `None` runs insecure
    /// (plain packets; sealed ones are refused).
    pub group_key: Option<Arc<GroupKey>>,
}

impl Default for StreamSenderConfig {
    fn default() -> Self {
        Self {
            admission: Admission::Invite {
                receivers: Vec::new(),
                concurrency: 8,
            },
            payload_size: 1200,
            message_bytes_max: 64 * 1024,
            send_buffer_packets: 1024,
            response_rate: 2000,
            epoch: Duration::from_millis(5),
            planning_horizon_epochs: 1024,
            rtt_initial: Duration::from_millis(10),
            rto_min: Duration::from_millis(5),
            rto_max: Duration::from_secs(1),
            suspect_after: 3,
            remove_after: 6,
            keepalive: Duration::from_secs(1),
            probe_max: Duration::from_millis(200),
            stall_timeout: Some(Duration::from_secs(60)),
            handshake_interval: Duration::from_millis(100),
            handshake_tries: 10,
            repair_multicast_min: 2,
            repair_gather: Duration::from_millis(20),
            congestion: CongestionControl::Off,
            group_key: None,
        }
    }
}

/// A stream configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamConfigError {
    /// `response_rate × epoch` is below one response per epoch.
    #[error("response rate {rate}/s allows no response in an epoch of {epoch:?}")]
    EpochTooShort {
        /// Configured rate.
        rate: u32,
        /// Configured epoch.
        epoch: Duration,
    },
    /// A zero or oversized field.
    #[error("invalid stream configuration: {0}")]
    Invalid(&'static str),
}

impl StreamSenderConfig {
    /// Message bytes per data packet: `payload_size`, less the seal's
    /// overhead when keyed (at least 1; `validate` refuses less).
    #[must_use]
    pub fn packet_payload(&self) -> u16 {
        packet_payload(self.payload_size, self.group_key.is_some()).unwrap_or(1)
    }

    /// Packets of the largest message.
    #[must_use]
    pub fn message_packets_max(&self) -> u32 {
        self.message_bytes_max
            .div_ceil(u32::from(self.packet_payload()))
            .max(1)
    }

    /// Responses allowed per epoch: `response_rate × epoch`, rounded down.
    #[must_use]
    pub fn responses_per_epoch(&self) -> u64 {
        u64::from(self.response_rate) * self.epoch.as_nanos() as u64 / 1_000_000_000
    }

    /// An upper bound on the time from a receiver's last response to its
    /// removal, in a session of `members` receivers: `remove_after` polls,
    /// each planned within the epochs the other members fill and each
    /// waiting at most `rto_max`, after at most one keepalive period.
    #[must_use]
    pub fn removal_bound(&self, members: usize) -> Duration {
        let per_epoch = self.responses_per_epoch().max(1) as u32;
        let plan = self.epoch * (members as u32 / per_epoch + 2);
        self.keepalive + (plan + self.rto_max) * self.remove_after
    }

    /// Checks every field; [`StreamSender::new`](super::StreamSender::new) calls it.
    pub fn validate(&self) -> Result<(), StreamConfigError> {
        use StreamConfigError::Invalid;
        if packet_payload(self.payload_size, self.group_key.is_some()).is_none()
            || usize::from(self.payload_size)
                + STREAM_DATA_OVERHEAD
                + poll_request_len(MAX_POLL_ENTRIES)
                > MAX_DATAGRAM
        {
            return Err(Invalid("payload_size"));
        }
        if self.send_buffer_packets == 0 || self.send_buffer_packets > 1 << 20 {
            return Err(Invalid("send_buffer_packets"));
        }
        if self.message_packets_max() > self.send_buffer_packets {
            return Err(Invalid("message_bytes_max exceeds the send buffer"));
        }
        if self.epoch.is_zero() || self.planning_horizon_epochs == 0 {
            return Err(Invalid("epoch"));
        }
        let per = self.responses_per_epoch();
        if per == 0 {
            return Err(StreamConfigError::EpochTooShort {
                rate: self.response_rate,
                epoch: self.epoch,
            });
        }
        if per > u64::from(u16::MAX) {
            return Err(Invalid("response_rate × epoch above 65535"));
        }
        if self.suspect_after == 0 || self.remove_after < self.suspect_after {
            return Err(Invalid("suspect_after / remove_after"));
        }
        if self.handshake_tries == 0 || self.repair_multicast_min == 0 {
            return Err(Invalid("handshake_tries / repair_multicast_min"));
        }
        match &self.admission {
            Admission::Invite {
                receivers,
                concurrency,
            } => {
                if receivers.is_empty() || receivers.len() > usize::from(rmcast_wire::MAX_RECEIVERS)
                {
                    return Err(Invalid("invited receivers"));
                }
                if *concurrency == 0 {
                    return Err(Invalid("invite concurrency"));
                }
            }
            Admission::Announce {
                receivers_max,
                interval,
                ..
            } => {
                if *receivers_max == 0
                    || *receivers_max > rmcast_wire::MAX_RECEIVERS
                    || interval.is_zero()
                {
                    return Err(Invalid("announce receivers_max / interval"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invite() -> StreamSenderConfig {
        StreamSenderConfig {
            admission: Admission::Invite {
                receivers: vec![SocketAddr::from(([10, 0, 0, 2], 1))],
                concurrency: 1,
            },
            ..StreamSenderConfig::default()
        }
    }

    #[test]
    fn the_defaults_are_valid_once_someone_is_invited() {
        assert_eq!(
            StreamSenderConfig::default().validate(),
            Err(StreamConfigError::Invalid("invited receivers"))
        );
        assert_eq!(invite().validate(), Ok(()));
        assert_eq!(invite().message_packets_max(), 55); // 64 KiB / 1200
        assert_eq!(invite().responses_per_epoch(), 10); // 2000/s × 5 ms
    }

    #[test]
    fn an_epoch_too_short_for_one_response_is_refused() {
        let c = StreamSenderConfig {
            response_rate: 100,
            ..invite()
        };
        assert!(matches!(
            c.validate(),
            Err(StreamConfigError::EpochTooShort { rate: 100, .. })
        ));
        let c = StreamSenderConfig {
            message_bytes_max: 1200 * 2000,
            ..invite()
        };
        assert!(c.validate().is_err());
        let c = StreamSenderConfig {
            suspect_after: 4,
            remove_after: 3,
            ..invite()
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn the_removal_bound_grows_with_the_members_the_planner_must_fit() {
        let c = invite();
        // keepalive + (epoch × (n/10 + 2) + rto_max) × remove_after
        assert_eq!(
            c.removal_bound(5),
            Duration::from_millis(1000 + (10 + 1000) * 6)
        );
        assert_eq!(
            c.removal_bound(100),
            Duration::from_millis(1000 + (60 + 1000) * 6)
        );
    }
}
