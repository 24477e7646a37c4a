use super::*;
use proptest::prelude::*;

fn lobby(receivers: u16) -> Lobby {
    Lobby::new(LobbyConfig {
        receivers,
        group: "239.77.0.1:7700".parse().unwrap(),
        session: 7,
        probe_wait: Duration::from_millis(250),
        heartbeat: Duration::from_secs(1),
        refuse_unheard: None,
    })
}

fn register(name: &str) -> Msg {
    Msg::Register {
        name: name.into(),
        data_addr: "127.0.0.1:9".parse().unwrap(),
    }
}

fn ops(l: &mut Lobby) -> Vec<LobbyOp> {
    std::iter::from_fn(|| l.poll_op()).collect()
}

fn t(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

fn probe() -> Msg {
    Msg::Probe {
        group: "239.77.0.1:7700".parse().unwrap(),
        session: 7,
        wait_ms: 250,
    }
}

fn abort_full(n: u16) -> Msg {
    Msg::Abort {
        text: format!("the session has its {n} receivers already"),
    }
}

#[test]
fn a_receiver_that_does_not_hear_the_group_waits_and_is_redirected_once_registration_closes() {
    let mut l = lobby(3);
    l.handle_connected(1);
    l.handle_msg(t(0), 1, register("a"));
    assert_eq!(ops(&mut l), [LobbyOp::Send(1, probe()), LobbyOp::Announce]);
    assert_eq!(l.poll_timeout(), Some(t(1000)));
    l.handle_msg(t(250), 1, Msg::Unheard);
    assert_eq!(ops(&mut l), [LobbyOp::ServeElsewhere(1)]);
    assert_eq!(l.poll_timeout(), Some(t(1000)));
    l.handle_timeout(t(1000));
    assert_eq!(ops(&mut l), [LobbyOp::Send(1, Msg::Heartbeat)]);
    assert_eq!(l.poll_timeout(), Some(t(2000)));
    l.handle_joined(2);
    l.handle_registration_closed();
    assert_eq!(ops(&mut l), [LobbyOp::OpenOverlay(vec![(1, "a".into())])]);
    assert!(l.is_closed());
    let control: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    l.redirect(&[1], control);
    assert_eq!(ops(&mut l), [LobbyOp::Send(1, Msg::Redirect { control })]);
    // Asked once only.
    l.handle_registration_closed();
    assert_eq!(ops(&mut l), []);
    // Kept alive while the overlay serves it, until the verdict.
    l.handle_timeout(t(2000));
    assert_eq!(ops(&mut l), [LobbyOp::Send(1, Msg::Heartbeat)]);
    l.handle_session_over(Err("rank 2 \"b\" died".into()));
    let verdict = Msg::Verdict {
        ok: false,
        text: "rank 2 \"b\" died".into(),
    };
    assert_eq!(ops(&mut l), [LobbyOp::Send(1, verdict), LobbyOp::Close(1)]);
    assert_eq!(l.poll_timeout(), None);
}

#[test]
fn a_receiver_that_heard_the_group_is_kept_alive_until_the_verdict() {
    let mut l = lobby(2);
    l.handle_connected(1);
    l.handle_msg(t(0), 1, register("a"));
    // One that connected but never registered.
    l.handle_connected(2);
    ops(&mut l);
    l.handle_joined(2);
    l.handle_registration_closed();
    assert_eq!(ops(&mut l), [], "nobody waits: no overlay");
    l.handle_timeout(t(1000));
    assert_eq!(ops(&mut l), [LobbyOp::Send(1, Msg::Heartbeat)]);
    l.handle_session_over(Ok(()));
    let verdict = Msg::Verdict {
        ok: true,
        text: String::new(),
    };
    let abort = Msg::Abort {
        text: "the session ended before this receiver was served".into(),
    };
    assert_eq!(
        ops(&mut l),
        [
            LobbyOp::Send(1, verdict),
            LobbyOp::Close(1),
            LobbyOp::Send(2, abort),
            LobbyOp::Close(2)
        ]
    );
    // Once only; newcomers are refused; no more heartbeats.
    l.handle_session_over(Err("again".into()));
    assert_eq!(ops(&mut l), []);
    l.handle_connected(3);
    assert_eq!(
        ops(&mut l),
        [LobbyOp::Send(3, abort_full(2)), LobbyOp::Close(3)]
    );
    assert_eq!(l.poll_timeout(), None);
}

#[test]
fn a_prober_that_closes_heard_the_group_and_is_not_counted() {
    let mut l = lobby(2);
    l.handle_connected(1);
    l.handle_msg(t(0), 1, register("a"));
    ops(&mut l);
    l.handle_closed(1);
    assert_eq!(ops(&mut l), []);
    l.handle_joined(2);
    l.handle_registration_closed();
    assert_eq!(ops(&mut l), [], "nobody waits: no overlay");
    l.handle_timeout(t(1000));
    assert_eq!(ops(&mut l), [], "nobody to keep alive");
    assert_eq!(l.poll_timeout(), None);
}

#[test]
fn a_waiting_receiver_that_leaves_before_the_overlay_is_uncounted() {
    let mut l = lobby(3);
    for (c, n) in [(1, "a"), (2, "b")] {
        l.handle_connected(c);
        l.handle_msg(t(0), c, register(n));
        l.handle_msg(t(250), c, Msg::Unheard);
    }
    ops(&mut l);
    l.handle_closed(1);
    assert_eq!(ops(&mut l), [LobbyOp::ServeElsewhere(1)]);
    l.handle_registration_closed();
    assert_eq!(ops(&mut l), [LobbyOp::OpenOverlay(vec![(2, "b".into())])]);
}

#[test]
fn when_every_receiver_is_waiting_the_overlay_opens_without_the_multicast_half() {
    let mut l = lobby(2);
    for (c, n) in [(1, "a"), (2, "b")] {
        l.handle_connected(c);
        l.handle_msg(t(0), c, register(n));
        l.handle_msg(t(250), c, Msg::Unheard);
    }
    let counted: Vec<LobbyOp> = ops(&mut l)
        .into_iter()
        .filter(|o| matches!(o, LobbyOp::ServeElsewhere(_) | LobbyOp::OpenOverlay(_)))
        .collect();
    assert_eq!(
        counted,
        [
            LobbyOp::ServeElsewhere(1),
            LobbyOp::ServeElsewhere(2),
            LobbyOp::OpenOverlay(vec![(1, "a".into()), (2, "b".into())]),
        ]
    );
}

#[test]
fn receivers_beyond_the_count_are_refused_saying_so() {
    let mut l = lobby(2);
    l.handle_joined(1);
    l.handle_connected(1);
    l.handle_msg(t(0), 1, register("a"));
    l.handle_msg(t(250), 1, Msg::Unheard);
    ops(&mut l);
    // 1 multicast + 1 TCP: the multicast half closes its registration.
    assert!(!l.is_closed());
    l.handle_registration_closed();
    assert_eq!(ops(&mut l), [LobbyOp::OpenOverlay(vec![(1, "a".into())])]);
    l.handle_connected(2);
    assert_eq!(
        ops(&mut l),
        [LobbyOp::Send(2, abort_full(2)), LobbyOp::Close(2)]
    );
    // One that registered before and says Unheard too late.
    let mut l = lobby(3);
    l.handle_connected(1);
    l.handle_msg(t(0), 1, register("a"));
    l.handle_joined(3);
    ops(&mut l);
    l.handle_msg(t(250), 1, Msg::Unheard);
    assert_eq!(
        ops(&mut l),
        [LobbyOp::Send(1, abort_full(3)), LobbyOp::Close(1)]
    );
}

/// A receiver says `Unheard` while the session lacks one; before the
/// multicast half hears the lobby's count, one more joins it there. Both
/// are served (the multicast half keeps everyone it admitted): one
/// receiver more than asked, rather than one sent away after it was told
/// to wait.
#[test]
fn a_receiver_told_to_wait_is_served_even_if_the_multicast_half_fills_meanwhile() {
    let mut l = lobby(2);
    l.handle_joined(1);
    l.handle_connected(1);
    l.handle_msg(t(0), 1, register("a"));
    l.handle_msg(t(250), 1, Msg::Unheard);
    ops(&mut l);
    l.handle_joined(2);
    l.handle_registration_closed();
    assert_eq!(ops(&mut l), [LobbyOp::OpenOverlay(vec![(1, "a".into())])]);
}

#[test]
fn anything_but_register_first_is_refused() {
    let mut l = lobby(2);
    l.handle_connected(1);
    l.handle_msg(t(0), 1, Msg::Unheard);
    assert_eq!(
        ops(&mut l),
        [
            LobbyOp::Send(
                1,
                Msg::Abort {
                    text: "expected Register first".into()
                }
            ),
            LobbyOp::Close(1)
        ]
    );
    // A connection the lobby does not know (refused, closed) is ignored.
    l.handle_msg(t(1), 1, register("a"));
    l.handle_msg(t(1), 99, Msg::Unheard);
    assert_eq!(ops(&mut l), []);
}

#[test]
fn a_session_that_never_forms_sends_the_waiting_away_and_names_them() {
    let mut l = lobby(3);
    l.handle_connected(1);
    l.handle_msg(t(0), 1, register("a"));
    l.handle_msg(t(250), 1, Msg::Unheard);
    ops(&mut l);
    let names = l.handle_multicast_over("gone");
    assert_eq!(names, ["a"]);
    let abort = Msg::Abort {
        text: "gone".into(),
    };
    assert_eq!(ops(&mut l), [LobbyOp::Send(1, abort), LobbyOp::Close(1)]);
    l.handle_timeout(t(1000));
    assert_eq!(ops(&mut l), [], "a receiver sent away is not kept alive");
    assert_eq!(l.poll_timeout(), None);
    assert!(l.handle_multicast_over("again").is_empty());
    l.handle_registration_closed();
    assert_eq!(ops(&mut l), []);
}

#[test]
fn without_a_tcp_half_a_receiver_that_does_not_hear_is_refused_named_and_not_waited_for() {
    let mut l = lobby(3);
    l.cfg.refuse_unheard = Some("a tree goes over multicast only".into());
    for (c, n) in [(1, "a"), (2, "b")] {
        l.handle_connected(c);
        l.handle_msg(t(0), c, register(n));
    }
    ops(&mut l);
    l.handle_msg(t(250), 2, Msg::Unheard);
    let abort = Msg::Abort {
        text: "a tree goes over multicast only".into(),
    };
    assert_eq!(
        ops(&mut l),
        [
            LobbyOp::Send(2, abort),
            LobbyOp::Close(2),
            LobbyOp::ServeElsewhere(1)
        ]
    );
    assert_eq!(l.refused(), ["b"]);
    // The multicast half takes the other two; nobody waits for an overlay.
    l.handle_joined(2);
    l.handle_registration_closed();
    assert_eq!(ops(&mut l), []);
    l.handle_session_over(Ok(()));
    let verdict = Msg::Verdict {
        ok: true,
        text: String::new(),
    };
    assert_eq!(ops(&mut l), [LobbyOp::Send(1, verdict), LobbyOp::Close(1)]);
}

/// One step of a random lobby session.
#[derive(Clone, Debug)]
enum Step {
    Connect(u8),
    Register(u8),
    Unheard(u8),
    Close(u8),
    Joined,
    RegistrationClosed,
    MulticastOver,
    SessionOver(bool),
    Tick(u16),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3u8).prop_map(Step::Connect),
        (0..3u8).prop_map(Step::Register),
        (0..3u8).prop_map(Step::Unheard),
        (0..3u8).prop_map(Step::Close),
        Just(Step::Joined),
        Just(Step::RegistrationClosed),
        Just(Step::MulticastOver),
        any::<bool>().prop_map(Step::SessionOver),
        (0..3000u16).prop_map(Step::Tick),
    ]
}

