//! The PRMP receiver: handshake, a bounded reorder buffer of packets that
//! delivers whole messages in FIFO order exactly once, responses when
//! polled, leave and the close.
//!
//! The reorder buffer (slots, cumulative point, whole-message reads, the
//! advertised window) is its own sub-state in `reorder.rs`; this file is
//! the session: handshake, polls and responses, leave, close, timers.

mod reorder;

use super::StreamTransmit as Transmit;
use super::seal::Seal;
use crate::security::{AuthFailures, AuthStats, GroupKey};
use crate::{Dest, Instant, truncate_utf8};
use reorder::{Read, ReorderBuffer, Stored};
use rmcast_wire::stream::{
    Accept, ConnectRequest, PollRequest, Response, StreamBody, StreamPacket,
};
use rmcast_wire::{Header, RANK_SENDER, RANK_UNASSIGNED, Seq, SessionId};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How a receiver behaves.
#[derive(Clone, Debug)]
pub struct StreamReceiverConfig {
    /// Random identity; makes repeated connect requests idempotent, and
    /// names this receiver's sealing keys when keyed (the driver draws it).
    pub receiver_id: u64,
    /// Name shown in the sender's reports (at most 255 bytes are sent).
    pub name: String,
    /// Join only this session; `None` joins the first that invites or announces.
    pub session: Option<SessionId>,
    /// Receive buffer in packets (advertised to the sender).
    pub buffer_packets: u32,
    /// Largest payload per packet this receiver allocates for.
    pub payload_max: u16,
    /// Answer announcements (announcement model); invitations are always answered.
    pub answer_announcements: bool,
    /// Retransmission interval of `ConnectRequest`, `Accept` and `Leave`.
    pub handshake_interval: Duration,
    /// Give up when a member hears nothing from the sender this long.
    pub sender_timeout: Duration,
    /// After confirming the close, keep answering repeated `Close` polls this long.
    pub linger: Duration,
    /// `Leave` attempts before giving up on a `LeaveAck`.
    pub leave_tries: u32,
    /// The group key every datagram is sealed under; `None` runs insecure
    /// (plain packets; sealed ones are refused).
    pub group_key: Option<Arc<GroupKey>>,
}

impl Default for StreamReceiverConfig {
    fn default() -> Self {
        Self {
            receiver_id: 0,
            name: String::new(),
            session: None,
            buffer_packets: 1024,
            payload_max: 8972,
            answer_announcements: true,
            handshake_interval: Duration::from_millis(100),
            sender_timeout: Duration::from_secs(10),
            linger: Duration::from_secs(2),
            leave_tries: 5,
            group_key: None,
        }
    }
}

/// Something the receiving application must know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamReceiverEvent {
    /// The handshake completed: a member of `session` with `rank`.
    Connected {
        /// The session.
        session: SessionId,
        /// Rank given.
        rank: u16,
    },
    /// The sender closed the stream and this receiver holds every message;
    /// [`StreamReceiver::read`] yields the rest, then `None`.
    Closed,
    /// The session failed for this receiver (removed, refused, sender silent).
    Failed(String),
    /// A requested leave is done.
    Left,
}

/// Counters a driver reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamReceiverStats {
    /// Data packets stored.
    pub data_packets: u64,
    /// Data packets already held or already read.
    pub duplicates: u64,
    /// Data packets beyond the advertised window (a correct sender sends none).
    pub beyond_window: u64,
    /// Responses sent.
    pub responses: u64,
    /// Messages read by the application.
    pub messages_read: u64,
    /// Datagrams that failed to decode or made no sense.
    pub malformed: u64,
    /// Datagrams of another session.
    pub foreign: u64,
    /// Sealing: datagrams sealed and opened, and those refused before the
    /// machine saw them (unsealed, forged, replayed, another key...).
    pub auth: AuthStats,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Listening,
    Requesting,
    Accepting,
    Member,
    /// Confirmed the close; done at `until` unless asked again.
    Lingering {
        until: Instant,
    },
    Leaving {
        tries: u32,
    },
    Done,
}

#[derive(Clone, Copy, Debug)]
struct PendingResponse {
    poll_id: u32,
    echo_ts_us: u32,
    received: Instant,
    due: Instant,
    close: bool,
}

