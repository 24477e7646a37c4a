//! The lobby of a hybrid session, sans-IO: who registered over TCP, who
//! heard the multicast session, who waits for the TCP overlay, and when to
//! open it.
//!
//! A hybrid session serves the receivers that hear its multicast group
//! over multicast and the others over a TCP overlay, in one send. The
//! multicast half is an ordinary [`crate::Sender`]; this machine runs the
//! TCP registrations beside it. A driver (`rmcast::hybrid`) accepts the
//! connections, does their key exchange, and hands this machine what they
//! say ([`Lobby::handle_msg`]) and when they close
//! ([`Lobby::handle_closed`]), plus the multicast half's news
//! ([`Lobby::handle_joined`], [`Lobby::handle_registration_closed`],
//! [`Lobby::handle_multicast_over`]); it carries out what
//! [`Lobby::poll_op`] asks and wakes at [`Lobby::poll_timeout`].
//!
//! The exchange on each connection (`docs/wire-format.md`, overlay types
//! 13–15 and 17): `Register` → `Probe` (the group, the session, how long to
//! listen); then either the receiver hears the group and takes the object
//! over multicast, or says `Unheard` and is sent a `Redirect` to the
//! overlay once registration closes. Either way its connection stays
//! open, kept alive by `Heartbeat`s, until both halves are over
//! ([`Lobby::handle_session_over`]): it then gets the session's `Verdict`
//! (every receiver verified, or why not) and closes, so every receiver
//! can exit with the group's outcome. A connection that closes before
//! it said `Unheard` heard the group (or went away). Whoever comes when
//! the session already has its receivers gets an `Abort` saying so.

use crate::Instant;
use rmcast_wire::overlay::Msg;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// A lobby connection, as the driver numbers them.
pub type ConnId = u64;

/// How the lobby runs.
#[derive(Clone, Debug)]
pub struct LobbyConfig {
    /// Receivers the session waits for, multicast and TCP together.
    pub receivers: u16,
    /// The multicast group the `Probe` names.
    pub group: SocketAddr,
    /// The multicast session's id (its `Hello`s carry it).
    pub session: u64,
    /// How long a receiver listens for the group.
    pub probe_wait: Duration,
    /// How often registered receivers hear from the sender.
    pub heartbeat: Duration,
    /// The session has no TCP half (a directory tree: the overlay carries
    /// one file): a receiver that does not hear the group is refused with
    /// this text, named in [`Lobby::refused`], and not waited for.
    pub refuse_unheard: Option<String>,
}

/// What the lobby asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LobbyOp {
    /// Write `msg` on connection `conn`.
    Send(ConnId, Msg),
    /// Close connection `conn` (after what was sent on it).
    Close(ConnId),
    /// Announce the multicast session again at once
    /// ([`crate::Sender::announce_again`]): a receiver starts listening.
    Announce,
    /// This many receivers are served over TCP so far
    /// ([`crate::Sender::serve_elsewhere`]).
    ServeElsewhere(u16),
    /// Registration closed: open the TCP overlay for these connections
    /// (in the order they said `Unheard`), then [`Lobby::redirect`] them
    /// to it. Asked at most once.
    OpenOverlay(Vec<(ConnId, String)>),
}

/// Where one connection stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Stage {
    /// Connected (key exchange done); no `Register` yet.
    Connected,
    /// Asked to probe the group.
    Probing,
    /// Did not hear the group: waits for the overlay.
    Waiting,
    /// Sent to the overlay: waits for the session's verdict.
    Redirected,
    /// Refused or sent away: nothing more to say.
    Done,
}

#[derive(Debug)]
struct Conn {
    stage: Stage,
    name: String,
}

/// The lobby's state machine (see the module's documentation).
#[derive(Debug)]
pub struct Lobby {
    cfg: LobbyConfig,
    conns: BTreeMap<ConnId, Conn>,
    /// Connections waiting for the overlay, in the order they said so.
    waiting: Vec<ConnId>,
    /// Receivers that did not hear the group of a session without a TCP
    /// half, refused.
    refused: Vec<String>,
    /// Receivers the multicast half admitted.
    joined: u16,
    /// Registration is over (the overlay was asked for, or the session
    /// ended): newcomers are refused.
    closed: bool,
    ops: std::collections::VecDeque<LobbyOp>,
    next_beat: Option<Instant>,
    /// The session is over: every verdict is sent.
    over: bool,
}

