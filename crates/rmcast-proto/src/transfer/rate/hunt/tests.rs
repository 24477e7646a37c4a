//! Tests of Hunt's controller: Table 4.1's transitions, the timers, the
//! allowance, resynchronisation (kept beside `hunt.rs`, which they would
//! take over 800 lines).

use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

fn thesis(now: Instant) -> RateController {
    RateController::new(HuntParams::thesis(), now)
}

#[test]
fn starts_in_increase_with_table_c1_values() {
    let c = thesis(at(0));
    assert_eq!(c.state(), HuntState::Increase);
    assert_eq!(c.spacing(), Duration::from_micros(2000));
    assert_eq!(c.backoff(), 1);
    assert_eq!(c.next_deadline(), Some(at(20 * MS)));
    assert_eq!(c.increase_timer(), Duration::from_millis(20));
    assert_eq!(c.decrease_timer(), Duration::from_millis(20));
}

#[test]
fn table_4_1_increase_i_shortens_spacing_and_rearms() {
    let mut c = thesis(at(0));
    // Before the timer: nothing.
    c.on_timer(at(20 * MS - 1));
    assert_eq!(c.spacing(), Duration::from_micros(2000));
    // Increase/I: one unit off, still Increase, timer re-armed from now.
    c.on_timer(at(20 * MS));
    assert_eq!(c.state(), HuntState::Increase);
    assert_eq!(c.spacing(), Duration::from_micros(1960));
    assert_eq!(c.next_deadline(), Some(at(40 * MS)));
    assert_eq!(c.stats().increases, 1);
}

#[test]
fn table_4_1_increase_i_keeps_spacing_positive() {
    let mut c = RateController::new(
        HuntParams {
            initial_spacing: Duration::from_micros(80),
            ..HuntParams::thesis()
        },
        at(0),
    );
    for k in 1..10 {
        c.on_timer(at(k * 20 * MS));
    }
    // The thesis's floor here is one unit (40 µs).
    assert_eq!(c.spacing(), Duration::from_micros(40));
    assert_eq!(c.state(), HuntState::Increase);
}

#[test]
fn table_4_1_increase_e_enters_decrease_with_twice_the_last_increase() {
    let mut c = thesis(at(0));
    assert!(c.on_error(at(5 * MS), ErrorSignal::Last));
    assert_eq!(c.state(), HuntState::Decrease);
    // Last increase 1 unit; this one 2 units = 80 µs.
    assert_eq!(c.spacing(), Duration::from_micros(2080));
    assert_eq!(c.backoff(), 2);
    // The increase timer is cleared, the decrease timer set.
    assert_eq!(c.next_deadline(), Some(at(25 * MS)));
    c.on_timer(at(20 * MS));
    assert_eq!(c.spacing(), Duration::from_micros(2080), "no increase");
}

#[test]
fn table_4_1_decrease_e_doubles_the_step_and_restarts_the_timer() {
    let mut c = thesis(at(0));
    c.on_error(at(MS), ErrorSignal::Last); // +80 µs
    c.on_error(at(2 * MS), ErrorSignal::Exp { sent_at: at(0) }); // +160 µs
    assert_eq!(c.state(), HuntState::Decrease);
    assert_eq!(c.spacing(), Duration::from_micros(2000 + 80 + 160));
    assert_eq!(c.next_deadline(), Some(at(22 * MS)));
    c.on_error(at(3 * MS), ErrorSignal::SendFailure); // +320 µs
    assert_eq!(c.spacing(), Duration::from_micros(2000 + 80 + 160 + 320));
    assert_eq!(c.backoff(), 8);
    assert_eq!(c.next_deadline(), Some(at(23 * MS)));
}

#[test]
fn table_4_1_decrease_d_resets_multiplier_and_returns_to_increase() {
    let mut c = thesis(at(0));
    c.on_error(at(0), ErrorSignal::Last);
    c.on_error(at(MS), ErrorSignal::Last);
    assert_eq!(c.backoff(), 4);
    c.on_timer(at(21 * MS - 1));
    assert_eq!(c.state(), HuntState::Decrease);
    // Decrease/D: quiet for 20 ms.
    c.on_timer(at(21 * MS));
    assert_eq!(c.state(), HuntState::Increase);
    assert_eq!(c.backoff(), 1);
    assert_eq!(c.next_deadline(), Some(at(41 * MS)));
    // The spacing itself does not change on D.
    assert_eq!(c.spacing(), Duration::from_micros(2000 + 80 + 160));
    // The next error starts the doubling afresh: +2 units.
    c.on_error(at(42 * MS), ErrorSignal::Last);
    assert_eq!(c.spacing(), Duration::from_micros(2000 + 80 + 160 + 80));
}