proptest! {
    /// Whatever happens in whatever order: the overlay is asked for at
    /// most once, never for a connection twice, never for more receivers
    /// than the session minus those that joined over multicast; the count
    /// given to the multicast half is the number waiting; redirects go
    /// only to connections that said `Unheard`, heartbeats and verdicts
    /// only to those that registered; at the session's end every
    /// connection still open is told something and closed, each verdict
    /// the session's; nothing is sent on a connection after it was
    /// closed, nor after the end but refusals; no deadline is past.
    #[test]
    fn random_sessions_keep_the_lobby_s_promises(
        receivers in 1..6u16,
        steps in prop::collection::vec(step(), 0..60),
        no_tcp_half in any::<bool>(),
    ) {
        let mut l = lobby(receivers);
        if no_tcp_half {
            l.cfg.refuse_unheard = Some("no TCP half".into());
        }
        let mut now = t(0);
        let (mut joined, mut opened, mut closed_conns) = (0u16, 0, Vec::new());
        let (mut unheard, mut live) = (Vec::new(), Vec::new());
        let (mut registered, mut over) = (Vec::new(), None::<bool>);
        for s in steps {
            match s {
                // A driver numbers each connection anew: a number comes
                // back only once its connection is gone.
                Step::Connect(c) if !live.contains(&u64::from(c)) => {
                    live.push(c.into());
                    closed_conns.retain(|&x| x != u64::from(c));
                    unheard.retain(|&x| x != u64::from(c));
                    registered.retain(|&x| x != u64::from(c));
                    l.handle_connected(c.into());
                }
                Step::Connect(_) => {}
                Step::Register(c) => {
                    l.handle_msg(now, c.into(), register("x"));
                    registered.push(u64::from(c));
                }
                Step::Unheard(c) => {
                    l.handle_msg(now, c.into(), Msg::Unheard);
                    unheard.push(u64::from(c));
                }
                Step::Close(c) => {
                    live.retain(|&x| x != u64::from(c));
                    l.handle_closed(c.into());
                }
                Step::Joined => {
                    joined += 1;
                    l.handle_joined(joined);
                }
                Step::RegistrationClosed => l.handle_registration_closed(),
                Step::MulticastOver => {
                    let _ = l.handle_multicast_over("over");
                }
                Step::SessionOver(ok) => {
                    let open: Vec<u64> = live.clone();
                    let first = over.is_none();
                    l.handle_session_over(if ok { Ok(()) } else { Err("no".into()) });
                    over.get_or_insert(ok);
                    let told: Vec<LobbyOp> = std::iter::from_fn(|| l.poll_op()).collect();
                    if first {
                        for c in open {
                            // Still open for the lobby: told, then closed.
                            if closed_conns.contains(&c) {
                                continue;
                            }
                            prop_assert!(
                                told.contains(&LobbyOp::Close(c)),
                                "connection {} left open at the end: {:?}", c, told
                            );
                        }
                    } else {
                        prop_assert!(told.is_empty());
                    }
                    for op in told {
                        match op {
                            LobbyOp::Send(c, Msg::Verdict { ok: v, text }) => {
                                prop_assert!(registered.contains(&c));
                                prop_assert_eq!(Some(v), over);
                                prop_assert_eq!(text.is_empty(), v);
                            }
                            LobbyOp::Send(_, Msg::Abort { .. }) => {}
                            LobbyOp::Close(c) => {
                                closed_conns.push(c);
                                live.retain(|&x| x != c);
                            }
                            op => prop_assert!(false, "{:?} at the end", op),
                        }
                    }
                }
                Step::Tick(ms) => {
                    now = now + Duration::from_millis(ms.into());
                    if l.poll_timeout().is_some_and(|d| d <= now) {
                        l.handle_timeout(now);
                    }
                }
            }
            while let Some(op) = l.poll_op() {
                match op {
                    LobbyOp::OpenOverlay(list) => {
                        prop_assert!(!no_tcp_half, "an overlay for a session without one");
                        opened += 1;
                        prop_assert_eq!(opened, 1, "the overlay asked for twice");
                        let mut ids: Vec<u64> = list.iter().map(|(c, _)| *c).collect();
                        ids.sort_unstable();
                        ids.dedup();
                        prop_assert_eq!(ids.len(), list.len());
                        prop_assert!(list.iter().all(|(c, _)| unheard.contains(c)));
                        // Each was let wait while the session lacked
                        // receivers; one that joins the multicast half
                        // meanwhile does not turn it away (the race test
                        // below), so only the TCP half's own count is bound.
                        prop_assert!(list.len() <= usize::from(receivers));
                    }
                    LobbyOp::ServeElsewhere(k) => prop_assert!(k <= receivers),
                    LobbyOp::Send(c, m) => {
                        prop_assert!(!closed_conns.contains(&c), "sent on closed {}", c);
                        if matches!(m, Msg::Redirect { .. }) {
                            prop_assert!(unheard.contains(&c));
                        }
                        if matches!(m, Msg::Heartbeat | Msg::Verdict { .. }) {
                            prop_assert!(registered.contains(&c));
                        }
                        if over.is_some() {
                            prop_assert!(matches!(m, Msg::Abort { .. }), "{:?} after the end", m);
                        }
                    }
                    LobbyOp::Close(c) => {
                        closed_conns.push(c);
                        live.retain(|&x| x != c);
                    }
                    LobbyOp::Announce => {}
                }
            }
            if let Some(d) = l.poll_timeout() {
                prop_assert!(d > now && over.is_none());
            }
        }
    }
}