/// The receiving side of one PRMP session.
pub struct StreamReceiver {
    config: StreamReceiverConfig,
    state: State,
    session: Option<SessionId>,
    sender: Option<SocketAddr>,
    rank: u16,
    nonce: u64,
    /// Packet slots, allocated once at the invitation.
    buf: ReorderBuffer,
    final_seq: Option<Seq>,
    pending: Option<PendingResponse>,
    last_answered: Option<u32>,
    bitmap: Vec<u8>,
    next_send: Instant,
    last_heard: Instant,
    send_now: bool,
    events: VecDeque<StreamReceiverEvent>,
    stats: StreamReceiverStats,
    /// The group key's keyring (or none: insecure).
    seal: Seal,
    /// Listening, and every datagram since this time was refused: the
    /// receiver gives up `sender_timeout` later, saying why.
    refused_since: Option<Instant>,
}

impl StreamReceiver {
    /// A receiver listening for an invitation or an announcement.
    #[must_use]
    pub fn new(config: StreamReceiverConfig, now: Instant) -> Self {
        Self {
            state: State::Listening,
            session: config.session,
            sender: None,
            rank: RANK_UNASSIGNED,
            nonce: 0,
            buf: ReorderBuffer::new(config.buffer_packets),
            final_seq: None,
            pending: None,
            last_answered: None,
            bitmap: vec![0; (config.buffer_packets as usize).div_ceil(8)],
            next_send: now,
            last_heard: now,
            send_now: false,
            events: VecDeque::new(),
            stats: StreamReceiverStats::default(),
            seal: Seal::receiver(config.group_key.as_ref()),
            refused_since: None,
            config,
        }
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> &StreamReceiverStats {
        &self.stats
    }

    /// The datagrams refused before the machine saw them, by source (for a
    /// failure message: [`AuthFailures::describe`]).
    #[must_use]
    pub fn auth_failures(&self) -> &AuthFailures {
        self.seal.failures()
    }

    /// The rank given, once invited.
    #[must_use]
    pub fn rank(&self) -> Option<u16> {
        (self.rank != RANK_UNASSIGNED).then_some(self.rank)
    }

    /// The session joined, once invited.
    #[must_use]
    pub fn session(&self) -> Option<SessionId> {
        self.session.filter(|_| self.sender.is_some())
    }

    /// Packets held and not yet read (the buffer in use).
    #[must_use]
    pub fn buffered_packets(&self) -> u32 {
        self.buf.buffered()
    }

    /// The window advertised now: packets from the cumulative point it can take.
    #[must_use]
    pub fn window_packets(&self) -> u32 {
        self.buf.window()
    }

    /// The exclusive right edge of the advertised window.
    #[must_use]
    pub fn window_end(&self) -> Seq {
        self.buf.window_end()
    }

    /// True once the session is over for this receiver (messages may still
    /// wait in the buffer: read them).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.state == State::Done
    }

    /// True when the stream ended and every message has been read.
    #[must_use]
    pub fn at_end(&self) -> bool {
        self.final_seq == Some(self.buf.read_seq())
    }

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<StreamReceiverEvent> {
        self.events.pop_front()
    }

    /// Appends the next whole message to `out` and returns its length, or
    /// `None` when the next message is not complete yet. Each message is
    /// yielded once, in the order the sender sent them.
    pub fn read(&mut self, out: &mut Vec<u8>) -> Option<usize> {
        match self.buf.read(out) {
            Read::Message(len) => {
                self.stats.messages_read += 1;
                Some(len)
            }
            Read::NotYet => None,
            Read::Torn => {
                self.stats.malformed += 1;
                None
            }
        }
    }

    /// Leaves the session (spontaneous leave); the sender reports `Left`.
    pub fn leave(&mut self, now: Instant) {
        if matches!(
            self.state,
            State::Accepting | State::Member | State::Requesting
        ) && self.sender.is_some()
        {
            self.state = State::Leaving { tries: 0 };
            self.next_send = now;
            self.send_now = true;
            // Out of the session no response goes (`next_plain`): one
            // still pending would keep its deadline, due and never met.
            self.pending = None;
        } else if self.state != State::Done {
            self.state = State::Done;
            self.events.push_back(StreamReceiverEvent::Left);
        }
    }

