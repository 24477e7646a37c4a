//! The hosts' drivers: each one's single CPU serving its socket buffer
//! (the read itself is `read.rs`), the real state machines (sender,
//! receiver endpoint and the application beside each) drained after every
//! input, their timers, TCP catch-ups and crashes.

use super::app::received_hash;
use super::read::{Probe, Read, ReadCtx, read_datagram};
use super::*;
use rmcast_proto::SessionHandle;

/// How long host `h`'s TCP catch-up of the bytes after `from` takes: a
/// connection's set-up (two round trips), then the rest at the slower
/// of its link and its CPU (its per-packet cost for packets of the
/// session's size: a slow disk or CPU is as slow over TCP). The model
/// of the TCP transfer is this time, not its segments.
fn catch_up_ns(sc: &Scenario, h: usize, app: &RxApp, from: u64) -> u64 {
    let bytes = app.size.saturating_sub(from);
    let link = sc.link_rate_bits_per_s.max(1) as f64;
    let cost = sc.cost_of(h);
    let per_packet = cost.recv_per_packet.as_secs_f64()
        + cost.recv_ps_per_byte as f64 * app.payload_size as f64 * 1e-12;
    let cpu = if per_packet > 0.0 {
        app.payload_size as f64 * 8.0 / per_packet
    } else {
        f64::INFINITY
    };
    let secs = bytes as f64 * 8.0 / link.min(cpu);
    4 * nanos(sc.propagation_delay) + (secs * 1e9) as u64
}