#[test]
fn backoff_step_doubles_on_each_error_in_a_row() {
    let mut c = thesis(at(0));
    let mut expected = 2000;
    for k in 1..=6 {
        c.on_error(at(k), ErrorSignal::Last);
        expected += 40 << k;
        assert_eq!(c.spacing(), Duration::from_micros(expected), "error {k}");
    }
}

#[test]
fn stale_exp_errors_do_not_back_off_twice() {
    let mut c = RateController::new(HuntParams::adaptive(), at(0));
    let before = c.spacing();
    assert!(c.on_error(
        at(10 * MS),
        ErrorSignal::Exp {
            sent_at: at(9 * MS)
        }
    ));
    let after = c.spacing();
    assert!(after > before);
    // Lost before the back-off: counted, ignored.
    assert!(!c.on_error(
        at(11 * MS),
        ErrorSignal::Exp {
            sent_at: at(9 * MS)
        }
    ));
    assert_eq!(c.spacing(), after);
    assert_eq!(c.stats().stale_errors, 1);
    // Sent after it but within one RTT (1 ms, the initial estimate): it
    // met the queue the old spacing built.
    let exp = |ms: u64| ErrorSignal::Exp {
        sent_at: at(ms * MS),
    };
    assert!(!c.on_error(at(12 * MS), exp(10)));
    assert_eq!(c.stats().stale_errors, 2);
    // Sent an RTT after it: a fresh error, Decrease/E.
    assert!(c.on_error(at(12 * MS), exp(11)));
    assert!(c.spacing() > after);
    // Timeouts always count.
    assert!(c.on_error(at(12 * MS), ErrorSignal::Last));
}

#[test]
fn resync_adopts_the_spacing_in_increase_with_multiplier_one() {
    let mut c = thesis(at(0));
    c.on_error(at(MS), ErrorSignal::Last);
    c.on_error(at(2 * MS), ErrorSignal::Last);
    assert_eq!(c.state(), HuntState::Decrease);
    assert_eq!(c.backoff(), 4);
    c.resync(at(3 * MS), Duration::from_micros(1500));
    assert_eq!(c.state(), HuntState::Increase);
    assert_eq!(c.backoff(), 1);
    assert_eq!(c.spacing(), Duration::from_micros(1500));
    // A fresh increase timer from now; the decrease timer is gone.
    assert_eq!(c.next_deadline(), Some(at(23 * MS)));
    c.on_timer(at(23 * MS));
    assert_eq!(c.spacing(), Duration::from_micros(1460));
    assert_eq!(c.stats().resyncs, 1);
    // The next error starts the doubling afresh: +2 units.
    c.on_error(at(24 * MS), ErrorSignal::Last);
    assert_eq!(c.spacing(), Duration::from_micros(1540));
}

#[test]
fn resync_clamps_to_the_spacing_bounds() {
    let mut c = thesis(at(0));
    c.resync(at(0), Duration::ZERO);
    assert_eq!(c.spacing(), Duration::from_micros(40));
    c.resync(at(0), Duration::from_secs(10));
    assert_eq!(c.spacing(), Duration::from_secs(1));
}

#[test]
fn resync_keeps_the_search_fine_once_an_error_was_seen() {
    let p = HuntParams {
        initial_spacing: Duration::from_micros(256),
        ..HuntParams::adaptive()
    };
    // Still climbing: the coarse step (1/32).
    let mut fresh = RateController::new(p.clone(), at(0));
    fresh.resync(at(0), Duration::from_micros(512));
    fresh.try_take(at(0));
    while fresh.try_take(at(0)) {}
    fresh.on_timer(fresh.next_deadline().unwrap());
    assert_eq!(fresh.spacing(), Duration::from_micros(512 - 16));
    // After an error: the fine probe (1/256) from the new spacing.
    let mut seen = RateController::new(p, at(0));
    seen.on_error(at(0), ErrorSignal::Last);
    seen.resync(at(0), Duration::from_micros(512));
    while seen.try_take(at(0)) {}
    seen.on_timer(seen.next_deadline().unwrap());
    assert_eq!(seen.spacing(), Duration::from_micros(512 - 2));
}

#[test]
fn group_errors_back_off_once_per_round_trip() {
    let mut c = RateController::new(HuntParams::adaptive(), at(0));
    assert!(c.on_error(at(10 * MS), ErrorSignal::Group));
    // The initial RTT estimate is 1 ms: NACKs of the same overflow.
    assert!(!c.on_error(at(10 * MS + 500 * US), ErrorSignal::Group));
    assert_eq!(c.stats().stale_errors, 1);
    assert!(c.on_error(at(11 * MS), ErrorSignal::Group));
    assert_eq!(c.stats().backoffs, 2);
}

