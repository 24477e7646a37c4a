//! What a run reports, and the invariants checked after it.

use super::OverlayFault;
use super::sim::Sim;
use rmcast_proto::Instant;
use rmcast_proto::overlay::{NodeMachine, Rank};
use std::time::Duration;

/// What a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct OverlayReport {
    /// From Start to the last receiver's confirmation.
    pub data_time: Duration,
    /// From time zero to the end of the session.
    pub total_time: Duration,
    /// `size / R`: the time one link needs for the object.
    pub object_time: Duration,
    /// Segments that crossed a link.
    pub segments_moved: u64,
    /// Most data connections one host held.
    pub max_connections_used: usize,
    /// Events processed.
    pub events: u64,
    /// The session failed (after a fault: it named a host that failed), or
    /// the sender died.
    pub failed: bool,
    /// From time zero to Start (the data phase), if it came.
    pub started: Option<Duration>,
    /// Receivers the sender reports verified.
    pub verified: usize,
    /// The host of each rank (index 0: the sender, host 0).
    pub host_of_rank: Vec<u16>,
    /// Orphaned edges the sender took over (`SenderStats::reattached`).
    pub reattached: u64,
    /// Bytes the hosts lost for good (a crash, a pause without end) still
    /// owed their children when the fault struck: their children's shares
    /// less what they had written of them. The sender feeds that itself
    /// once it cut them out.
    pub unforwarded_bytes: u64,
}

/// A failed run: which invariant broke, with the seed to replay it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverlayError(pub String);

impl std::fmt::Display for OverlayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OverlayError {}

