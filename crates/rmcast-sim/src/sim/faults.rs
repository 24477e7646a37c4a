//! Faults injected from outside the session: garbage and well-formed
//! packets of other sessions from an intruder, and the data loss models.

use super::*;

/// Draws one frame's fate; the Gilbert–Elliott chain first advances
/// `steps` steps (closed form for a two-state chain).
pub(super) fn data_lost(
    model: &LossModel,
    rng: &mut ChaCha8Rng,
    bad: &mut bool,
    steps: u64,
) -> bool {
    match *model {
        LossModel::None | LossModel::Frames(_) => false,
        LossModel::Bernoulli(p) => p > 0.0 && rng.random::<f64>() < p,
        LossModel::GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_in_bad,
            loss_in_good,
        } => {
            if steps <= 1 {
                let flip = if *bad { p_bad_to_good } else { p_good_to_bad };
                if rng.random::<f64>() < flip {
                    *bad = !*bad;
                }
            } else {
                // P(bad after n steps) = π + (x₀ − π)·(1 − p_gb − p_bg)^n.
                let total = p_good_to_bad + p_bad_to_good;
                let stationary = if total > 0.0 {
                    p_good_to_bad / total
                } else {
                    0.0
                };
                let decay = (1.0 - total).powi(steps.min(i32::MAX as u64) as i32);
                let start = if *bad { 1.0 } else { 0.0 };
                *bad = rng.random::<f64>() < stationary + (start - stationary) * decay;
            }
            let p = if *bad { loss_in_bad } else { loss_in_good };
            rng.random::<f64>() < p
        }
    }
}

/// Writes a well-formed packet (never a `Hello`, which would lure listening
/// receivers into another session) of `session` into `buf`.
pub(super) fn foreign_packet(rng: &mut ChaCha8Rng, session: SessionId, buf: &mut [u8]) -> usize {
    let header = Header::new(session, RANK_SENDER);
    let mut payload = [0u8; 64];
    rng.fill_bytes(&mut payload);
    let seq = Seq(rng.next_u32());
    if rng.random_bool(0.1) {
        // Receiver-style feedback, to the group: foreign for everyone.
        let fb = Feedback {
            cumulative: seq,
            echo: seq,
            echo_copy: 0,
            aggregate: false,
            bitmap: &[],
        };
        let packet = Packet {
            header: Header::new(session, 0),
            body: Body::Ack(fb),
        };
        return packet.encode(buf).expect("fits");
    }
    let body = match rng.random_range(0..5u8) {
        0 => Body::Data(Data {
            seq,
            poll: 0xFFFF,
            copy: 0,
            payload: &payload[..rng.random_range(1..64)],
        }),
        1 => Body::Offer(Offer {
            object_size: 1000,
            isn: seq,
            payload_size: 1000,
            window: 4,
            protocol: ProtocolId::Ack,
            protocol_param: 0,
            receivers: 1,
            test_loss_ppm: 0,
            fec: None,
            name: "intruder",
        }),
        2 => Body::Close(Close {
            hash: [7; 32],
            signature: None,
        }),
        3 => Body::Bye(Bye {
            aborted: true,
            text: "intruder",
        }),
        _ => Body::Welcome(Welcome {
            receiver_id: rng.next_u64(),
            rank: 0,
            upstream: None,
        }),
    };
    Packet { header, body }.encode(buf).expect("fits")
}

impl Sim<'_> {
    pub(super) fn next_garbage_gap(&mut self) -> u64 {
        let u: f64 = self.garbage_rng.random::<f64>().max(1e-12);
        let gap_s = -u.ln() / self.sc.garbage_per_s;
        self.now + (gap_s * 1e9) as u64 + 1
    }

    /// Injects one garbage datagram from an intruder outside the session,
    /// straight into the switch: to the group or to the sender.
    pub(super) fn garbage(&mut self) {
        if self.log.finished_at.is_some() {
            return;
        }
        let next = self.next_garbage_gap();
        self.push(next, Ev::Garbage);
        self.garbage_injected += 1;
        let mut buf = [0u8; 512];
        let rng = &mut self.garbage_rng;
        let to_sender = rng.random_bool(0.25);
        let len = match rng.random_range(0..4u8) {
            0 => {
                let len = rng.random_range(0..300usize);
                rng.fill_bytes(&mut buf[..len]);
                len
            }
            1 => {
                // Looks like rmcast at first glance, then garbage.
                let len = rng.random_range(4..300usize);
                rng.fill_bytes(&mut buf[..len]);
                buf[..3].copy_from_slice(&[b'R', b'M', VERSION]);
                len
            }
            2 => {
                // A well-formed packet of a foreign session.
                let session = SessionId(rng.next_u64() | 1);
                let mut session = session;
                if self.sides.iter().any(|x| x.session == session) {
                    session = SessionId(session.0 ^ 2);
                }
                while self.sides.iter().any(|x| x.session == session) {
                    session = SessionId(session.0.wrapping_add(4));
                }
                foreign_packet(rng, session, &mut buf)
            }
            _ => {
                // Our session id, but from an address that is not the sender's.
                foreign_packet(rng, self.sides[0].session, &mut buf)
            }
        };
        let route = if to_sender {
            Route::Host(0)
        } else {
            Route::Group
        };
        let pkt = self.pool.alloc(&buf[..len], INTRUDER, route, None);
        let frags = self.frags(len);
        self.pool.slots[pkt as usize].frags = frags;
        // Straight into the switch, every fragment at once (one reference each).
        for _ in 1..frags {
            self.pool.retain(pkt);
        }
        for frag in 0..frags {
            self.at_switch(pkt, frag);
        }
    }
}
