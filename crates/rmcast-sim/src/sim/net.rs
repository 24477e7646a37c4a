//! The network: a datagram's way from a host's uplink through the switch
//! (store and forward, multicast copies, fragments, drop-tail queues, loss)
//! to the receiving host's reassembly and socket buffer.

use super::*;

impl Sim<'_> {
    /// Whether host `h`'s link is down now (the intruder has no host).
    fn link_is_down(&self, h: usize) -> bool {
        self.hosts
            .get(h)
            .is_some_and(|host| self.now < host.link_down_until)
    }

    pub(super) fn frags(&self, udp_payload: usize) -> u16 {
        u16::try_from(self.sc.fragments(udp_payload)).expect("at most 65,535 fragments")
    }

    /// Queues every fragment of a datagram (one reference held, given up
    /// here) on host `h`'s uplink; each fragment that fits travels on.
    pub(super) fn uplink_send(&mut self, h: usize, now: u64, pkt: u32) {
        let slot = &self.pool.slots[pkt as usize];
        let (len, frags) = (slot.bytes.len(), slot.frags);
        for frag in 0..frags {
            let wire = self.sc.frame_wire_bytes(len, usize::from(frag));
            match self.hosts[h]
                .uplink
                .admit(now, wire, self.sc.link_rate_bits_per_s)
            {
                Some(finish) => {
                    let at = finish + nanos(self.sc.propagation_delay);
                    self.pool.retain(pkt);
                    self.push(at, Ev::AtSwitch(pkt, frag));
                }
                None => self.drops.uplink_overflow += 1,
            }
        }
        self.pool.release(pkt);
    }

    /// Store-and-forward of one frame: copies it to every port it is for.
    pub(super) fn at_switch(&mut self, pkt: u32, frag: u16) {
        let slot = &self.pool.slots[pkt as usize];
        let (src, route) = (slot.src, slot.route);
        if self.link_is_down(usize::from(src)) {
            self.drops.link_down += 1;
            self.pool.release(pkt);
            return;
        }
        match route {
            Route::Group => {
                // A lone sender is no member of its group (as before
                // several senders existed); several senders hear each other.
                let first = usize::from(self.senders == 1);
                if self.sc.duplicate > 0.0 || self.sc.reorder > 0.0 {
                    // Copies may be delayed or doubled: one event each.
                    for p in first..self.hosts.len() {
                        if p != usize::from(src) {
                            self.pool.retain(pkt);
                            self.port_send(p, pkt, frag);
                        }
                    }
                } else {
                    // The copies that arrive at the same instant (every
                    // port whose queue is alike) travel as one event, in
                    // the order one event each would have popped.
                    let mut run = std::mem::take(&mut self.fanout_hosts);
                    let mut run_at = 0;
                    for p in first..self.hosts.len() {
                        if p == usize::from(src) {
                            continue;
                        }
                        self.pool.retain(pkt);
                        let Some(at) = self.port_admit(p, pkt, frag) else {
                            continue;
                        };
                        if !run.is_empty() && at != run_at {
                            self.push_fanout(run_at, pkt, frag, &run);
                            run.clear();
                        }
                        run_at = at;
                        run.push(p as u16);
                    }
                    self.push_fanout(run_at, pkt, frag, &run);
                    run.clear();
                    self.fanout_hosts = run;
                }
            }
            Route::Host(d) => {
                if d != src {
                    self.pool.retain(pkt);
                    self.port_send(usize::from(d), pkt, frag);
                }
            }
        }
        self.pool.release(pkt);
    }

    /// Queues one frame (one reference held) on the switch port towards host
    /// `p`; the loss models draw once per frame.
    pub(super) fn port_send(&mut self, p: usize, pkt: u32, frag: u16) {
        let Some(mut at) = self.port_admit(p, pkt, frag) else {
            return;
        };
        // Duplication and reordering, of datagrams that fit one frame (a
        // switch or a bonded link's doing; fragments stay as they are).
        if (self.sc.duplicate > 0.0 || self.sc.reorder > 0.0)
            && self.frags(self.pool.slots[pkt as usize].bytes.len()) == 1
        {
            if self.sc.reorder > 0.0 && self.net_rng.random::<f64>() < self.sc.reorder {
                at += nanos(self.sc.reorder_delay);
            }
            if self.sc.duplicate > 0.0 && self.net_rng.random::<f64>() < self.sc.duplicate {
                self.pool.retain(pkt);
                let again = at + nanos(self.sc.reorder_delay) / 4 + 1;
                self.push(again, Ev::AtHost(p as u16, pkt, frag));
            }
        }
        self.push(at, Ev::AtHost(p as u16, pkt, frag));
    }

    /// Queues one frame (one reference held) on the switch port towards host
    /// `p`: the instant it reaches the host, or `None` if it is lost or
    /// dropped (the reference given up). The loss models draw once per frame.
    fn port_admit(&mut self, p: usize, pkt: u32, frag: u16) -> Option<u64> {
        let now = self.now;
        if self.link_is_down(p) {
            self.drops.link_down += 1;
            self.pool.release(pkt);
            return None;
        }
        let slot = &self.pool.slots[pkt as usize];
        let wire = self
            .sc
            .frame_wire_bytes(slot.bytes.len(), usize::from(frag));
        let kind = slot.kind;
        let Some(finish) = self.hosts[p]
            .port
            .admit(now, wire, self.sc.link_rate_bits_per_s)
        else {
            self.drops.port_overflow += 1;
            self.pool.release(pkt);
            return None;
        };
        // Loss happens on the wire: the frame still used the port's time.
        let lost = if p < self.senders {
            kind.is_some()
                && self.sc.control_loss > 0.0
                && self.control_rng.random::<f64>() < self.sc.control_loss
        } else if matches!(kind, Some(Kind::Data | Kind::Parity)) {
            let host = &mut self.hosts[p];
            let frame = host.data_frames;
            host.data_frames += 1;
            // The burst chain steps once per full-size frame time on the
            // link, so a burst lasts a bounded time however sparse the
            // traffic (a backed-off sender must not stretch it to seconds).
            let frame_ns =
                (self.sc.mtu as u64 + 38) * 8 * 1_000_000_000 / self.sc.link_rate_bits_per_s.max(1);
            let steps = ((now.saturating_sub(host.loss_at)) / frame_ns.max(1)).max(1);
            host.loss_at = now;
            let lost = match &self.sc.loss {
                LossModel::Frames(frames) => frames.contains(&frame),
                model => data_lost(model, &mut host.loss_rng, &mut host.loss_bad, steps),
            };
            if lost {
                host.counters.data_lost += 1;
            }
            lost
        } else {
            false
        };
        if lost {
            if p < self.senders {
                self.drops.control_loss += 1;
            } else {
                self.drops.data_loss += 1;
            }
            self.pool.release(pkt);
            return None;
        }
        Some(finish + nanos(self.sc.propagation_delay))
    }

    /// A frame reaches host `h` (one reference held): a whole datagram goes
    /// to the socket, a fragment to reassembly.
    pub(super) fn at_host(&mut self, h: usize, pkt: u32, frag: u16) {
        let slot = &self.pool.slots[pkt as usize];
        let frags = slot.frags;
        if self.hosts[h].down(self.now) {
            if frag == 0 {
                self.drops.crashed_host += 1;
            }
            self.pool.release(pkt);
            return;
        }
        if frags == 1 {
            self.enqueue_socket(h, pkt);
            return;
        }
        let (ip_id, src, len) = (slot.ip_id, slot.src, slot.bytes.len());
        let now = self.now;
        let timeout = self.reasm_timeout;
        // Expired datagrams, and older ones from the same source (fragments
        // of one source never overtake each other, so those are lost).
        self.reasm_drop(h, |r| {
            now.saturating_sub(r.first_at) >= timeout || (r.src == src && r.ip_id < ip_id)
        });
        let bytes = self.sc.fragment_ip_payload(len, usize::from(frag));
        let limit = self.sc.reassembly_buffer_bytes;
        if len + 8 > limit {
            // Never fits in reassembly memory: lost, counted once.
            if frag == 0 {
                self.hosts[h].counters.fragment_loss += 1;
                self.drops.fragment_loss += 1;
            }
            self.pool.release(pkt);
            return;
        }
        // Make room: drop the oldest incomplete datagrams other than this one.
        while self.hosts[h].reasm_bytes + bytes > limit {
            let host = &self.hosts[h];
            let Some(oldest) = host.reasm.iter().position(|r| r.ip_id != ip_id) else {
                break;
            };
            let victim = host.reasm[oldest].ip_id;
            self.reasm_drop(h, |r| r.ip_id == victim);
        }
        let host = &mut self.hosts[h];
        let i = match host.reasm.iter().position(|r| r.ip_id == ip_id) {
            Some(i) => i,
            None => {
                self.pool.retain(pkt);
                host.reasm.push(Reasm {
                    ip_id,
                    src,
                    pkt,
                    first_at: now,
                    received: 0,
                    next: 0,
                    bytes: 0,
                });
                host.reasm.len() - 1
            }
        };
        let r = &mut host.reasm[i];
        debug_assert!(
            frag >= r.next,
            "fragments of one datagram overtook each other"
        );
        r.received += 1;
        r.next = frag + 1;
        r.bytes += bytes;
        host.reasm_bytes += bytes;
        if r.received == frags {
            let r = host.reasm.remove(i);
            host.reasm_bytes -= r.bytes;
            // The reassembly's reference goes to the socket.
            self.enqueue_socket(h, r.pkt);
        }
        self.pool.release(pkt);
    }

    /// Drops host `h`'s incomplete datagrams that match, counting each as
    /// fragment loss.
    pub(super) fn reasm_drop(&mut self, h: usize, mut lost: impl FnMut(&Reasm) -> bool) {
        let host = &mut self.hosts[h];
        let mut k = 0;
        while k < host.reasm.len() {
            if lost(&host.reasm[k]) {
                let r = host.reasm.remove(k);
                host.reasm_bytes -= r.bytes;
                host.counters.fragment_loss += 1;
                self.drops.fragment_loss += 1;
                self.pool.release(r.pkt);
            } else {
                k += 1;
            }
        }
    }

    /// A whole datagram (one reference held) enters host `h`'s socket
    /// buffer, which counts UDP payload bytes, or is dropped if it is full.
    pub(super) fn enqueue_socket(&mut self, h: usize, pkt: u32) {
        let now = self.now;
        let len = self.pool.slots[pkt as usize].bytes.len();
        let host = &mut self.hosts[h];
        if host.socket_bytes + len > self.sc.socket_buffer_bytes {
            self.drops.socket_overflow += 1;
            host.counters.socket_overflow += 1;
            self.pool.release(pkt);
            return;
        }
        host.socket.push_back(pkt);
        host.socket_bytes += len;
        host.max_socket_bytes = host.max_socket_bytes.max(host.socket_bytes);
        if !host.cpu_scheduled {
            host.cpu_scheduled = true;
            let at = host.cpu_free.max(now);
            self.push(at, Ev::Cpu(h as u16));
        }
    }

    /// Whether host `h` may hand the machine's next datagram to its uplink
    /// at `now`: always without `blocking_send`; else when nothing is held
    /// back and the uplink has room for the largest datagram the host sends
    /// (a socket is writable when a full-size send fits). If not, a
    /// `Writable` event is armed for when it is.
    pub(super) fn writable_now(&mut self, h: usize, now: u64) -> bool {
        use super::read::{SendRoom, send_room};
        match send_room(&mut self.hosts[h], self.sc, h < self.senders, now) {
            SendRoom::Free => true,
            SendRoom::Held => false,
            SendRoom::FullUntil(at) => {
                self.arm_writable(h, at);
                false
            }
        }
    }

    pub(super) fn arm_writable(&mut self, h: usize, at: u64) {
        let host = &mut self.hosts[h];
        if host.writable_at.is_none() {
            host.writable_at = Some(at);
            self.push(at, Ev::Writable(h as u16));
        }
    }

    /// The uplink has room again: send the held-back datagram, if any (its
    /// send cost starts once the CPU is free), and let the machine go on.
    pub(super) fn writable(&mut self, h: usize) -> Result<(), Fail> {
        let now = self.now;
        let host = &mut self.hosts[h];
        if host.down(now) {
            return Ok(());
        }
        if host.cpu_free > now {
            let at = host.cpu_free;
            self.push(at, Ev::Writable(h as u16));
            return Ok(());
        }
        host.writable_at = None;
        let mut t = now;
        if let Some(pkt) = host.pending_send.take() {
            t += self
                .sc
                .cost_of(h)
                .send_ns(self.pool.slots[pkt as usize].bytes.len());
            self.uplink_send(h, t, pkt);
        }
        let end = self.service(h, t)?;
        self.hosts[h].cpu_free = end;
        Ok(())
    }
}
