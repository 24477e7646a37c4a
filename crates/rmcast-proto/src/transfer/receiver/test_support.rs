//! Test helpers: a receiver driven by hand-made sender datagrams.

use crate::{Instant, ProtocolId, Receiver, ReceiverConfig, ReceiverEvent, Seq, SessionId};
use rmcast_wire::{Body, Data, Header, Hello, Offer, POLL_NONE, Packet, RANK_SENDER, Welcome};
use std::net::SocketAddr;

pub(super) const SESSION: SessionId = SessionId(5);
pub(super) const ID: u64 = 77;
pub(super) const PAYLOAD: u16 = 1000;
pub(super) const SIZE: u64 = 2500;

pub(super) fn sender() -> SocketAddr {
    "10.0.0.1:5000".parse().unwrap()
}

pub(super) fn packet(body: Body<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let n = Packet {
        header: Header::new(SESSION, RANK_SENDER),
        body,
    }
    .encode(&mut buf)
    .unwrap();
    buf.truncate(n);
    buf
}

pub(super) fn events(r: &mut Receiver) -> Vec<ReceiverEvent> {
    std::iter::from_fn(|| r.poll_event()).collect()
}

/// A receiver listening for any session.
pub(super) fn fresh() -> Receiver {
    Receiver::new(
        ReceiverConfig {
            receiver_id: ID,
            ..ReceiverConfig::default()
        },
        Instant::ZERO,
    )
}

/// The sender's Hello, Welcome (rank 0) and Offer of a 3-packet object.
pub(super) fn handshake() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    handshake_in(1, 0)
}

/// The same for a group of `group` receivers, this one given `rank`.
pub(super) fn handshake_in(group: u16, rank: u16) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let hello = packet(Body::Hello(Hello {
        receivers_wanted: group,
        protocol: ProtocolId::NakPoll,
    }));
    let welcome = packet(Body::Welcome(Welcome {
        receiver_id: ID,
        rank,
        upstream: None,
    }));
    let offer = packet(Body::Offer(Offer {
        object_size: SIZE,
        isn: Seq(10),
        payload_size: PAYLOAD,
        window: 8,
        protocol: ProtocolId::NakPoll,
        protocol_param: 0,
        receivers: group,
        test_loss_ppm: 0,
        fec: None,
        name: "obj.bin",
    }));
    (hello, welcome, offer)
}

/// A receiver admitted, offered a 3-packet object, accepted, and
/// given every data packet.
pub(super) fn with_every_byte() -> Receiver {
    let r = holding(&[0, 1, 2]);
    assert_eq!(r.received_bytes(), SIZE);
    r
}

/// A receiver admitted, offered a 3-packet object, accepted, and
/// given the data packets `indexes`.
pub(super) fn holding(indexes: &[u32]) -> Receiver {
    let now = Instant::ZERO;
    let mut r = fresh();
    let (hello, welcome, offer) = handshake();
    for p in [&hello, &welcome, &offer] {
        assert!(r.handle_datagram(now, sender(), &mut p.clone()).is_none());
    }
    assert!(
        events(&mut r)
            .iter()
            .any(|e| matches!(e, ReceiverEvent::Offer(_)))
    );
    r.accept_offer();
    let bytes = [0u8; PAYLOAD as usize];
    for &i in indexes {
        let len = (SIZE - u64::from(i) * u64::from(PAYLOAD)).min(u64::from(PAYLOAD));
        let data = packet(Body::Data(Data {
            seq: Seq(10 + i),
            poll: POLL_NONE,
            copy: 0,
            payload: &bytes[..len as usize],
        }));
        assert!(
            r.handle_datagram(now, sender(), &mut data.clone())
                .is_some()
        );
    }
    r
}
