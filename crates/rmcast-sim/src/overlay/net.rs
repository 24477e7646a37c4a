//! The network: links, data connections, and faults.

use super::OverlayFault;
use super::sim::{Ev, Pipe, Sim};
use rand::Rng;
use rmcast_proto::overlay::{Forwarding, NodeMachine, NodePhase, Rank, SegmentSet};
use rmcast_wire::overlay::Msg;

impl Sim<'_> {
    /// Segment `index` reached node `h` on pipe `p`.
    pub(super) fn segment_in(&mut self, h: usize, p: usize, index: u64) -> Result<(), String> {
        let now = self.t();
        let Some(pi) = self.pipes[p].pi else {
            // Read before the application took the connection.
            self.pipes[p].unread.push(index);
            return Ok(());
        };
        let Some(m) = self.nodes[h].as_mut() else {
            return Err(format!("host {h} got data before it joined"));
        };
        let route = m.handle_segment(now, pi, index);
        m.handle_stored(now, index, self.segs.len(index));
        self.hosts[h].received.push(index);
        // A child whose connection is gone takes nothing: its share of the
        // buffer is free at once (the runtime's send to its ended writer
        // fails).
        let mut live = Vec::with_capacity(route.len());
        let mut parked = 0;
        for ci in route {
            match self.hosts[h].child_pipes.get(ci).copied().flatten() {
                Some(cp) if !self.pipes[cp].broken => live.push(cp),
                Some(_) => {}
                // To be written back on a connection its child has not
                // opened yet: it waits, as in the runtime's channel.
                None => {
                    self.hosts[h].parked.entry(ci).or_default().push(index);
                    parked += 1;
                }
            }
        }
        if live.is_empty() && parked == 0 {
            self.unhold(p);
        } else {
            self.hosts[h].holds.insert(index, (p, live.len() + parked));
            for cp in live {
                self.pipes[cp].queue.push_back(index);
                self.kick(cp);
            }
        }
        self.drive_node(h)
    }

    /// One child of host `h` took its copy of `index`.
    pub(super) fn release(&mut self, h: usize, index: u64) {
        let Some(e) = self.hosts[h].holds.get_mut(&index) else {
            return;
        };
        e.1 -= 1;
        if e.1 == 0 {
            let (p, _) = self.hosts[h].holds.remove(&index).expect("held");
            self.unhold(p);
        }
    }

    /// The child of pipe `p` released one segment: the window opens.
    fn unhold(&mut self, p: usize) {
        self.pipes[p].outstanding -= 1;
        self.kick(p);
    }

    fn window(&self) -> u64 {
        (self.s.window_bytes / u64::from(self.s.segment_size)).max(1)
    }

    /// Puts pipe `p` in its uplink's round-robin when it can send.
    pub(super) fn kick(&mut self, p: usize) {
        let w = self.window();
        let pipe = &mut self.pipes[p];
        if pipe.queue.is_empty()
            && let Some((set, next, count)) = pipe.feed.as_mut()
            && *next < *count
        {
            pipe.queue.push_back(set.nth(*next));
            *next += 1;
        }
        if !pipe.open || pipe.broken || pipe.in_rr || pipe.queue.is_empty() {
            return;
        }
        if pipe.outstanding < w {
            pipe.in_rr = true;
            pipe.stalled_since = None;
            let from = pipe.from;
            self.hosts[from].rr.push_back(p);
            self.serve_uplink(from);
        } else if pipe.stalled_since.is_none() {
            // Something to write and the window shut: the runtime's writer
            // gives up if it stays so for the inactivity timeout.
            pipe.stalled_since = Some(self.now);
            let at = self.now + self.s.inactivity.as_nanos() as u64;
            self.push(at, Ev::WriteStall(p, self.now));
        }
    }

    /// Nothing more of pipe `p` reaches its child: what its downlink
    /// queued for it is discarded (the segment it is reading finishes and
    /// is dropped).
    pub(super) fn cut(&mut self, p: usize) {
        self.pipes[p].cut = true;
        self.pipes[p].unread.clear();
        let host = &mut self.hosts[self.pipes[p].to];
        let mut keep = usize::from(host.down_busy);
        host.down.retain(|&(q, _)| {
            if keep > 0 {
                keep -= 1;
                return true;
            }
            q != p
        });
    }

    pub(super) fn serve_uplink(&mut self, h: usize) {
        if self.hosts[h].up_busy {
            return;
        }
        let Some(&p) = self.hosts[h].rr.front() else {
            return;
        };
        let index = *self.pipes[p].queue.front().expect("ready pipe");
        self.pipes[p].outstanding += 1;
        self.hosts[h].up_busy = true;
        let at = self.now + self.tx_ns(index);
        self.push(at, Ev::UplinkDone(h));
    }

    pub(super) fn serve_downlink(&mut self, h: usize) {
        if self.hosts[h].down_busy {
            return;
        }
        let Some(&(_, index)) = self.hosts[h].down.front() else {
            return;
        };
        self.hosts[h].down_busy = true;
        let at = self.now + self.tx_ns(index);
        self.push(at, Ev::DownlinkDone(h));
    }

    pub(super) fn check_pipe_done(&mut self, p: usize) -> Result<(), String> {
        let pipe = &self.pipes[p];
        let fed_out = pipe.feed.is_some_and(|(_, next, count)| next == count);
        if pipe.done || pipe.sent < pipe.share || !(pipe.routed || fed_out) {
            return Ok(());
        }
        self.pipes[p].done = true;
        self.child_done(p, Ok(()))
    }

    pub(super) fn child_done(&mut self, p: usize, r: Result<(), String>) -> Result<(), String> {
        let (from, to, ci) = (self.pipes[p].from, self.pipes[p].to, self.pipes[p].ci);
        let now = self.t();
        if self.hosts[from].dead || self.hosts[from].paused_until.is_some() {
            // Its application hears of it when (if) it runs again.
            self.push(self.now, Ev::ChildDone(p, r));
            return Ok(());
        }
        if from == 0 {
            let rank = self.rank_of(to);
            let set = self.pipes[p].set;
            self.sender.handle_child_done(now, rank, set, r);
            self.drive_sender();
            Ok(())
        } else {
            if let Some(m) = self.nodes[from].as_mut() {
                m.handle_child_done(now, ci.expect("node pipes know their child"), r);
            }
            self.drive_node(from)
        }
    }

    pub(super) fn fault(&mut self, f: OverlayFault) -> Result<(), String> {
        let h = usize::from(f.host());
        if f.is_lasting() && h != 0 && !self.lost(h) {
            self.unforwarded += self.owed_bytes(h);
        }
        match f {
            OverlayFault::Crash { host, .. } => self.crash(usize::from(host)),
            OverlayFault::Pause { host, duration, .. } => {
                let h = usize::from(host);
                let until = duration.map_or(u64::MAX, |d| self.now + d.as_nanos() as u64);
                self.hosts[h].paused_until = Some(until);
                if until != u64::MAX {
                    self.push(until, Ev::Resume(h));
                }
                Ok(())
            }
        }
    }

    /// Host `h` dies: every connection it had closes, or is reset where it
    /// had not been written to the end.
    fn crash(&mut self, h: usize) -> Result<(), String> {
        if self.hosts[h].dead {
            return Ok(());
        }
        self.hosts[h].dead = true;
        let lat = self.latency();
        if h == 0 {
            for k in 1..self.hosts.len() {
                if self.nodes[k].is_some() {
                    self.push(self.now + lat, Ev::NodeLostSender(k));
                }
            }
        } else if self.nodes[h].is_some() {
            self.push(self.now + lat, Ev::SenderLost(h));
        }
        for p in 0..self.pipes.len() {
            let pipe = &self.pipes[p];
            if pipe.broken || (pipe.from != h && pipe.to != h) {
                continue;
            }
            let written = pipe.done;
            let (at, from) = (self.now + pipe.delay_ns, pipe.from);
            self.break_pipe(p);
            if written {
                continue; // FIN after the last byte: nothing to report
            }
            if from == h {
                self.push(at, Ev::ParentLost(p));
            } else {
                self.pipes[p].done = true;
                let why = "connection reset by peer".to_owned();
                self.push(at, Ev::ChildDone(p, Err(why)));
            }
        }
        Ok(())
    }

    /// Nothing more is sent on pipe `p`: what it had queued is dropped (and
    /// the parent's hold on it released), except the segment on the wire.
    pub(super) fn break_pipe(&mut self, p: usize) {
        let from = self.pipes[p].from;
        let on_wire = self.hosts[from].up_busy && self.hosts[from].rr.front() == Some(&p);
        let pipe = &mut self.pipes[p];
        pipe.broken = true;
        pipe.feed = None;
        let keep = usize::from(on_wire).min(pipe.queue.len());
        let dropped: Vec<u64> = pipe.queue.drain(keep..).collect();
        let routed = pipe.routed;
        if !on_wire && pipe.in_rr {
            pipe.in_rr = false;
            self.hosts[from].rr.retain(|&q| q != p);
        }
        if routed && !self.hosts[from].dead {
            for index in dropped {
                self.release(from, index);
            }
        }
    }

    /// Node `h` closes the connection of its parent edge `pi` (the sender
    /// detached its parent): nothing more of it reaches the node, which
    /// hears at once that the edge ended; the parent's kernel hears it a
    /// propagation delay later.
    pub(super) fn drop_parent(&mut self, h: usize, pi: usize) -> Result<(), String> {
        let p = (0..self.pipes.len())
            .rev()
            .find(|&p| {
                let pipe = &self.pipes[p];
                pipe.to == h && pipe.pi == Some(pi) && !pipe.cut
            })
            .ok_or_else(|| format!("host {h} drops parent edge {pi}, which has no connection"))?;
        self.cut(p);
        let at = self.now + self.pipes[p].delay_ns;
        self.push(at, Ev::ChildClosed(p));
        let now = self.t();
        if let Some(m) = self.nodes[h].as_mut() {
            m.handle_parent_failed(now, pi, "was dropped (detached by the sender)");
        }
        self.close_reverse(h, p)
    }

    /// Host `h`, one end of pipe `p`'s connection, closed it whole (it
    /// dropped `p`, or its writer of `p` gave up): the edge going the
    /// other way on it, if one was written back, breaks too. `h` hears at
    /// once; the other end a propagation delay later.
    pub(super) fn close_reverse(&mut self, h: usize, p: usize) -> Result<(), String> {
        let Some(r) = self.pipes[p].reverse else {
            return Ok(());
        };
        let at = self.now + self.pipes[r].delay_ns;
        if self.pipes[r].from == h {
            // h writes r: its writer fails, its child hears it later.
            if self.pipes[r].broken || self.pipes[r].done {
                return Ok(());
            }
            self.break_pipe(r);
            self.pipes[r].done = true;
            self.push(at, Ev::ParentLost(r));
            return self.child_done(r, Err("closed with the connection it rides".into()));
        }
        // h reads r: its reader ends, r's writer hears it later.
        if self.pipes[r].cut {
            return Ok(());
        }
        self.cut(r);
        self.push(at, Ev::ChildClosed(r));
        let now = self.t();
        if let Some(pi) = self.pipes[r].pi
            && let Some(m) = self.nodes[h].as_mut()
        {
            m.handle_parent_failed(now, pi, "closed with the connection it rides");
            return self.drive_node(h);
        }
        Ok(())
    }

    /// Node `h` writes child edge `ci` back on the connection parent edge
    /// `pi` came in on: the connection is open (keyed, its key exchange is
    /// over), so the parent end's application reads `hello` a propagation
    /// delay later, and no connection is added.
    pub(super) fn write_back(
        &mut self,
        h: usize,
        pi: usize,
        ci: usize,
        hello: Msg,
    ) -> Result<(), String> {
        let fwd = (0..self.pipes.len())
            .rev()
            .find(|&p| {
                let pipe = &self.pipes[p];
                pipe.to == h && pipe.pi == Some(pi)
            })
            .ok_or_else(|| format!("host {h} writes back on parent edge {pi}, never connected"))?;
        let Msg::DataHello { to, segments, .. } = hello else {
            return Err("a write-back without a DataHello".into());
        };
        let peer = self.pipes[fwd].from;
        if self.rank_of(peer) != to {
            return Err(format!(
                "host {h} writes rank {to}'s edge back on host {peer}'s connection"
            ));
        }
        let pipelined = Forwarding::of(self.s.shape) == Forwarding::Pipelined;
        let delay_ns = self.pipes[fwd].delay_ns;
        let p = self.pipes.len();
        let share = segments.count(self.segs.count());
        let mut pipe = Pipe::new((h, peer), Some(ci), hello, segments, delay_ns, share);
        pipe.routed = pipelined;
        pipe.open = true;
        pipe.reverse = Some(fwd);
        self.pipes.push(pipe);
        self.pipes[fwd].reverse = Some(p);
        self.pipe_of.insert((h, to, segments), p);
        let cps = &mut self.hosts[h].child_pipes;
        if cps.len() <= ci {
            cps.resize(ci + 1, None);
        }
        cps[ci] = Some(p);
        let parked = self.hosts[h].parked.remove(&ci).unwrap_or_default();
        self.pipes[p].queue.extend(parked);
        if self.pipes[fwd].broken || self.pipes[fwd].cut {
            for index in std::mem::take(&mut self.pipes[p].queue) {
                self.release(h, index);
            }
            // The connection closed before the edge went back on it.
            self.pipes[p].broken = true;
            self.pipes[p].done = true;
            return self.child_done(p, Err("closed with the connection it rides".into()));
        }
        self.push(self.now + delay_ns, Ev::Hello(p));
        // Open at once: a share of nothing is written as soon as the
        // hello is, whether or not the other end's application runs.
        self.check_pipe_done(p)?;
        self.kick(p);
        Ok(())
    }

    /// Node `h` gave up child edge `ci` (the connection it was to ride
    /// back on broke first): what was routed to it is released.
    pub(super) fn abandon(&mut self, h: usize, ci: usize) {
        for index in self.hosts[h].parked.remove(&ci).unwrap_or_default() {
            self.release(h, index);
        }
    }

    /// Node `h`'s transfer is over: the runtime returns and its data
    /// connections close. One written to the end delivers everything (FIN
    /// after the data); any other is reset, and the peer hears it a
    /// propagation delay later.
    pub(super) fn close_pipes(&mut self, h: usize) {
        for p in 0..self.pipes.len() {
            let pipe = &self.pipes[p];
            if pipe.broken || pipe.done {
                continue;
            }
            let (at, to, from, cut) = (self.now + pipe.delay_ns, pipe.to, pipe.from, pipe.cut);
            if to == h {
                if !cut {
                    self.cut(p);
                }
                self.push(at, Ev::ChildClosed(p));
            } else if from == h {
                self.break_pipe(p);
                self.push(at, Ev::ParentLost(p));
            }
        }
    }

    /// What host `h`'s children are still owed by it: their shares less
    /// what it has written of them.
    fn owed_bytes(&self, h: usize) -> u64 {
        let Some(a) = self.nodes[h].as_ref().and_then(NodeMachine::assignment) else {
            return 0;
        };
        let total = self.segs.count();
        let mut owed = 0;
        for (ci, c) in a.children.iter().enumerate() {
            let share = self.segs.set_bytes(c.segments);
            let count = c.segments.count(total);
            let sent = (self.hosts[h].child_pipes.get(ci).copied().flatten())
                .map_or(0, |p| self.pipes[p].sent);
            let written = if sent >= count {
                share
            } else {
                sent * u64::from(self.s.segment_size)
            };
            owed += share.saturating_sub(written);
        }
        owed
    }

    pub(super) fn rank_of(&self, h: usize) -> Rank {
        self.rank_of_host[h]
    }

    pub(super) fn hello(&mut self, p: usize) -> Result<(), String> {
        let to = self.pipes[p].to;
        let now = self.t();
        if self.pipes[p].broken || self.pipes[p].cut {
            return Ok(()); // one end closed it before the child took it
        }
        let Some(m) = self.nodes[to].as_mut() else {
            return Err(format!("host {to} got a connection before it joined"));
        };
        if matches!(
            m.phase(),
            NodePhase::Registered | NodePhase::Preparing | NodePhase::Ready
        ) {
            // Not started yet: the connection waits in the listen backlog.
            self.hosts[to].early.push(p);
            return Ok(());
        }
        let pi = match m.handle_parent_hello(now, &self.pipes[p].hello) {
            Ok(pi) => pi,
            Err(e) => {
                // The child closes the connection; its parent hears it.
                let from = self.pipes[p].from;
                self.refused.push((from, to, e));
                self.cut(p);
                let at = self.now + self.pipes[p].delay_ns;
                self.push(at, Ev::ChildClosed(p));
                return Ok(());
            }
        };
        let pipe = &mut self.pipes[p];
        pipe.pi = Some(pi);
        if !pipe.open {
            // Keyed: the key exchange is over, the parent may write.
            pipe.open = true;
            pipe.stalled_since = None;
        }
        for index in std::mem::take(&mut self.pipes[p].unread) {
            self.segment_in(to, p, index)?;
        }
        self.check_pipe_done(p)?;
        self.kick(p);
        self.drive_node(to)
    }

    /// Opens a data connection from host `from` to rank `child` for `set`.
    pub(super) fn connect(
        &mut self,
        from: usize,
        child: Rank,
        set: SegmentSet,
        hello: Msg,
    ) -> Result<(), String> {
        let to = *self
            .host_of_rank
            .get(&child)
            .ok_or("a connection to an unknown rank")?;
        let ci = if from == 0 {
            None
        } else {
            let a = self.nodes[from].as_ref().and_then(|m| m.assignment());
            a.and_then(|a| (a.children.iter()).position(|c| c.rank == child && c.segments == set))
        };
        let pipelined = Forwarding::of(self.s.shape) == Forwarding::Pipelined;
        let jitter = 1.0 + self.s.jitter * self.rng.random::<f64>();
        let delay_ns = (self.latency() as f64 * jitter) as u64;
        let p = self.pipes.len();
        let share = set.count(self.segs.count());
        let mut pipe = Pipe::new((from, to), ci, hello, set, delay_ns, share);
        pipe.routed = from != 0 && pipelined;
        self.pipes.push(pipe);
        self.pipe_of.insert((from, child, set), p);
        if let Some(ci) = ci {
            let cps = &mut self.hosts[from].child_pipes;
            if cps.len() <= ci {
                cps.resize(ci + 1, None);
            }
            cps[ci] = Some(p);
        }
        for h in [from, to] {
            self.hosts[h].connections += 1;
            self.max_conn = self.max_conn.max(self.hosts[h].connections);
        }
        if self.hosts[from].connections > self.s.max_connections
            || self.hosts[to].connections > self.s.max_connections
        {
            self.pipes[p].done = true;
            return self.child_done(p, Err("connection limit reached".into()));
        }
        if self.hosts[to].dead || self.hosts[to].finished.is_some() {
            // Nobody listens (dead, or its transfer is over): refused, the
            // parent hears it a round trip later.
            self.pipes[p].broken = true;
            self.pipes[p].done = true;
            let at = self.now + 2 * delay_ns;
            self.push(at, Ev::ChildDone(p, Err("connection refused".into())));
            return Ok(());
        }
        // SYN and hello; keyed, the two hellos of the key exchange before.
        let trips = if self.s.sealed { 4 } else { 2 };
        let at = self.now + trips * delay_ns;
        if self.s.sealed {
            // The key exchange needs the child's application: the parent
            // writes once it answered, and gives up after the inactivity
            // timeout.
            self.pipes[p].stalled_since = Some(self.now);
            let limit = self.now + self.s.inactivity.as_nanos() as u64;
            self.push(limit, Ev::WriteStall(p, self.now));
        } else {
            // Plain, the child's kernel takes the connection and its bytes
            // whatever its application does (it may not run, or not have
            // started yet): the parent writes at once.
            self.push(at, Ev::Established(p));
        }
        self.push(at, Ev::Hello(p));
        Ok(())
    }

    /// Feeds the edge `(from, child, segments)` its share from the
    /// `first`-th segment on.
    pub(super) fn feed(
        &mut self,
        from: usize,
        child: Rank,
        segments: SegmentSet,
        first: u64,
    ) -> Result<(), String> {
        let p = *(self.pipe_of.get(&(from, child, segments)))
            .ok_or("feeding a child never connected")?;
        let count = segments.count(self.segs.count());
        if first > count {
            return Err(format!(
                "feeding {segments:?} ({count} segments) from segment {first}"
            ));
        }
        self.pipes[p].feed = Some((segments, first, count));
        self.pipes[p].share = count - first;
        self.check_pipe_done(p)?;
        self.kick(p);
        Ok(())
    }
}
