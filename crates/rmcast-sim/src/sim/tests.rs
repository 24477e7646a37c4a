//! The event loop's own tests: addresses, event and timer order, links.

use super::*;

#[test]
fn host_addresses_round_trip_up_to_a_thousand_receivers() {
    for h in 0..=1000 {
        assert_eq!(host_of(host_addr(h), 1001), Some(h));
    }
    assert_eq!(host_of(intruder_addr(), 1001), None);
}

#[test]
fn earliest_event_pops_first_and_ties_keep_insertion_order() {
    let mut heap = BinaryHeap::new();
    for (at, seq) in [(5, 1), (3, 2), (5, 0), (3, 3)] {
        heap.push(Scheduled {
            at,
            seq,
            ev: Ev::Garbage,
        });
    }
    let order: Vec<(u64, u64)> = std::iter::from_fn(|| heap.pop().map(|s| (s.at, s.seq))).collect();
    assert_eq!(order, vec![(3, 2), (3, 3), (5, 0), (5, 1)]);
}

#[test]
fn events_for_now_timers_and_the_heap_pop_in_one_time_then_insertion_order() {
    let sc = Scenario::default();
    let mut sim = Sim::new(&sc, 1).expect("default scenario builds");
    while sim.pop_event().is_some() {}
    let seq0 = sim.seq;
    sim.now = 10;
    // Pushed in this order: seq 1..=5.
    sim.push(20, Ev::Garbage); // heap
    sim.push(10, Ev::Cpu(1)); // the current instant's queue
    sim.push_timer(1, 10, 7); // timers
    sim.push(10, Ev::Cpu(3)); // queue, after the timer
    sim.push(15, Ev::Writable(4)); // heap
    let mut order = Vec::new();
    while let Some(e) = sim.pop_event() {
        sim.now = e.at;
        // An event pushed for the instant being handled comes after
        // everything already due then.
        if let Ev::Cpu(1) = e.ev {
            sim.push(10, Ev::Cpu(9));
        }
        order.push((e.at, e.seq - seq0));
    }
    assert_eq!(
        order,
        vec![(10, 2), (10, 3), (10, 4), (10, 6), (15, 5), (20, 1)]
    );
}

#[test]
fn a_fan_out_is_one_event_that_reaches_its_hosts_in_order() {
    let sc = Scenario::default();
    let mut sim = Sim::new(&sc, 1).expect("default scenario builds");
    while sim.pop_event().is_some() {}
    sim.push_fanout(5, 0, 0, &[3, 1, 2]);
    sim.push_fanout(5, 0, 0, &[4]);
    sim.push_fanout(5, 0, 0, &[]);
    let first = sim.pop_event().expect("the fan-out");
    let Ev::AtHosts(i) = first.ev else {
        panic!("several hosts travel as one event: {:?}", first.ev);
    };
    assert_eq!(sim.fanouts[i as usize].hosts, [3, 1, 2]);
    let second = sim.pop_event().expect("the lone host");
    assert!(matches!(second.ev, Ev::AtHost(4, 0, 0)), "{:?}", second.ev);
    assert!(first.seq < second.seq);
    assert!(sim.pop_event().is_none(), "an empty fan-out is no event");
}

#[test]
fn link_drops_tail_when_full_and_drains_at_its_rate() {
    // 1000 wire bytes at 8 Mbit/s take 1 ms.
    let mut link = Link::new(2500);
    assert_eq!(link.admit(0, 1000, 8_000_000), Some(1_000_000));
    assert_eq!(link.admit(0, 1000, 8_000_000), Some(2_000_000));
    assert_eq!(link.admit(0, 1000, 8_000_000), None);
    // After the first frame left there is room again.
    assert_eq!(link.admit(1_000_000, 1000, 8_000_000), Some(3_000_000));
    assert!(link.max_bytes <= 2500);
}

#[test]
fn gilbert_elliott_chain_loses_about_its_mean() {
    let model = LossModel::bursty(0.05, 5.0);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut bad = false;
    let lost = (0..200_000)
        .filter(|_| data_lost(&model, &mut rng, &mut bad, 1))
        .count();
    let share = lost as f64 / 200_000.0;
    assert!((0.04..0.06).contains(&share), "lost {share}");
}

#[test]
fn a_long_silence_ends_a_burst_as_time_passes() {
    // Bursts of ~5 frames: after 10,000 frame times in the bad state the
    // chain has forgotten where it started and loses at its mean.
    let model = LossModel::bursty(0.05, 5.0);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let lost = (0..20_000)
        .filter(|_| {
            let mut bad = true;
            data_lost(&model, &mut rng, &mut bad, 10_000)
        })
        .count();
    let share = lost as f64 / 20_000.0;
    assert!((0.04..0.06).contains(&share), "lost {share}");
    // One step later the same chain is still almost surely bad.
    let mut bad = true;
    let still = (0..1000)
        .filter(|_| {
            bad = true;
            data_lost(&model, &mut rng, &mut bad, 1)
        })
        .count();
    assert!(still > 700, "{still}");
}