    /// When the machine next needs [`StreamReceiver::handle_timeout`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state == State::Done {
            // A response still pending when the session ended (a leave
            // acknowledged before its poll was due) is never sent.
            return None;
        }
        let mut t = match self.state {
            State::Done => None,
            State::Listening => self.refused_since.map(|t| t + self.config.sender_timeout),
            State::Requesting | State::Accepting | State::Leaving { .. } => Some(self.next_send),
            State::Member => Some(self.last_heard + self.config.sender_timeout),
            State::Lingering { until } => Some(until),
        };
        // Only what `next_plain` will send: a response goes in the session.
        if let Some(p) = self.pending.filter(|_| self.in_session()) {
            t = Some(t.map_or(p.due, |x| x.min(p.due)));
        }
        t
    }

    /// Processes expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            State::Requesting | State::Accepting if now >= self.next_send => {
                self.send_now = true;
            }
            State::Leaving { tries } if now >= self.next_send => {
                if tries >= self.config.leave_tries {
                    self.state = State::Done;
                    self.events.push_back(StreamReceiverEvent::Left);
                } else {
                    self.send_now = true;
                }
            }
            State::Member if now >= self.last_heard + self.config.sender_timeout => {
                let why = self.seal.explain(format!(
                    "sender silent for {:.1} s",
                    self.config.sender_timeout.as_secs_f64()
                ));
                self.fail(why);
            }
            State::Listening
                if self
                    .refused_since
                    .is_some_and(|t| now >= t + self.config.sender_timeout) =>
            {
                let why = self.seal.explain(format!(
                    "heard nothing it could authenticate for {:.1} s",
                    self.config.sender_timeout.as_secs_f64()
                ));
                self.fail(why);
            }
            State::Lingering { until } if now >= until => self.state = State::Done,
            _ => {}
        }
    }

    fn fail(&mut self, reason: String) {
        self.state = State::Done;
        self.pending = None;
        self.events.push_back(StreamReceiverEvent::Failed(reason));
    }

    /// Processes one received datagram from `from`. A keyed receiver opens
    /// it in place first; one that does not open (or a sealed one reaching
    /// a keyless receiver) is counted in `stats().auth` and dropped,
    /// changing nothing else. A listening receiver that hears nothing but
    /// such datagrams for `sender_timeout` fails, naming what it refused.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &mut [u8]) {
        let opened = self.seal.open(from, datagram);
        self.stats.auth = self.seal.stats();
        let Ok(datagram) = opened else {
            if self.state == State::Listening && self.refused_since.is_none() {
                self.refused_since = Some(now);
            }
            return;
        };
        self.refused_since = None;
        let Ok(packet) = StreamPacket::decode(datagram) else {
            self.stats.malformed += 1;
            return;
        };
        if packet.header.rank != RANK_SENDER
            || self.session.is_some_and(|s| s != packet.header.session)
            || self.state == State::Done
        {
            self.stats.foreign += 1;
            return;
        }
        let bound = self.sender.is_some();
        if bound && Some(from) != self.sender {
            self.stats.foreign += 1;
            return;
        }
        match packet.body {
            StreamBody::Announce(a) => {
                if self.state == State::Listening
                    && self.config.answer_announcements
                    && a.payload_size <= self.config.payload_max
                {
                    self.session = Some(packet.header.session);
                    self.sender = Some(from);
                    self.seal
                        .take_session(packet.header.session, self.config.receiver_id);
                    self.state = State::Requesting;
                    self.send_now = true;
                }
            }
            StreamBody::Invite(inv) => {
                if matches!(self.state, State::Listening | State::Requesting) {
                    if inv.payload_size > self.config.payload_max {
                        self.stats.malformed += 1;
                        return;
                    }
                    self.session = Some(packet.header.session);
                    self.sender = Some(from);
                    self.seal
                        .take_session(packet.header.session, self.config.receiver_id);
                    self.rank = inv.rank;
                    self.nonce = inv.nonce;
                    self.buf.start(inv.isn, usize::from(inv.payload_size));
                    self.state = State::Accepting;
                    self.last_heard = now;
                    self.send_now = true;
                } else if self.state == State::Accepting && inv.nonce == self.nonce {
                    // Our Accept was lost: say it again at once.
                    self.send_now = true;
                }
            }
            StreamBody::Confirm { nonce } => {
                if self.state == State::Accepting && nonce == self.nonce {
                    self.state = State::Member;
                    self.last_heard = now;
                    self.events.push_back(StreamReceiverEvent::Connected {
                        session: packet.header.session,
                        rank: self.rank,
                    });
                }
            }
            StreamBody::Reset { reason } => {
                if bound {
                    self.fail(format!("reset by the sender: {reason:?}"));
                }
            }
            StreamBody::LeaveAck => {
                if matches!(self.state, State::Leaving { .. }) {
                    self.state = State::Done;
                    self.events.push_back(StreamReceiverEvent::Left);
                }
            }
            StreamBody::Data(d) => {
                if !self.in_session() {
                    return;
                }
                self.last_heard = now;
                self.on_data(d.seq, d.flags, d.payload);
                if let Some(p) = d.poll {
                    self.on_poll(now, &p, false);
                }
            }
            StreamBody::Poll(b) | StreamBody::Close(b) => {
                if !self.in_session() {
                    return;
                }
                self.last_heard = now;
                let close = matches!(packet.body, StreamBody::Close(_));
                // The sender never sends beyond our window's edge, so a
                // larger `next_seq` is corrupt or hostile.
                if b.next_seq > self.window_end() {
                    self.stats.malformed += 1;
                    return;
                }
                self.buf.note_high(b.next_seq);
                if close && self.final_seq.is_none() && b.next_seq >= self.buf.cum() {
                    self.final_seq = Some(b.next_seq);
                }
                if let State::Lingering { .. } = self.state
                    && close
                {
                    self.state = State::Lingering {
                        until: now + self.config.linger,
                    };
                }
                if let Some(p) = b.poll {
                    self.on_poll(now, &p, close);
                }
            }
            _ => self.stats.foreign += 1,
        }
    }

    fn in_session(&self) -> bool {
        matches!(
            self.state,
            State::Accepting | State::Member | State::Lingering { .. }
        )
    }

    fn on_data(&mut self, seq: Seq, flags: u8, payload: &[u8]) {
        match self.buf.insert(seq, flags, payload) {
            Stored::New => self.stats.data_packets += 1,
            Stored::Duplicate => self.stats.duplicates += 1,
            Stored::BeyondWindow => self.stats.beyond_window += 1,
            Stored::Malformed => self.stats.malformed += 1,
        }
    }

    fn on_poll(&mut self, now: Instant, p: &PollRequest<'_>, close: bool) {
        let Some(e) = p.entries.find(self.rank) else {
            return;
        };
        // A duplicated poll is answered once.
        if self.last_answered == Some(p.poll_id)
            || self.pending.is_some_and(|q| q.poll_id == p.poll_id)
        {
            return;
        }
        self.pending = Some(PendingResponse {
            poll_id: p.poll_id,
            echo_ts_us: p.ts_us,
            received: now,
            due: now + Duration::from_micros(u64::from(e.delay_us)),
            close,
        });
    }

    /// Writes the next datagram into `buf` and says where it goes. A keyed
    /// receiver seals it there, so `len` is the sealed length.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let t = self.next_plain(now, buf)?;
        // It took the session's keys when it bound to it, so only a
        // buffer without room for the seal fails (a response whose bitmap
        // of a huge receive buffer leaves less than SEAL_RECEIVER_OVERHEAD
        // bytes of `buf`): it is not sent, as if lost.
        let len = self.seal.seal(buf, t.len, false)?;
        self.stats.auth = self.seal.stats();
        Some(Transmit { len, ..t })
    }

    /// The next plain datagram.
    fn next_plain(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let sender = self.sender?;
        let session = self.session?;
        if let Some(p) = self.pending
            && now >= p.due
            && self.in_session()
        {
            self.pending = None;
            self.last_answered = Some(p.poll_id);
            return self.respond(now, p, sender, session, buf);
        }
        if !self.send_now {
            return None;
        }
        self.send_now = false;
        self.next_send = now + self.config.handshake_interval;
        let name = truncate_utf8(&self.config.name, 255);
        let (rank, body) = match self.state {
            State::Requesting => (
                RANK_UNASSIGNED,
                StreamBody::ConnectRequest(ConnectRequest {
                    receiver_id: self.config.receiver_id,
                    buffer_packets: self.config.buffer_packets,
                    name,
                }),
            ),
            State::Accepting => (
                self.rank,
                StreamBody::Accept(Accept {
                    nonce: self.nonce,
                    receiver_id: self.config.receiver_id,
                    buffer_packets: self.config.buffer_packets,
                    name,
                }),
            ),
            State::Leaving { tries } => {
                self.state = State::Leaving { tries: tries + 1 };
                (
                    self.rank,
                    StreamBody::Leave {
                        text: "application left",
                    },
                )
            }
            _ => return None,
        };
        emit(Dest::Unicast(sender), Header::new(session, rank), body, buf)
    }

    fn respond(
        &mut self,
        now: Instant,
        p: PendingResponse,
        sender: SocketAddr,
        session: SessionId,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        // Bitmap of the packets held past the cumulative point, up to the
        // highest known (bounded by the buffer).
        let bytes = self.buf.held_bitmap(&mut self.bitmap);
        let response = Response {
            poll_id: p.poll_id,
            echo_ts_us: p.echo_ts_us,
            held_us: now
                .saturating_since(p.received)
                .as_micros()
                .min(u32::MAX as u128) as u32,
            cumulative: self.buf.cum(),
            window_packets: self.window_packets(),
            bitmap: &self.bitmap[..bytes],
        };
        let holds_all = self.final_seq == Some(self.buf.cum());
        let body = if p.close {
            StreamBody::CloseAck(response)
        } else {
            StreamBody::Response(response)
        };
        self.stats.responses += 1;
        if p.close && holds_all {
            if self.state == State::Member {
                self.events.push_back(StreamReceiverEvent::Closed);
            }
            self.state = State::Lingering {
                until: now + self.config.linger,
            };
        }
        emit(
            Dest::Unicast(sender),
            Header::new(session, self.rank),
            body,
            buf,
        )
    }
}