#[test]
fn thesis_variant_acts_on_every_error() {
    let mut c = thesis(at(0));
    c.on_error(
        at(10 * MS),
        ErrorSignal::Exp {
            sent_at: at(9 * MS),
        },
    );
    assert!(c.on_error(at(11 * MS), ErrorSignal::Exp { sent_at: at(0) }));
}

#[test]
fn adaptive_timers_follow_rtt_group_and_spacing() {
    let mut c = RateController::new(
        HuntParams {
            initial_spacing: Duration::from_micros(100),
            ..HuntParams::adaptive()
        },
        at(0),
    );
    c.set_rtt(Duration::from_millis(1));
    // 8 RTTs + 16 spacings.
    assert_eq!(c.increase_timer(), Duration::from_micros(8_000 + 1_600));
    // (4 + log2 1) RTTs + 16 spacings.
    assert_eq!(c.decrease_timer(), Duration::from_micros(4_000 + 1_600));
    c.set_group_size(16);
    assert_eq!(c.decrease_timer(), Duration::from_micros(8_000 + 1_600));
    c.set_rtt(Duration::ZERO);
    // Clamped to the 500 µs floor... not here: 16 spacings = 1.6 ms.
    assert_eq!(c.increase_timer(), Duration::from_micros(1_600));
}

#[test]
fn rtt_estimate_jumps_up_and_decays_down() {
    let mut c = RateController::new(HuntParams::adaptive(), at(0));
    c.on_rtt_sample(Duration::from_millis(8));
    assert_eq!(c.rtt(), Duration::from_millis(8));
    c.on_rtt_sample(Duration::ZERO);
    assert_eq!(c.rtt(), Duration::from_millis(7));
}

#[test]
fn allowance_lets_a_burst_go_then_paces() {
    let mut c = RateController::new(
        HuntParams {
            initial_spacing: Duration::from_micros(100),
            burst_packets: 16,
            ..HuntParams::adaptive()
        },
        at(0),
    );
    let now = at(MS);
    let mut burst = 0;
    while c.try_take(now) {
        burst += 1;
    }
    assert_eq!(burst, 16);
    // Then one per spacing.
    let next = c.ready_at();
    assert_eq!(next, now + Duration::from_micros(100));
    assert!(c.try_take(next));
    assert!(!c.try_take(next));
}

#[test]
fn allowance_holds_the_long_run_rate() {
    let mut c = RateController::new(
        HuntParams {
            initial_spacing: Duration::from_micros(50),
            burst_packets: 32,
            ..HuntParams::adaptive()
        },
        at(0),
    );
    let mut now = at(0);
    let mut sent = 0u64;
    while now < at(1_000 * MS) {
        if c.try_take(now) {
            sent += 1;
        } else {
            now = c.ready_at();
        }
    }
    // 20,000 per second plus one burst.
    assert!((20_000..=20_032).contains(&sent), "sent {sent}");
}

#[test]
fn errors_at_a_spacing_of_two_rtts_are_background_loss() {
    // 1 ms RTT: from a 2 ms spacing on, no receiver can be overrun.
    let p = HuntParams {
        initial_spacing: Duration::from_micros(2500),
        ..HuntParams::adaptive()
    };
    let mut c = RateController::new(p, at(0));
    // The initial RTT is a guess: no error is background before a sample.
    assert!(c.on_error(at(MS), ErrorSignal::Last));
    c.resync(at(MS), Duration::from_micros(2500));
    c.on_rtt_sample(Duration::from_millis(1));
    assert!(!c.on_error(at(MS), ErrorSignal::Last));
    assert_eq!(c.spacing(), Duration::from_micros(2500));
    assert_eq!(c.state(), HuntState::Increase);
    assert_eq!(c.stats().background_errors, 1);
    assert_eq!(c.stats().backoffs, 1);
    // Below it an error is an overrun again.
    c.resync(at(2 * MS), Duration::from_micros(1500));
    assert!(c.on_error(at(3 * MS), ErrorSignal::Last));
    assert!(c.spacing() > Duration::from_micros(1500));
    // The thesis acts on every error.
    let mut t = RateController::new(
        HuntParams {
            initial_spacing: Duration::from_micros(2500),
            ..HuntParams::thesis()
        },
        at(0),
    );
    t.on_rtt_sample(Duration::from_millis(1));
    assert!(t.on_error(at(MS), ErrorSignal::Last));
}

