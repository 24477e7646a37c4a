//! What leaves next: control packets first, then repairs, then new data
//! (under flow and congestion control, carrying the polls due soon), then a
//! standalone poll.

use super::{Phase, StreamSender};
use crate::stream::StreamTransmit as Transmit;
use crate::{Dest, Instant};
use rmcast_wire::stream::{StreamBody, StreamData, StreamKind, StreamPacket};
use rmcast_wire::{Header, RANK_SENDER, Seq};

impl StreamSender {
    /// Writes the next datagram into `buf` (at least [`crate::MAX_DATAGRAM`]
    /// bytes) and says where it goes. A keyed sender seals it there (with
    /// the session nonce on every packet that is not data), so `len` is the
    /// sealed length.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let Some(t) = self.next_plain(now, buf) else {
            // The batch is over: what it sent may have closed a window.
            self.watch_stalls(now);
            return None;
        };
        let len = self.seal.seal(buf, t.len, t.kind != StreamKind::Data);
        self.stats.auth = self.seal.stats();
        // The machine leaves room for the seal (`validate`), and its keys
        // are its own from the start: this cannot fail.
        debug_assert!(
            len.is_some(),
            "a {:?} of {} bytes not sealed",
            t.kind,
            t.len
        );
        Some(Transmit { len: len?, ..t })
    }

    /// The next plain datagram.
    fn next_plain(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(t) = self.control_transmit(now, buf) {
            return Some(t);
        }
        if matches!(self.phase, Phase::Admitting | Phase::Done) {
            return None;
        }
        if self.close_requested && self.phase == Phase::Open && self.buf.next_tx == self.buf.tail {
            self.phase = Phase::Closing;
            self.plan_polls(now);
        }
        self.decide_repairs(now);
        if let Some(t) = self.repair_transmit(now, buf) {
            return Some(t);
        }
        if self.may_send_new() {
            let s = self.buf.next_tx;
            self.buf.next_tx = s.add(1);
            let t = self.data_transmit(now, s, Dest::Group, buf);
            self.stats.data_packets += 1;
            let w = self.buf.slot(s);
            self.buf.slots[w].first_sent_no = self.buf.slots[w].sent_no;
            // Every member now lacks an acknowledgement of this packet.
            self.plan_polls(now);
            return t;
        }
        self.poll_standalone(now, buf)
    }

    /// Writes data packet `s`, carrying the polls due soon when it is multicast.
    pub(super) fn data_transmit(
        &mut self,
        now: Instant,
        s: Seq,
        dest: Dest,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let w = self.buf.slot(s);
        let slot = self.buf.slots[w];
        self.buf.transmissions += 1;
        self.buf.slots[w].sent_no = self.buf.transmissions;
        let high = if s >= self.buf.next_tx {
            s.add(1)
        } else {
            self.buf.next_tx
        };
        let n = if dest == Dest::Group {
            self.collect_polls(now, now + self.config.epoch, high)
        } else {
            0
        };
        self.stats.piggybacked_polls += n as u64;
        self.encode_entries(now, n);
        let poll = self.encoded_poll(n);
        let p = usize::from(self.config.packet_payload());
        let payload = &self.buf.payload[w * p..w * p + usize::from(slot.len)];
        let body = StreamBody::Data(StreamData {
            seq: s,
            flags: slot.flags,
            poll,
            payload,
        });
        let header = Header::new(self.session, RANK_SENDER);
        let len = StreamPacket { header, body }.encode(buf).ok()?;
        Some(Transmit {
            dest,
            len,
            kind: StreamKind::Data,
        })
    }

    pub(super) fn header(&self) -> Header {
        Header::new(self.session, RANK_SENDER)
    }
}

pub(super) fn emit(
    dest: Dest,
    header: Header,
    body: StreamBody<'_>,
    buf: &mut [u8],
) -> Option<Transmit> {
    let kind = body.kind();
    let len = StreamPacket { header, body }.encode(buf).ok()?;
    Some(Transmit { dest, len, kind })
}