impl Sim<'_> {
    /// Drains a host's machine after an input at CPU time `now`: transmits
    /// (each costing its [`crate::HostCost`] send cost, and waiting first
    /// while the uplink is full if sends block), events (and the application's reactions,
    /// which may owe more transmits), then re-arms its timer. Returns the
    /// CPU time at which the host is free again.
    pub(super) fn service(&mut self, h: usize, now: u64) -> Result<u64, Fail> {
        self.service_from(h, now, Probe::No)
    }

    /// [`Sim::service`], the machine's first answers already known
    /// ([`probe`]): they are taken where `service` would have asked.
    pub(super) fn service_from(
        &mut self,
        h: usize,
        mut now: u64,
        probe: Probe,
    ) -> Result<u64, Fail> {
        let (mut probed, mut first_event, mut polled_none) = (None, None, false);
        match probe {
            Probe::No => {}
            Probe::Quiet(deadline) => {
                // Nothing to send and no event: only the timer.
                self.arm_timer_to(h, now, deadline);
                return Ok(now);
            }
            Probe::Event(s, e) => {
                first_event = Some((s, e));
                polled_none = true;
            }
            Probe::Sent { t, thread, at } => {
                let bytes = &self.reader_bufs[thread].sent[at..at + t.len];
                self.tx_buf[..t.len].copy_from_slice(bytes);
                probed = Some(t);
            }
        }
        let mut sent = 0usize;
        let is_sender = h < self.senders;
        if is_sender {
            // The datagram or timer just handled may have moved the window.
            self.observe_sender(h, now)?;
        }
        loop {
            loop {
                if std::mem::take(&mut polled_none) {
                    break;
                }
                let t = if let Some(t) = probed.take() {
                    // The probe found the uplink writable and polled.
                    Some(t)
                } else {
                    if !self.writable_now(h, now) {
                        // Waiting for room on the uplink: no more sends for now.
                        break;
                    }
                    let host = &mut self.hosts[h];
                    let at = Instant::from_nanos(now);
                    match &mut host.machine {
                        Machine::Sender(s) => {
                            s.poll_transmit(at, &self.sides[h].object, &mut self.tx_buf)
                        }
                        Machine::Receivers(rxs) => rxs
                            .endpoint
                            .poll_transmit(at, &mut self.tx_buf)
                            .map(|(_, t)| t),
                    }
                };
                if is_sender {
                    self.observe_sender(h, now)?;
                }
                let Some(t) = t else { break };
                sent += 1;
                if sent > TRANSMIT_BOUND {
                    return Err(invariant(
                        now,
                        format!("host {h} emits datagrams without end"),
                    ));
                }
                let route = match t.dest {
                    Dest::Group => Some(Route::Group),
                    Dest::Unicast(addr) => {
                        host_of(addr, self.hosts.len()).map(|d| Route::Host(d as u16))
                    }
                };
                let Some(route) = route else {
                    now += self.sc.cost_of(h).send_ns(t.len);
                    self.drops.no_route += 1;
                    continue;
                };
                let pkt = self
                    .pool
                    .alloc(&self.tx_buf[..t.len], h as u16, route, Some(t.kind));
                self.pool.slots[pkt as usize].frags = self.frags(t.len);
                if self.sc.blocking_send {
                    let wire = self.sc.wire_bytes(t.len);
                    if let Some(at) = self.hosts[h].uplink.room_at(now, wire)
                        && at > now
                    {
                        // The socket is not writable: hold the datagram
                        // and go on reading input until it is.
                        self.hosts[h].pending_send = Some(pkt);
                        self.arm_writable(h, at);
                        break;
                    }
                }
                now += self.sc.cost_of(h).send_ns(t.len);
                self.uplink_send(h, now, pkt);
            }
            if !self.react_from(h, now, first_event.take())? {
                break;
            }
        }
        self.arm_timer(h, now);
        Ok(now)
    }

    /// Checks the sender's buffer after a step of its machine: never more
    /// packets outstanding than the window; records the trace when asked.
    pub(super) fn observe_sender(&mut self, h: usize, now: u64) -> Result<(), Fail> {
        let Machine::Sender(s) = &self.hosts[h].machine else {
            unreachable!("hosts 0..S are senders");
        };
        let side = &mut self.sides[h];
        if self.sc.trace_rate
            && let Some(c) = s.rate()
        {
            let spacing_ns = u64::try_from(c.spacing().as_nanos()).unwrap_or(u64::MAX);
            let decrease = c.state() == rmcast_proto::HuntState::Decrease;
            let last = side.rate_trace.last();
            if last.is_none_or(|l| (l.spacing_ns, l.decrease) != (spacing_ns, decrease)) {
                side.rate_trace.push(RateSample {
                    at_ns: now,
                    spacing_ns,
                    decrease,
                    sent: s.stats().data_packets,
                    rtt_ns: u64::try_from(c.rtt().as_nanos()).unwrap_or(u64::MAX),
                });
            }
        }
        // Once every byte is acknowledged (or every receiver failed) nothing
        // is outstanding; `outstanding()` used to underflow then (see
        // tests/proto_findings.rs), so it is not asked.
        if s.acked_bytes() >= self.sc.object_size {
            return Ok(());
        }
        let outstanding = s.outstanding();
        // The window in effect: `--protocol auto` may have chosen another.
        let window = s.config().window;
        if outstanding > window {
            return Err(Failure::Invariant {
                at: dur(now),
                what: format!("sender has {outstanding} packets outstanding, window is {window}"),
            });
        }
        side.max_outstanding = side.max_outstanding.max(outstanding);
        if self.sc.trace_outstanding {
            let sent = u32::try_from(s.stats().data_packets).unwrap_or(u32::MAX);
            let last = side.outstanding_trace.last();
            if last.is_none_or(|l| (l.sent, l.outstanding) != (sent, outstanding)) {
                side.outstanding_trace.push(OutstandingSample {
                    at_ns: now,
                    sent,
                    outstanding,
                });
            }
        }
        Ok(())
    }

    /// Handles the machine's events; returns whether any arrived.
    pub(super) fn react(&mut self, h: usize, now: u64) -> Result<bool, Fail> {
        self.react_from(h, now, None)
    }

    /// [`Sim::react`], a receiver's first event already taken ([`probe`]).
    fn react_from(
        &mut self,
        h: usize,
        now: u64,
        mut first: Option<(SessionHandle, ReceiverEvent)>,
    ) -> Result<bool, Fail> {
        let mut any = false;
        let mut catch_ups: Vec<(u64, u16)> = Vec::new();
        let mut finished = false;
        let host = &mut self.hosts[h];
        match &mut host.machine {
            Machine::Sender(s) => {
                debug_assert!(first.is_none(), "a sender is never probed");
                while let Some(e) = s.poll_event() {
                    any = true;
                    match e {
                        SenderEvent::Verified { .. } => self.log.last_verdict_at = now,
                        SenderEvent::MemberFailed { name, .. } => {
                            self.log.last_verdict_at = now;
                            let host = name.strip_prefix('r').and_then(|k| k.parse::<usize>().ok());
                            if let Some(slot) = host.and_then(|k| self.log.failed_at.get_mut(k)) {
                                slot.get_or_insert(now);
                            }
                        }
                        SenderEvent::Finished => {
                            self.log.finished[h] = Some(now);
                            finished = true;
                        }
                        _ => {}
                    }
                }
            }
            Machine::Receivers(rxs) => {
                rxs.sync_apps();
                while let Some((s, e)) = first.take().or_else(|| rxs.endpoint.poll_event()) {
                    any = true;
                    let r = rxs.endpoint.session_mut(s);
                    let app = &mut rxs.apps[s.0];
                    match e {
                        ReceiverEvent::Admitted { rank, .. } => app.rank = Some(rank),
                        ReceiverEvent::Offer(info) => {
                            if info.size != self.sc.object_size {
                                return Err(invariant(
                                    now,
                                    format!("host {h} was offered {info:?}"),
                                ));
                            }
                            app.delivered = vec![0; (info.packets as usize).div_ceil(64)];
                            app.packets = info.packets;
                            app.delivered_count = 0;
                            app.prefix = 0;
                            app.size = info.size;
                            app.payload_size = u64::from(info.payload_size);
                            app.all_matched = true;
                            r.accept_offer();
                            if let Some(after) = self.sc.config.have_after {
                                let barrier = after.div_ceil(app.payload_size) as u32;
                                let number = (h + 1 - self.senders) as u16;
                                let held = self
                                    .sc
                                    .held
                                    .iter()
                                    .find(|(n, _)| *n == number)
                                    .map(|(_, r)| r.clone())
                                    .unwrap_or_default();
                                app.held = Some((barrier, held));
                                r.report_pending(Instant::from_nanos(now), barrier);
                            }
                        }
                        ReceiverEvent::AllData => {
                            let Some(k) = side_of(&self.sides, r) else {
                                return Err(invariant(
                                    now,
                                    format!("host {h} holds all data of no sender's session"),
                                ));
                            };
                            let hash = self.sides[k].hash;
                            if r.expected_hash() != Some(hash) {
                                return Err(invariant(
                                    now,
                                    format!(
                                        "host {h} was asked to verify against {:?}",
                                        r.expected_hash()
                                    ),
                                ));
                            }
                            app.all_data_at = Some(now);
                            let got = received_hash(app, &self.sides[k].object, hash);
                            if got == hash {
                                app.hash_ok = true;
                                r.confirm(Status::Ok, got, "");
                            } else {
                                r.confirm(Status::HashMismatch, got, "hash differs");
                            }
                        }
                        ReceiverEvent::Moved { from, .. } => {
                            app.moved_from = Some(from);
                            catch_ups.push((now, s.0 as u16));
                        }
                        ReceiverEvent::Finished => app.ended_at = Some(now),
                        ReceiverEvent::Failed(why) => {
                            app.ended_at = Some(now);
                            app.failure = Some(why);
                        }
                    }
                }
            }
        }
        for (at, s) in catch_ups {
            self.push(at, Ev::CatchUpReady(h as u16, s));
        }
        // The session is over once every sender finished, or died (a
        // restart's first sender).
        let senders_done = (0..self.senders)
            .all(|k| self.log.finished[k].is_some() || self.hosts[k].crashed_at.is_some());
        if finished && senders_done {
            self.log.finished_at = Some(now);
        }
        Ok(any)
    }

    pub(super) fn arm_timer(&mut self, h: usize, now: u64) {
        let deadline = match &self.hosts[h].machine {
            Machine::Sender(s) => s.poll_timeout(),
            Machine::Receivers(rxs) => rxs.endpoint.poll_timeout(),
        };
        self.arm_timer_to(h, now, deadline);
    }

    /// [`Sim::arm_timer`], the machine's deadline already asked.
    fn arm_timer_to(&mut self, h: usize, now: u64, deadline: Option<Instant>) {
        let host = &mut self.hosts[h];
        let want = deadline
            .map(|t| t.as_nanos().max(now))
            // A host waiting to send cannot act on an expiry before it may send
            // (the machine's deadline may be "transmit now").
            .map(|t| t.max(host.writable_at.unwrap_or(0)));
        if want == host.timer_at {
            return;
        }
        host.timer_at = want;
        host.timer_gen += 1;
        let generation = host.timer_gen;
        match want {
            Some(t) => self.push_timer(h, t, generation),
            None => self.timers.remove(h as u16),
        }
    }

    /// Host `h`'s TCP catch-up of session `s` starts once its sender's
    /// multicast data is all acknowledged (as the runtime's does: the
    /// group's data keeps the uplink); until then, looks every 10 ms.
    pub(super) fn catch_up_ready(&mut self, h: usize, s: usize) {
        let now = self.now;
        let Machine::Receivers(rxs) = &self.hosts[h].machine else {
            return;
        };
        let app = &rxs.apps[s];
        let r = rxs.endpoint.session(rmcast_proto::SessionHandle(s));
        let (Some(from), Some(k)) = (app.moved_from, side_of(&self.sides, r)) else {
            return;
        };
        let released = match &self.hosts[k].machine {
            Machine::Sender(sender) => {
                sender.acked_bytes() >= app.size || self.hosts[k].crashed_at.is_some()
            }
            Machine::Receivers(_) => true,
        };
        if released {
            let ns = catch_up_ns(self.sc, h, app, from);
            self.push(now.saturating_add(ns), Ev::CatchUp(h as u16, s as u16));
        } else {
            self.push(now + 10_000_000, Ev::CatchUpReady(h as u16, s as u16));
        }
    }

    /// Host `h`'s TCP catch-up of session `s` is over: the bytes arrived
    /// intact (TCP under a checksum and, keyed, an AEAD), so it holds the
    /// object; both machines hear the verdict.
    pub(super) fn catch_up(&mut self, h: usize, s: usize) -> Result<(), Fail> {
        let now = self.now;
        if self.hosts[h].crashed_at.is_some() {
            return Ok(());
        }
        let crashed: Vec<bool> = (0..self.senders)
            .map(|k| self.hosts[k].crashed_at.is_some())
            .collect();
        let Machine::Receivers(rxs) = &mut self.hosts[h].machine else {
            return Ok(());
        };
        let r = rxs.endpoint.session_mut(rmcast_proto::SessionHandle(s));
        let (Some(rank), Some(k)) = (r.rank(), side_of(&self.sides, r)) else {
            return Err(invariant(now, format!("host {h} caught up in no session")));
        };
        if crashed.get(k).copied().unwrap_or(true) {
            // The sender died: the catch-up's connection broke.
            r.catch_up_done(
                Instant::from_nanos(now),
                Err("the sender's catch-up connection closed".into()),
            );
            self.react(h, now)?;
            self.arm_timer(h, now);
            return Ok(());
        }
        let app = &mut rxs.apps[s];
        for i in 0..app.packets {
            let (word, bit) = ((i / 64) as usize, i % 64);
            if app.delivered[word] & (1 << bit) == 0 {
                app.delivered[word] |= 1 << bit;
                app.delivered_count += 1;
            }
        }
        app.all_data_at = Some(now);
        app.hash_ok = app.all_matched;
        r.catch_up_done(Instant::from_nanos(now), Ok(()));
        if let Machine::Sender(sender) = &mut self.hosts[k].machine {
            sender.catch_up_done(Instant::from_nanos(now), rank, Ok(()));
        }
        for host in [h, k] {
            if self.hosts[host].cpu_free <= now && self.hosts[host].crashed_at.is_none() {
                let end = self.service(host, now)?;
                self.hosts[host].cpu_free = end;
            } else {
                self.react(host, now)?;
                self.arm_timer(host, now);
            }
        }
        Ok(())
    }

    /// The driver's hashing thread hands the machine the hash and wakes the
    /// event loop, which transmits (once its CPU is free, as for a timer).
    pub(super) fn hash_ready(&mut self, h: usize) -> Result<(), Fail> {
        let now = self.now;
        if self.hosts[h].cpu_free > now {
            let at = self.hosts[h].cpu_free;
            self.push(at, Ev::HashReady(h as u16));
            return Ok(());
        }
        let hash = self.sides[h].hash;
        if let Machine::Sender(s) = &mut self.hosts[h].machine {
            s.set_object_hash(hash);
        }
        let end = self.service(h, now)?;
        self.hosts[h].cpu_free = end;
        Ok(())
    }

    pub(super) fn timer(&mut self, h: usize, generation: u64) -> Result<(), Fail> {
        let now = self.now;
        let host = &mut self.hosts[h];
        if generation != host.timer_gen || host.down(now) {
            return Ok(());
        }
        if host.cpu_free > now {
            // The CPU is busy: the expiry is handled when it frees up.
            let at = host.cpu_free;
            self.push_timer(h, at, generation);
            return Ok(());
        }
        if host.last_fire == now {
            host.fires_at_same_instant += 1;
            if host.fires_at_same_instant > LIVELOCK_FIRES {
                return Err(Failure::Livelock {
                    at: dur(now),
                    host: h as u16,
                });
            }
        } else {
            host.last_fire = now;
            host.fires_at_same_instant = 0;
        }
        host.timer_at = None;
        let at = Instant::from_nanos(now);
        match &mut host.machine {
            Machine::Sender(s) => s.handle_timeout(at),
            Machine::Receivers(rxs) => rxs.endpoint.handle_timeout(at),
        }
        let end = self.service(h, now)?;
        self.hosts[h].cpu_free = end;
        Ok(())
    }

    /// A `Cpu` event: host `h` reads the next datagram of its socket if
    /// its CPU is free, then does what the machine owes.
    pub(super) fn cpu(&mut self, h: usize) -> Result<(), Fail> {
        if !self.cpu_ready(h) {
            return Ok(());
        }
        let cx = ReadCtx {
            now: self.now,
            sc: self.sc,
            pool: &self.pool,
            sides: &self.sides,
            cpu_jitter: self.cpu_jitter,
        };
        let read = read_datagram(&mut self.hosts[h], h, &cx, &mut self.scratch)?;
        self.cpu_done(h, read)
    }

    /// Whether host `h` reads a datagram now: it is up, its CPU is free
    /// (else the event waits until it is) and its socket holds one (else
    /// its CPU goes idle).
    pub(super) fn cpu_ready(&mut self, h: usize) -> bool {
        let host = &mut self.hosts[h];
        if host.down(self.now) {
            return false;
        }
        if host.cpu_free > self.now {
            // Busy (a timer or a send ran meanwhile): read when it frees up.
            let at = host.cpu_free;
            self.push(at, Ev::Cpu(h as u16));
            return false;
        }
        if host.socket.is_empty() {
            host.cpu_scheduled = false;
            return false;
        }
        true
    }

    /// The rest of a `Cpu` event once host `h` has read a datagram: its
    /// sends, events and timer, and its next read.
    pub(super) fn cpu_done(&mut self, h: usize, read: Read) -> Result<(), Fail> {
        self.pool.release(read.pkt);
        let end = self.service_from(h, read.t, read.probe)?;
        let host = &mut self.hosts[h];
        host.cpu_free = end;
        if host.socket.is_empty() {
            host.cpu_scheduled = false;
        } else {
            self.push(end, Ev::Cpu(h as u16));
        }
        Ok(())
    }

    /// Stops host `h` for `ns`: its CPU is busy until then, so it reads
    /// nothing and its timers wait (both already defer while the CPU is busy).
    pub(super) fn pause(&mut self, h: usize, ns: u64) {
        let host = &mut self.hosts[h];
        host.cpu_free = host.cpu_free.max(self.now.saturating_add(ns));
    }

    pub(super) fn crash(&mut self, h: usize) {
        let now = self.now;
        let host = &mut self.hosts[h];
        if host.crashed_at.is_some() {
            return;
        }
        host.crashed_at = Some(now);
        host.socket_bytes = 0;
        host.reasm_bytes = 0;
        for r in std::mem::take(&mut host.reasm) {
            self.pool.release(r.pkt);
        }
        if let Some(pkt) = host.pending_send.take() {
            self.pool.release(pkt);
        }
        let queued: Vec<u32> = host.socket.drain(..).collect();
        for pkt in queued {
            self.drops.crashed_host += 1;
            self.pool.release(pkt);
        }
    }
}
