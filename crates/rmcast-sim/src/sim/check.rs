//! After the run: the invariants checked at the end, the report, and the
//! snapshot of every machine a failure prints.

use super::*;
use app::holds_object;

/// The counters of several receiver machines on one host, added up, with
/// what their endpoint dropped counted as the strays one machine would
/// have counted (one session: the endpoint drops nothing).
pub(super) fn sum_stats<'a>(
    all: impl Iterator<Item = &'a ReceiverStats>,
    dropped: &EndpointStats,
) -> ReceiverStats {
    let mut t = ReceiverStats {
        foreign: dropped.unrouted,
        malformed: dropped.malformed,
        ..ReceiverStats::default()
    };
    for x in all {
        // Every field by name, no `..`: a counter added to the stats must
        // be summed here too (the FEC counters once were not).
        let ReceiverStats {
            data_packets,
            duplicates,
            out_of_window,
            acks,
            naks,
            naks_suppressed,
            rate_naks,
            rate_naks_heard,
            malformed,
            foreign,
            auth,
            held_packets,
            parity_packets,
            parity_unneeded,
            repaired_packets,
        } = x;
        t.data_packets += data_packets;
        t.duplicates += duplicates;
        t.out_of_window += out_of_window;
        t.acks += acks;
        t.naks += naks;
        t.naks_suppressed += naks_suppressed;
        t.rate_naks += rate_naks;
        t.rate_naks_heard += rate_naks_heard;
        t.malformed += malformed;
        t.foreign += foreign;
        t.auth.add(auth);
        t.held_packets += held_packets;
        t.parity_packets += parity_packets;
        t.parity_unneeded += parity_unneeded;
        t.repaired_packets += repaired_packets;
    }
    t
}

pub(super) fn invariant(at: u64, what: String) -> Fail {
    Failure::Invariant { at: dur(at), what }
}