fn emit(dest: Dest, header: Header, body: StreamBody<'_>, buf: &mut [u8]) -> Option<Transmit> {
    let kind = body.kind();
    let len = StreamPacket { header, body }.encode(buf).ok()?;
    Some(Transmit { dest, len, kind })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcast_wire::MAX_DATAGRAM;
    use rmcast_wire::stream::{
        DATA_FIRST, DATA_LAST, Invite, PollBody, PollEntries, PollEntry, StreamData, StreamKind,
    };

    const SESSION: SessionId = SessionId(3);
    const ISN: Seq = Seq(500);

    fn ms(x: u64) -> Instant {
        Instant::from_nanos(x * 1_000_000)
    }

    fn sender_addr() -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], 5000))
    }

    fn deliver(r: &mut StreamReceiver, now: Instant, body: StreamBody<'_>) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let n = StreamPacket {
            header: Header::new(SESSION, RANK_SENDER),
            body,
        }
        .encode(&mut buf)
        .unwrap();
        r.handle_datagram(now, sender_addr(), &mut buf[..n]);
    }

    fn sent(r: &mut StreamReceiver, now: Instant) -> Vec<(StreamKind, Vec<u8>)> {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        std::iter::from_fn(|| {
            r.poll_transmit(now, &mut buf)
                .map(|t| (t.kind, buf[..t.len].to_vec()))
        })
        .collect()
    }

    /// A receiver with an 8-packet buffer, invited and confirmed at 1 ms.
    fn member() -> StreamReceiver {
        let config = StreamReceiverConfig {
            buffer_packets: 8,
            ..StreamReceiverConfig::default()
        };
        let mut r = StreamReceiver::new(config, Instant::ZERO);
        let invite = Invite {
            nonce: 9,
            rank: 2,
            payload_size: 100,
            isn: ISN,
            message_packets_max: 4,
        };
        deliver(&mut r, ms(1), StreamBody::Invite(invite));
        assert_eq!(sent(&mut r, ms(1))[0].0, StreamKind::Accept);
        deliver(&mut r, ms(1), StreamBody::Confirm { nonce: 9 });
        assert_eq!(
            r.poll_event(),
            Some(StreamReceiverEvent::Connected {
                session: SESSION,
                rank: 2
            })
        );
        r
    }

    #[test]
    fn a_poll_is_answered_after_its_delay_with_the_cumulative_point_and_window() {
        let mut r = member();
        let data = StreamData {
            seq: ISN,
            flags: DATA_FIRST | DATA_LAST,
            poll: None,
            payload: b"hello",
        };
        deliver(&mut r, ms(2), StreamBody::Data(data));
        let mut raw = [0u8; 16];
        let entries = [PollEntry {
            rank: 2,
            delay_us: 3000,
        }];
        let n = PollEntries::write(&entries, &mut raw).unwrap();
        let poll = PollRequest {
            poll_id: 1,
            ts_us: 2000,
            entries: PollEntries::from_raw(&raw[..n]).unwrap(),
        };
        let body = PollBody {
            next_seq: ISN.add(1),
            poll: Some(poll),
        };
        deliver(&mut r, ms(2), StreamBody::Poll(body));
        assert!(sent(&mut r, ms(4)).is_empty(), "held for its delay");
        assert_eq!(r.poll_timeout(), Some(ms(5)));
        let out = sent(&mut r, ms(5));
        match StreamPacket::decode(&out[0].1).unwrap().body {
            StreamBody::Response(resp) => {
                assert_eq!((resp.poll_id, resp.cumulative), (1, ISN.add(1)));
                assert_eq!((resp.window_packets, resp.held_us), (7, 3000));
            }
            other => panic!("{:?}", other.kind()),
        }
        // The same poll again (duplicated) is not answered twice.
        deliver(&mut r, ms(6), StreamBody::Poll(body));
        assert!(sent(&mut r, ms(10)).is_empty());
        let mut msg = Vec::new();
        assert_eq!(r.read(&mut msg), Some(5));
        assert_eq!(r.window_packets(), 8);
    }

    #[test]
    fn a_silent_sender_fails_the_member_after_sender_timeout() {
        let mut r = member();
        let t = ms(1) + r.config.sender_timeout;
        assert_eq!(r.poll_timeout(), Some(t));
        r.handle_timeout(t);
        assert!(matches!(
            r.poll_event(),
            Some(StreamReceiverEvent::Failed(_))
        ));
        assert!(r.is_finished());
    }

    /// Delivers at `now` a poll (id 1) that asks rank 2, the member's, to
    /// answer `delay_us` later.
    fn poll_member(r: &mut StreamReceiver, now: Instant, delay_us: u32) {
        let mut raw = [0u8; 16];
        let entries = [PollEntry { rank: 2, delay_us }];
        let n = PollEntries::write(&entries, &mut raw).unwrap();
        let poll = PollRequest {
            poll_id: 1,
            ts_us: 2000,
            entries: PollEntries::from_raw(&raw[..n]).unwrap(),
        };
        let body = PollBody {
            next_seq: ISN,
            poll: Some(poll),
        };
        deliver(r, now, StreamBody::Poll(body));
    }

    #[test]
    fn a_response_pending_when_the_leave_is_acknowledged_leaves_no_timer() {
        let mut r = member();
        poll_member(&mut r, ms(2), 50_000);
        r.leave(ms(3));
        assert_eq!(sent(&mut r, ms(3))[0].0, StreamKind::Leave);
        deliver(&mut r, ms(4), StreamBody::LeaveAck);
        assert!(r.is_finished());
        // The response due at 52 ms is never sent: no timer asks for it.
        assert_eq!(r.poll_timeout(), None);
        assert!(sent(&mut r, ms(60)).is_empty());
    }

    /// A receiver that leaves while a response is pending sends no
    /// response (it is out of the session) and asks for no wake-up before
    /// its next Leave: the response's deadline, already due, used to stay
    /// its timer and spin the driver until the next try (the stream
    /// simulator's check of stale timers found it in `stream_sealed`).
    #[test]
    fn a_response_pending_when_leaving_keeps_no_deadline_in_the_past() {
        let mut r = member();
        poll_member(&mut r, ms(2), 1_000);
        r.leave(ms(2));
        assert_eq!(sent(&mut r, ms(2))[0].0, StreamKind::Leave);
        // Past the response's due time: nothing to send, nothing due.
        r.handle_timeout(ms(4));
        assert!(sent(&mut r, ms(4)).is_empty());
        let next = r.poll_timeout().expect("the next Leave");
        assert!(next > ms(4), "a deadline in the past: {next:?}");
        assert_eq!(next, ms(2) + r.config.handshake_interval);
    }

    #[test]
    fn leaving_repeats_until_acknowledged() {
        let mut r = member();
        r.leave(ms(2));
        assert_eq!(sent(&mut r, ms(2))[0].0, StreamKind::Leave);
        r.handle_timeout(ms(102));
        assert_eq!(sent(&mut r, ms(102))[0].0, StreamKind::Leave);
        deliver(&mut r, ms(103), StreamBody::LeaveAck);
        assert_eq!(r.poll_event(), Some(StreamReceiverEvent::Left));
        assert!(r.is_finished());
    }
}