#[test]
fn a_spacing_above_the_background_spacing_comes_back_down_in_halving_steps() {
    let p = HuntParams {
        initial_spacing: Duration::from_micros(1500),
        ..HuntParams::adaptive()
    };
    let mut c = RateController::new(p, at(0));
    c.on_rtt_sample(Duration::from_millis(1));
    // An overrun at 1.5 ms, then the spacing is put far above 2 RTTs.
    assert!(c.on_error(at(MS), ErrorSignal::Last));
    c.resync(at(2 * MS), Duration::from_millis(50));
    for _ in 0..64 {
        // A sender with more to send than the allowance lets go.
        let now = c.next_deadline().unwrap();
        while c.try_take(now) {}
        c.on_timer(now);
    }
    assert!(c.spacing() < Duration::from_millis(3), "{:?}", c.spacing());
}

#[derive(Clone, Debug)]
enum Op {
    Timer(u64),
    Exp(u64),
    Last(u64),
    SendFailure(u64),
    Group(u64),
    Resync(u64),
    Rtt(u64),
    Take(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..50 * MS).prop_map(Op::Timer),
        (0..50 * MS).prop_map(Op::Exp),
        (0..50 * MS).prop_map(Op::Last),
        (0..50 * MS).prop_map(Op::SendFailure),
        (0..50 * MS).prop_map(Op::Group),
        (0..20 * MS).prop_map(Op::Resync),
        (0..100 * MS).prop_map(Op::Rtt),
        (0..MS).prop_map(Op::Take),
    ]
}

fn params() -> impl Strategy<Value = HuntParams> {
    (
        1..10_000 * US,
        1..1_000 * US,
        1..100 * MS,
        any::<bool>(),
        1..128u32,
        1..64u32,
    )
        .prop_map(|(init, min, max, thesis, divisor, burst)| {
            let base = if thesis {
                HuntParams::thesis()
            } else {
                HuntParams::adaptive()
            };
            HuntParams {
                initial_spacing: Duration::from_nanos(init),
                min_spacing: Duration::from_nanos(min),
                max_spacing: Duration::from_nanos(max),
                step: if divisor % 2 == 0 {
                    base.step
                } else {
                    HuntStep::Proportional { divisor }
                },
                burst_packets: burst,
                ..base
            }
        })
}

proptest! {
    #[test]
    fn spacing_stays_within_bounds(p in params(), ops in prop::collection::vec(op(), 0..400)) {
        let mut c = RateController::new(p.clone(), at(0));
        let min = p.min_spacing.max(Duration::from_nanos(1));
        let max = p.max_spacing.max(min);
        let mut now = 0u64;
        for o in ops {
            match o {
                Op::Timer(dt) => { now += dt; c.on_timer(at(now)); }
                Op::Exp(back) => { c.on_error(at(now), ErrorSignal::Exp { sent_at: at(now.saturating_sub(back)) }); }
                Op::Last(dt) => { now += dt; c.on_error(at(now), ErrorSignal::Last); }
                Op::SendFailure(dt) => { now += dt; c.on_error(at(now), ErrorSignal::SendFailure); }
                Op::Group(dt) => { now += dt; c.on_error(at(now), ErrorSignal::Group); }
                Op::Resync(s) => c.resync(at(now), Duration::from_nanos(s)),
                Op::Rtt(r) => c.on_rtt_sample(Duration::from_nanos(r)),
                Op::Take(dt) => { now += dt; c.try_take(at(now)); }
            }
            prop_assert!(c.spacing() >= min && c.spacing() <= max, "{:?}", c.spacing());
            prop_assert!(c.spacing() > Duration::ZERO);
            let r = c.rate_pps();
            prop_assert!(r.is_finite() && r > 0.0);
            prop_assert!(c.next_deadline().is_some());
            let fixed = matches!(p.timers, HuntTimers::Fixed { .. });
            prop_assert!(fixed || c.increase_timer() > Duration::ZERO);
        }
    }

    #[test]
    fn backoff_resets_after_a_quiet_decrease_period(p in params(), errors in 1..20usize) {
        // Every error acts (none is background loss at a wide spacing).
        let p = HuntParams { background_spacing_rtts: None, ..p };
        let mut c = RateController::new(p, at(0));
        let mut now = MS;
        for _ in 0..errors {
            now += 1;
            c.on_error(at(now), ErrorSignal::Last);
        }
        prop_assert_eq!(c.state(), HuntState::Decrease);
        prop_assert!(c.backoff() >= 2);
        let d = c.next_deadline().unwrap();
        c.on_timer(d);
        prop_assert_eq!(c.state(), HuntState::Increase);
        prop_assert_eq!(c.backoff(), 1);
    }
}
