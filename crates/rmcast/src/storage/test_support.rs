//! Helpers shared by the storage tests.

use rmcast_proto::{OfferInfo, ProtocolId, Seq};

pub(super) fn offer(name: &str, data: &[u8]) -> OfferInfo {
    OfferInfo {
        name: name.into(),
        size: data.len() as u64,
        protocol: ProtocolId::NakPoll,
        payload_size: 1000,
        window: 64,
        receivers: 1,
        packets: data.len().div_ceil(1000) as u32,
        isn: Seq(0),
        test_loss_ppm: 0,
        fec: None,
    }
}
