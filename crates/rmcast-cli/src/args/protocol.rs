//! The enumerated flags: the protocol, and how it repairs, paces, treats
//! laggards and shapes its acknowledgement tree.

use clap::ValueEnum;

/// Reliability protocol.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Chosen for the group once it has registered, from a table measured
    /// in the simulator and checked on real runs (docs/auto.md): nak-poll,
    /// with FEC parity (64:2) from 32 receivers, a window of 2048 and 8
    /// blocks interleaved (64:2:8) from 300, a window of 8192 from 2,000,
    /// three parity packets per block (64:3:8) from 4,000, and a window of
    /// 16384 from 8,000; flags given on the command line are kept.
    /// --explain prints the choice and why.
    Auto,
    /// Every receiver acknowledges every packet (simple, N acks per packet).
    Ack,
    /// Receivers NAK gaps; every i-th packet polls all for an ack (fastest).
    NakPoll,
    /// Receivers take turns acknowledging: one ack per packet; window > receivers.
    Ring,
    /// Acks relayed along chains of --tree-height receivers (or a binary tree).
    Tree,
    /// No multicast: the sender writes to every receiver over TCP (MultiTCP).
    TcpDirect,
    /// No multicast: store-and-forward TCP tree of --fanout children per node.
    TcpTree,
    /// No multicast: store-and-forward binomial tree over TCP.
    TcpBinomial,
    /// No multicast: a pipelined TCP chain through all receivers.
    TcpChain,
    /// No multicast: two pipelined binary TCP trees fed alternate segments.
    TcpBintree,
    /// No multicast: the binomial pipeline over TCP (every node sends and
    /// receives at once, log2 N hops).
    TcpPipeline,
}

impl Protocol {
    /// The UDP multicast protocol, or `None` for a TCP overlay.
    pub fn multicast(self) -> Option<rmcast::ProtocolId> {
        Some(match self {
            // Provisional: the sender chooses once the group is known.
            Protocol::Auto | Protocol::NakPoll => rmcast::ProtocolId::NakPoll,
            Protocol::Ack => rmcast::ProtocolId::Ack,
            Protocol::Ring => rmcast::ProtocolId::Ring,
            Protocol::Tree => rmcast::ProtocolId::Tree,
            _ => return None,
        })
    }

    /// The TCP overlay shape, or `None` for a multicast protocol.
    pub fn overlay(self, fanout: u32) -> Option<rmcast::overlay::OverlayShape> {
        use rmcast::overlay::OverlayShape as S;
        Some(match self {
            Protocol::TcpDirect => S::Direct,
            Protocol::TcpTree => S::Tree { fanout },
            Protocol::TcpBinomial => S::Binomial,
            Protocol::TcpChain => S::Chain,
            Protocol::TcpBintree => S::Bintree,
            Protocol::TcpPipeline => S::Pipeline,
            _ => return None,
        })
    }
}

/// How losses are repaired.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairArg {
    /// Resend only what some receiver lacks (unicast if only one lacks it).
    Selective,
    /// Resend everything from the first lost packet (the paper's scheme).
    GoBackN,
}

/// How the sender limits the rate at which data enters the network.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateControlArg {
    /// Hunt's send-rate flow control: start at --rate (default 500
    /// packets/s), shorten the spacing between packets while no receiver
    /// reports a loss, back off (doubling the step on each loss in a row)
    /// when one does, and settle just below what the slowest receiver can
    /// take in. For groups whose slowest member, not the wire, limits.
    Hunt,
    /// A constant --rate (a token bucket); without --rate, unpaced.
    Fixed,
    /// No pacing: the window alone limits the sender; --rate is refused.
    Off,
    /// Find the path's rate: pace at the group's measured delivery rate
    /// (what every receiver acknowledged, over 10 ms or a window's time),
    /// doubling from 1 Gbit/s while the path keeps up, then probing a
    /// quarter above it now and then; --rate is refused.
    Find,
}

/// What the sender does with a receiver that falls far behind the group.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaggardArg {
    /// Wait for it: the whole group goes at its pace, and every receiver
    /// gets the file.
    Wait,
    /// Eject it once it has been half a window behind the group's median
    /// receiver for --laggard-after: it is named as failed (exit 1), and
    /// the others go on at their own pace.
    Eject,
    /// Move it, by the same rule, to a TCP catch-up with the sender: it
    /// fetches the rest of the file there while the group goes on at its
    /// own pace, and still gets a verified copy.
    Tcp,
}

/// Shape of the tree protocol's acknowledgement tree.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeArg {
    /// Chains of --tree-height receivers; the sender hears the chain heads.
    Flat,
    /// A binary tree growing with the group (log2 N levels).
    Binary,
}