impl Lobby {
    /// A lobby for the session of `cfg`.
    #[must_use]
    pub fn new(cfg: LobbyConfig) -> Self {
        Self {
            cfg,
            conns: BTreeMap::new(),
            waiting: Vec::new(),
            refused: Vec::new(),
            joined: 0,
            closed: false,
            ops: std::collections::VecDeque::new(),
            next_beat: None,
            over: false,
        }
    }

    /// Receivers waiting for the overlay.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The names of the receivers refused for not hearing the group of a
    /// session without a TCP half ([`LobbyConfig::refuse_unheard`]).
    #[must_use]
    pub fn refused(&self) -> &[String] {
        &self.refused
    }

    /// Whether registration is over.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// A connection is open (its key exchange done, if keyed).
    pub fn handle_connected(&mut self, conn: ConnId) {
        if self.closed || self.over {
            self.refuse(conn);
            return;
        }
        self.conns.insert(
            conn,
            Conn {
                stage: Stage::Connected,
                name: String::new(),
            },
        );
    }

    /// A frame from connection `conn`.
    pub fn handle_msg(&mut self, now: Instant, conn: ConnId, msg: Msg) {
        let elsewhere = self.elsewhere();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        match (&c.stage, msg) {
            (Stage::Connected, Msg::Register { name, .. }) => {
                c.name = name;
                if self.closed {
                    self.refuse(conn);
                    return;
                }
                c.stage = Stage::Probing;
                let probe = Msg::Probe {
                    group: self.cfg.group,
                    session: self.cfg.session,
                    wait_ms: u32::try_from(self.cfg.probe_wait.as_millis()).unwrap_or(u32::MAX),
                };
                self.ops.push_back(LobbyOp::Send(conn, probe));
                self.ops.push_back(LobbyOp::Announce);
                // From now on it hears from the sender every heartbeat,
                // whichever half serves it, until the verdict.
                self.arm_beat(now);
            }
            (Stage::Probing, Msg::Unheard) => {
                let full = usize::from(self.joined) + elsewhere >= usize::from(self.cfg.receivers);
                if self.closed || full {
                    self.refuse(conn);
                    return;
                }
                if let Some(text) = self.cfg.refuse_unheard.clone() {
                    self.refused.push(c.name.clone());
                    self.refuse_with(conn, &text);
                    self.ops
                        .push_back(LobbyOp::ServeElsewhere(self.elsewhere() as u16));
                    return;
                }
                c.stage = Stage::Waiting;
                self.waiting.push(conn);
                self.ops
                    .push_back(LobbyOp::ServeElsewhere(self.elsewhere() as u16));
                if self.waiting.len() >= usize::from(self.cfg.receivers) {
                    // Nobody is left for multicast: no need to wait for it.
                    self.open_overlay();
                }
            }
            (Stage::Connected, _) => {
                // Anything but Register first: not a receiver of ours.
                self.refuse_with(conn, "expected Register first");
            }
            // Progress and the like from a waiting receiver: nothing to do.
            _ => {}
        }
    }

    /// Connection `conn` closed or failed. A prober that closes heard the
    /// group and was done with it (or went away); a waiting one is no
    /// longer counted.
    pub fn handle_closed(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if c.stage == Stage::Waiting && !self.closed {
            self.waiting.retain(|&w| w != conn);
            self.ops
                .push_back(LobbyOp::ServeElsewhere(self.elsewhere() as u16));
        }
    }

    /// The multicast half admitted its `n`-th receiver.
    pub fn handle_joined(&mut self, n: u16) {
        self.joined = n;
    }

    /// The multicast half closed its registration (its data phase
    /// starts): the receivers waiting now are the TCP half.
    pub fn handle_registration_closed(&mut self) {
        if !self.closed {
            self.open_overlay();
        }
    }

