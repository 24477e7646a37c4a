//! How fast the object sender may send: Hunt's send-rate controller
//! (`hunt.rs`) and, with several senders on one group, their membership
//! and rate resynchronisation (`group.rs`). The fixed-rate token bucket is
//! [`crate::Pacer`]; the sender chooses among them in its `pacing.rs`.

mod finder;
mod group;
mod hunt;

pub use finder::{FinderState, RateFinder};
pub use group::{MAX_PEERS, OwnRate, RateGroup, RateGroupConfig, RateGroupStats};
pub use hunt::{
    AdaptiveTimers, ErrorSignal, HuntParams, HuntState, HuntStep, HuntTimers, RateControl,
    RateController, RateStats,
};
