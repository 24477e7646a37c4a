//! `--protocol auto` in the simulator (issue 18): the sender chooses the
//! data phase once the group has registered, every receiver still gets
//! every byte under loss, and what runs is the table's row for the group
//! that came (FEC or not, proactive parity or not, the window), keeping
//! what the configuration fixed.

mod common;

use common::{PACKET, check, scenario};
use rmcast_proto::auto::{TABLE, row_for};
use rmcast_proto::{AutoConfig, ProtocolId};
use rmcast_sim::{LossModel, RunReport, Scenario};

fn auto(receivers: u16, size: u64, loss: f64, seed: u64) -> Scenario {
    let mut s = scenario(
        ProtocolId::NakPoll,
        receivers,
        size,
        LossModel::Bernoulli(loss),
        seed,
    );
    // The defaults a user gets: auto picks the window too.
    s.config.window = rmcast_proto::SenderConfig::default().window;
    s.config.auto = Some(AutoConfig::default());
    s
}

fn verified(r: &RunReport, what: &str) {
    assert!(r.outcome.ok, "{what}: {:?}", r.outcome);
    assert!(r.receivers.iter().all(|x| x.hash_ok), "{what}");
}

#[test]
fn each_group_size_runs_its_row_and_everyone_verifies() {
    let size = 600 * (PACKET as u64 - 28);
    for (n, seed) in [
        (1u16, 11),
        (2, 12),
        (8, 13),
        (40, 14),
        (300, 15),
        (2000, 16),
        (4000, 17),
    ] {
        let row = &TABLE[row_for(n)];
        let what = format!("auto with {n} receivers, 1 % loss, seed {seed}");
        let r = check(&auto(n, size, 0.01, seed));
        verified(&r, &what);
        match row.fec {
            None => {
                assert_eq!(r.sender.parity_packets, 0, "{what}: no FEC in row {row:?}");
                assert!(r.retransmitted_packets > 0, "{what}: losses resent");
            }
            Some((k, p, _)) => {
                assert!(r.sender.parity_packets > 0, "{what}: parity repairs");
                // Proactive parity goes with every block, lost or not (a
                // block holds at most K packets).
                let blocks = r.data_packets / u64::from(k);
                assert!(
                    r.sender.parity_packets >= blocks * u64::from(p),
                    "{what}: {} parity for {blocks} blocks of {k}:{p}",
                    r.sender.parity_packets
                );
                // A stall poll (a timeout) and a re-poll of a member
                // whose answer went missing resend one packet each to
                // poll with; nothing else is resent.
                assert!(
                    r.retransmitted_packets <= r.sender.timeouts + r.sender.repolls,
                    "{what}: FEC repairs by parity only ({} resent, {} timeouts, {} re-polls)",
                    r.retransmitted_packets,
                    r.sender.timeouts,
                    r.sender.repolls
                );
            }
        }
    }
}

#[test]
fn a_row_with_proactive_parity_sends_it_on_a_clean_lan_too() {
    // From 32 receivers: two parity packets with every block, lost or not.
    let n = 40;
    let row = &TABLE[row_for(n)];
    let shape = row.fec_shape().expect("FEC from 32 receivers");
    let r = check(&auto(n, 2_000_000, 0.0, 3));
    verified(&r, "clean auto");
    assert_eq!(r.retransmitted_packets, 0);
    assert_eq!(
        r.sender.parity_packets,
        u64::from(shape.blocks(r.data_packets as u32)) * u64::from(shape.proactive)
    );
}

#[test]
fn what_the_configuration_fixed_is_kept() {
    // The FEC was fixed as off: 40 receivers under loss are repaired by
    // resending, as the user asked, not by the row's parity.
    let mut s = auto(40, 500_000, 0.02, 21);
    s.config.auto = Some(AutoConfig {
        keep_fec: true,
        ..AutoConfig::default()
    });
    s.config.fec = None;
    let r = check(&s);
    verified(&r, "auto, FEC kept off");
    assert_eq!(r.sender.parity_packets, 0);
    assert!(r.retransmitted_packets > 0);
}