impl Sim<'_> {
    /// At the end of a run, counts the incomplete datagrams that are surely
    /// lost (one fragment missing before the last one that arrived, or past
    /// the reassembly timeout); the others were still in flight.
    pub(super) fn settle_reassembly(&mut self) {
        let now = self.now;
        let timeout = self.reasm_timeout;
        for h in 0..self.hosts.len() {
            self.reasm_drop(h, |r| {
                r.received < r.next || now.saturating_sub(r.first_at) >= timeout
            });
        }
    }

    pub(super) fn check_final(&mut self) -> Result<(), Fail> {
        let now = self.now;
        let crashed = |h: usize| self.hosts[h].crashed_at.is_some();
        for k in 0..self.senders {
            let Machine::Sender(s) = &self.hosts[k].machine else {
                unreachable!("hosts 0..S are senders");
            };
            if crashed(k) {
                continue; // a restart's first sender: no outcome to check
            }
            let outcome = s.outcome().expect("finished sender has an outcome").clone();
            for m in &outcome.members {
                let Some(h) = host_of(m.addr, self.hosts.len()).filter(|&h| h >= self.senders)
                else {
                    return Err(invariant(now, format!("member {m:?} is no receiver host")));
                };
                // Every chunk was checked against the object as it came:
                // all delivered and all matching is "holds the object".
                if m.verified && self.rx(h, k).is_none_or(|(_, app)| !holds_object(app)) {
                    return Err(invariant(
                        now,
                        format!(
                            "sender {k} reports host {h} verified, but its bytes differ from the object"
                        ),
                    ));
                }
                if !m.verified && m.reason.is_none() {
                    return Err(invariant(
                        now,
                        format!("member {m:?} failed without a reason"),
                    ));
                }
            }
            // A receiver the sender ejected as a laggard (`Laggard::Eject`,
            // a slow receiver) is a failure it was asked for.
            let ejected = |m: &rmcast_proto::MemberOutcome| {
                matches!(self.sc.config.laggard, rmcast_proto::Laggard::Eject { .. })
                    && !m.verified
                    && (m.reason.as_deref())
                        .is_some_and(|r| r.starts_with(rmcast_proto::EJECTED_LAGGARD))
            };
            let only_ejected = outcome.error.is_none()
                && outcome.missing == 0
                && outcome.members.iter().all(|m| m.verified || ejected(m));
            if self.sc.crashes.is_empty() && !outcome.ok && !only_ejected {
                return Err(invariant(
                    now,
                    format!("no crash configured, yet sender {k}'s outcome is {outcome:#?}"),
                ));
            }
            if outcome.error.is_none() {
                for h in self.senders..self.hosts.len() {
                    if crashed(h) {
                        continue;
                    }
                    let verified = outcome
                        .members
                        .iter()
                        .any(|m| (m.verified || ejected(m)) && m.addr == host_addr(h));
                    if !verified {
                        return Err(invariant(
                            now,
                            format!("live host {h} is not verified by sender {k}: {outcome:#?}"),
                        ));
                    }
                }
            }
        }
        for h in self.senders..self.hosts.len() {
            let Machine::Receivers(rxs) = &self.hosts[h].machine else {
                unreachable!("hosts S.. are receivers");
            };
            for (_, r) in rxs.endpoint.iter() {
                if !crashed(h) && !r.is_finished() {
                    return Err(invariant(
                        now,
                        match side_of(&self.sides, r) {
                            Some(k) => {
                                format!("live host {h}'s receiver of sender {k} never ended")
                            }
                            None => format!("live host {h}'s listener for a session never ended"),
                        },
                    ));
                }
            }
        }
        for (h, host) in self.hosts.iter().enumerate() {
            if host.socket_bytes > self.sc.socket_buffer_bytes
                || host.max_socket_bytes > self.sc.socket_buffer_bytes
            {
                return Err(invariant(
                    now,
                    format!("host {h}'s socket buffer went over its limit"),
                ));
            }
        }
        Ok(())
    }

    /// Receiver host `h`'s machine and application for sender `k`'s
    /// session, if it joined it.
    pub(super) fn rx(&self, h: usize, k: usize) -> Option<(&Receiver, &RxApp)> {
        let Machine::Receivers(rxs) = &self.hosts[h].machine else {
            unreachable!("hosts S.. are receivers");
        };
        rxs.endpoint
            .iter()
            .find(|(_, r)| side_of(&self.sides, r) == Some(k))
            .map(|(s, r)| (r, &rxs.apps[s.0]))
    }

    /// The sender the run reports: host 0, or after a restart the new one.
    fn main_sender(&self) -> usize {
        usize::from(self.sc.restart.is_some())
    }

    pub(super) fn report(&self) -> RunReport {
        let main = self.main_sender();
        let Machine::Sender(s) = &self.hosts[main].machine else {
            unreachable!("hosts 0..S are senders");
        };
        let stats = s.stats().clone();
        let finished = self.log.finished[main].unwrap_or(self.now);
        let seconds = secs(finished);
        let per_data = |x: u64| {
            if stats.data_packets == 0 {
                0.0
            } else {
                x as f64 / stats.data_packets as f64
            }
        };
        let receivers: Vec<ReceiverReport> = self.hosts[self.senders..]
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let Machine::Receivers(rxs) = &host.machine else {
                    unreachable!("hosts S.. are receivers");
                };
                // One sender: its machine; several: the worst of them.
                let latest = |f: fn(&RxApp) -> Option<u64>| -> Option<f64> {
                    let all: Option<Vec<u64>> = rxs.apps.iter().map(f).collect();
                    all.and_then(|v| v.into_iter().max()).map(secs)
                };
                let c = &host.counters;
                ReceiverReport {
                    host: (i + 1) as u16,
                    name: format!("r{}", i + 1),
                    addr: host_addr(i + self.senders),
                    // Sender 0's session, as before the endpoint.
                    rank: self
                        .rx(i + self.senders, main)
                        .and_then(|(_, app)| app.rank),
                    hash_ok: rxs.apps.iter().all(|a| a.hash_ok),
                    all_data_seconds: latest(|a| a.all_data_at),
                    ended_seconds: latest(|a| a.ended_at),
                    failure: rxs.apps.iter().find_map(|a| a.failure.clone()),
                    crashed_seconds: host.crashed_at.map(secs),
                    sender_failed_seconds: self.log.failed_at[i + 1].map(secs),
                    stats: sum_stats(
                        rxs.endpoint.iter().map(|(_, r)| r.stats()),
                        rxs.endpoint.stats(),
                    ),
                    data_lost: c.data_lost,
                    data_frames: host.data_frames,
                    fragment_loss: c.fragment_loss,
                    socket_overflow: c.socket_overflow,
                    garbage_seen: c.garbage_seen,
                }
            })
            .collect();
        let feedback_sent = receivers.iter().map(|r| r.stats.acks + r.stats.naks).sum();
        RunReport {
            seed: self.sc.seed,
            seconds,
            verdicts_seconds: secs(self.log.last_verdict_at),
            goodput_mbit_s: if seconds > 0.0 {
                self.sc.object_size as f64 * 8.0 / seconds / 1e6
            } else {
                0.0
            },
            data_packets: stats.data_packets,
            retransmitted_packets: stats.retransmitted_packets,
            control_packets: stats.control_packets,
            control_per_data: per_data(stats.control_packets),
            feedback_per_data: per_data(stats.acks + stats.naks),
            feedback_sent,
            drops: self.drops.clone(),
            garbage_injected: self.garbage_injected,
            sender_garbage_seen: self.hosts[main].counters.garbage_seen,
            outcome: s
                .outcome()
                .cloned()
                .expect("finished sender has an outcome"),
            sender: stats,
            receivers,
            max_socket_buffer_bytes: self
                .hosts
                .iter()
                .map(|h| h.max_socket_bytes)
                .max()
                .unwrap_or(0),
            max_port_queue_bytes: self
                .hosts
                .iter()
                .map(|h| h.port.max_bytes)
                .max()
                .unwrap_or(0),
            max_uplink_queue_bytes: self
                .hosts
                .iter()
                .map(|h| h.uplink.max_bytes)
                .max()
                .unwrap_or(0),
            events: self.events,
            max_outstanding: self.sides[main].max_outstanding,
            outstanding_trace: self.sides[main].outstanding_trace.clone(),
            rate_trace: self.sides[main].rate_trace.clone(),
            senders: (0..self.senders)
                .filter(|&k| self.hosts[k].crashed_at.is_none())
                .map(|k| self.sender_report(k))
                .collect(),
        }
    }

    pub(super) fn sender_report(&self, k: usize) -> SenderReport {
        let Machine::Sender(s) = &self.hosts[k].machine else {
            unreachable!("hosts 0..S are senders");
        };
        let side = &self.sides[k];
        SenderReport {
            host: k as u16,
            session: side.session,
            seconds: secs(self.log.finished[k].unwrap_or(self.now)),
            stats: s.stats().clone(),
            outcome: s
                .outcome()
                .cloned()
                .expect("finished sender has an outcome"),
            rate: s.rate().map(|c| c.stats().clone()),
            group: s.rate_group().map(|g| g.stats().clone()),
            max_outstanding: side.max_outstanding,
            outstanding_trace: if k == 0 {
                Vec::new()
            } else {
                side.outstanding_trace.clone()
            },
            rate_trace: if k == 0 {
                Vec::new()
            } else {
                side.rate_trace.clone()
            },
        }
    }

    /// The machines' state for a failure report.
    pub(super) fn snapshot(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "  virtual time {:.6} s, {} events, drops {:?}",
            secs(self.now),
            self.events,
            self.drops
        );
        for (h, host) in self.hosts.iter().enumerate() {
            let crashed = host
                .crashed_at
                .map(|t| format!(" CRASHED at {:.6} s", secs(t)))
                .unwrap_or_default();
            match &host.machine {
                Machine::Sender(s) => {
                    // `outstanding()` underflows once every receiver failed.
                    let outstanding = if s.acked_bytes() < self.sc.object_size {
                        s.outstanding()
                    } else {
                        0
                    };
                    let _ = writeln!(
                        out,
                        "  host {h} sender {}: finished {}, joined {}, packets {}, acked {} of {} bytes, outstanding {}, timer {:?}, {:?}",
                        s.session(),
                        s.is_finished(),
                        s.joined(),
                        s.packets(),
                        s.acked_bytes(),
                        self.sc.object_size,
                        outstanding,
                        s.poll_timeout(),
                        s.stats()
                    );
                }
                Machine::Receivers(rxs) => {
                    let k = h + 1 - self.senders;
                    for (s, r) in rxs.endpoint.iter() {
                        let session = side_of(&self.sides, r).map_or_else(
                            || "listening".to_string(),
                            |k| self.sides[k].session.to_string(),
                        );
                        let failure = &rxs.apps.get(s.0).and_then(|a| a.failure.clone());
                        let _ = writeln!(
                            out,
                            "  host {h} r{k}{crashed} (session {}): rank {:?}, finished {}, holds {} bytes in order, failure {:?}, timer {:?}, socket {} B, {:?}",
                            session,
                            r.rank(),
                            r.is_finished(),
                            r.received_bytes(),
                            failure,
                            r.poll_timeout(),
                            host.socket_bytes,
                            r.stats()
                        );
                    }
                }
            }
        }
        out
    }
}