impl Sim<'_> {
    pub(super) fn check(&mut self) -> Result<OverlayReport, String> {
        let lost: Vec<usize> = (0..self.hosts.len()).filter(|&h| self.lost(h)).collect();
        let total = self.segs.count();
        // Whatever went wrong: no copy is claimed good unless it is whole.
        for h in 1..self.hosts.len() {
            let host = &mut self.hosts[h];
            host.received.sort_unstable();
            if host.received.windows(2).any(|w| w[0] == w[1]) {
                return Err(format!("host {h} got a segment twice"));
            }
        }
        // Sorted without repeats: `total` of them ending at `total - 1` is
        // every segment exactly once.
        let whole = |sim: &Self, h: usize| {
            let got = &sim.hosts[h].received;
            let stored = sim.nodes[h].as_ref().map_or(0, NodeMachine::stored_bytes);
            got.len() as u64 == total
                && got.last().is_none_or(|&k| k + 1 == total)
                && stored == sim.s.size
        };
        for h in 1..self.hosts.len() {
            if matches!(self.hosts[h].finished, Some(Ok(()))) && !whole(self, h) {
                return Err(format!("host {h} finished without error but is not whole"));
            }
        }
        // A child refuses a connection only from a parent it gave up on,
        // and the sender connects only where it is expected: without a
        // lasting fault, none; never the sender's.
        let lasting = self.s.faults.iter().any(OverlayFault::is_lasting);
        if let Some((from, to, why)) =
            (self.refused.iter()).find(|(from, ..)| !lasting || *from == 0)
        {
            return Err(format!(
                "host {to} refused a connection from host {from}: {why}"
            ));
        }
        if lost.contains(&0) {
            // The sender died: every other host must still end by itself.
            return Ok(self.report(None));
        }
        let r = self.sender.report();
        for (i, m) in r.members.iter().enumerate() {
            let h = self.host_of_rank.get(&(i as Rank + 1)).copied();
            if m.verified && !h.is_some_and(|h| whole(self, h)) {
                return Err(format!("rank {} reported verified but is not whole", i + 1));
            }
        }
        if let Some(Err(e)) = &self.hosts[0].finished {
            return Err(format!("the sender's data plane failed: {e}"));
        }
        let n = usize::from(self.s.nodes);
        if !lost.is_empty() {
            // Receivers lost for good. Struck once data flowed, the session
            // heals: it goes on without them, and everyone else verifies.
            let started = r.started_at.map(Instant::as_nanos);
            let healing = (self.s.faults.iter())
                .filter(|f| f.is_lasting())
                .all(|f| started.is_some_and(|t| f.at().as_nanos() as u64 >= t));
            let e = r.error.as_deref().unwrap_or_default();
            if !healing {
                // Before data flowed, the session fails, naming one of them
                // (unless it got through after all).
                let all_verified = r.members.len() == n && r.members.iter().all(|m| m.verified);
                let names_one = lost.iter().any(|h| e.contains(&format!("\"host-{h}\"")));
                if !all_verified && !names_one {
                    return Err(format!(
                        "the session failed, blaming none of the hosts {lost:?} that failed: {e:?}"
                    ));
                }
                return Ok(self.report(Some(&r)));
            }
            if r.members.len() != n {
                return Err(format!("{} of {n} receivers registered", r.members.len()));
            }
            for h in (1..self.hosts.len()).filter(|h| !lost.contains(h)) {
                let rank = self.rank_of(h);
                let m = &r.members[usize::from(rank) - 1];
                if !m.verified {
                    return Err(format!(
                        "host {h} (rank {rank}), which did not fail, is not verified: {:?} \
                         (the session: {e:?})",
                        m.reason
                    ));
                }
                match &self.hosts[h].finished {
                    Some(Ok(())) => {}
                    other => return Err(format!("host {h} ended with {other:?}")),
                }
                if !whole(self, h) {
                    return Err(format!("host {h} did not get every segment exactly once"));
                }
            }
            let verified = r.members.iter().filter(|m| m.verified).count();
            if verified == n {
                // The lost ones had finished before they were lost.
                return match &r.error {
                    None => Ok(self.report(Some(&r))),
                    Some(e) => Err(format!("every receiver verified, yet: {e}")),
                };
            }
            // The first host it names is the first that failed: a lost one.
            let first = e
                .split("\"host-")
                .nth(1)
                .and_then(|t| t.split('"').next())
                .and_then(|t| t.parse::<usize>().ok());
            if !first.is_some_and(|h| lost.contains(&h)) {
                return Err(format!(
                    "the session names host {first:?} first, not one of the hosts {lost:?} \
                     that failed: {e:?}"
                ));
            }
            let count = format!("({verified} of {n} receivers verified");
            if !e.contains(&count) {
                return Err(format!("the session's error does not say {count:?}: {e:?}"));
            }
            return Ok(self.report(Some(&r)));
        }
        if let Some(e) = &r.error {
            return Err(format!("the sender failed: {e}"));
        }
        if r.members.len() != n || r.members.iter().any(|m| !m.verified) {
            return Err("not every member verified".into());
        }
        for h in 1..self.hosts.len() {
            match &self.hosts[h].finished {
                Some(Ok(())) => {}
                other => return Err(format!("host {h} ended with {other:?}")),
            }
            if !whole(self, h) {
                return Err(format!("host {h} did not get every segment exactly once"));
            }
        }
        if r.started_at.is_none() || r.last_confirmation.is_none() {
            return Err("never started, or never confirmed".into());
        }
        Ok(self.report(Some(&r)))
    }

    fn report(&self, r: Option<&rmcast_proto::overlay::SessionReport>) -> OverlayReport {
        let data_time = r
            .and_then(|r| Some(r.last_confirmation?.saturating_since(r.started_at?)))
            .unwrap_or_default();
        let bits = u128::from(self.s.size) * 8;
        OverlayReport {
            data_time,
            total_time: Duration::from_nanos(self.now),
            object_time: Duration::from_nanos(
                (bits * 1_000_000_000 / u128::from(self.s.rate_bits_per_s.max(1))) as u64,
            ),
            segments_moved: self.moved,
            max_connections_used: self.max_conn,
            events: self.events,
            failed: r.is_none_or(|r| r.error.is_some()),
            started: r
                .and_then(|r| r.started_at)
                .map(|t| Duration::from_nanos(t.as_nanos())),
            verified: r.map_or(0, |r| r.members.iter().filter(|m| m.verified).count()),
            host_of_rank: self.rank_hosts(),
            reattached: self.sender.stats().reattached,
            unforwarded_bytes: self.unforwarded,
        }
    }

    /// Host of each rank, the sender's at index 0.
    fn rank_hosts(&self) -> Vec<u16> {
        let mut v = vec![0u16; usize::from(self.s.nodes) + 1];
        for (&rank, &h) in &self.host_of_rank {
            if let Some(slot) = v.get_mut(usize::from(rank)) {
                *slot = h as u16;
            }
        }
        v
    }
}