    /// The multicast half ended before its registration closed: the
    /// waiting receivers are sent away (`text` says why); their names.
    pub fn handle_multicast_over(&mut self, text: &str) -> Vec<String> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        let mut names = Vec::new();
        for conn in std::mem::take(&mut self.waiting) {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.stage = Stage::Done;
                names.push(c.name.clone());
            }
            let text = text.to_owned();
            self.ops.push_back(LobbyOp::Send(conn, Msg::Abort { text }));
            self.ops.push_back(LobbyOp::Close(conn));
        }
        names
    }

    /// Both halves are over: every registered receiver still connected
    /// (those that heard the group, those sent to the overlay) gets the
    /// session's `Verdict` (`Ok`: every receiver verified; `Err`: why not)
    /// and its connection closes; one that has not registered yet is told
    /// the session ended. Newcomers are refused from now on.
    pub fn handle_session_over(&mut self, verdict: Result<(), String>) {
        if self.over {
            return;
        }
        self.over = true;
        self.closed = true;
        self.next_beat = None;
        self.waiting.clear();
        let (ok, text) = match verdict {
            Ok(()) => (true, String::new()),
            Err(why) => (false, why),
        };
        for (&conn, c) in &mut self.conns {
            let msg = match c.stage {
                Stage::Probing | Stage::Redirected => Msg::Verdict {
                    ok,
                    text: text.clone(),
                },
                Stage::Connected | Stage::Waiting => Msg::Abort {
                    text: "the session ended before this receiver was served".into(),
                },
                Stage::Done => continue,
            };
            c.stage = Stage::Done;
            self.ops.push_back(LobbyOp::Send(conn, msg));
            self.ops.push_back(LobbyOp::Close(conn));
        }
        self.conns.clear();
    }

    /// The overlay asked for by [`LobbyOp::OpenOverlay`] listens at
    /// `control`: each of its receivers gets a `Redirect` there (their
    /// connections stay open until the session's verdict).
    pub fn redirect(&mut self, conns: &[ConnId], control: SocketAddr) {
        for &conn in conns {
            self.ops
                .push_back(LobbyOp::Send(conn, Msg::Redirect { control }));
        }
    }

    /// The next thing to do.
    pub fn poll_op(&mut self) -> Option<LobbyOp> {
        self.ops.pop_front()
    }

    /// When [`Lobby::handle_timeout`] is next due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_beat
    }

    /// Heartbeats to every registered receiver, when due: those probing
    /// or taking the object over multicast, those waiting for the overlay
    /// and those it serves, until the session's verdict.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(due) = self.next_beat else {
            return;
        };
        if now < due {
            return;
        }
        let mut any = false;
        for (&conn, c) in &self.conns {
            if matches!(c.stage, Stage::Probing | Stage::Waiting | Stage::Redirected) {
                self.ops.push_back(LobbyOp::Send(conn, Msg::Heartbeat));
                any = true;
            }
        }
        self.next_beat = None;
        if any {
            self.arm_beat(now);
        }
    }

    fn arm_beat(&mut self, now: Instant) {
        if !self.over {
            self.next_beat
                .get_or_insert(now + self.cfg.heartbeat.max(Duration::from_millis(1)));
        }
    }

    /// Receivers the multicast half does not wait for: those waiting for
    /// the overlay, and those refused.
    fn elsewhere(&self) -> usize {
        self.waiting.len() + self.refused.len()
    }

    fn open_overlay(&mut self) {
        self.closed = true;
        let waiting = std::mem::take(&mut self.waiting);
        if waiting.is_empty() {
            return;
        }
        let mut list = Vec::with_capacity(waiting.len());
        for conn in waiting {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.stage = Stage::Redirected;
                list.push((conn, c.name.clone()));
            }
        }
        self.ops.push_back(LobbyOp::OpenOverlay(list));
    }

    fn refuse(&mut self, conn: ConnId) {
        let text = format!(
            "the session has its {} receivers already",
            self.cfg.receivers
        );
        self.refuse_with(conn, &text);
    }

    fn refuse_with(&mut self, conn: ConnId, text: &str) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.stage = Stage::Done;
        }
        let text = text.to_owned();
        self.ops.push_back(LobbyOp::Send(conn, Msg::Abort { text }));
        self.ops.push_back(LobbyOp::Close(conn));
        self.conns.remove(&conn);
    }
}

#[cfg(test)]
mod tests;
