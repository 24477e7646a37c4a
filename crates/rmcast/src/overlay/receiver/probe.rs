//! A hybrid session's receiver side ([`crate::hybrid`]): the sender
//! answers `Register` with a `Probe`; the receiver listens for the
//! multicast session and takes the object there, or says `Unheard`, waits
//! for the `Redirect` and takes it from the TCP overlay there. Either way
//! it keeps the lobby connection and, its copy verified, waits on it for
//! the session's `Verdict`: whether every receiver of both halves
//! verified.

use super::{Done, Driver, Ev};
use crate::overlay::OverlayRecvConfig;
use crate::overlay::io;
use crate::{Error, Progress, RecvConfig, RecvReport, SessionId};
use rmcast_proto::overlay::NodeMachine;
use rmcast_wire::overlay::Msg;
use std::net::SocketAddr;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// Where a hybrid registration stands.
#[derive(Debug, Default)]
pub(super) struct Hybrid {
    /// The sender's `Probe`, not acted on yet: group, session, wait.
    probe: Option<(SocketAddr, u64, u32)>,
    /// The probe ran (and did not hear the group).
    probed: bool,
    /// The sender's `Redirect`: register with the overlay there.
    redirect: Option<SocketAddr>,
}

impl Driver<'_, '_> {
    /// A `Probe` or `Redirect` from the sender (the loop acts on it next).
    /// Out of turn (a redirected registration, a second probe, a redirect
    /// before the probe), it fails the receive like any protocol error.
    pub(super) fn on_hybrid(&mut self, m: &mut NodeMachine, now: rmcast_proto::Instant, msg: Msg) {
        let sender = &self.node.cfg.sender;
        let Some(h) = &mut self.hybrid else {
            m.handle_closed(
                now,
                &format!("the overlay sender at {sender} sent {:?}", msg.kind()),
            );
            return;
        };
        match msg {
            Msg::Probe {
                group,
                session,
                wait_ms,
            } if !h.probed && h.probe.is_none() => h.probe = Some((group, session, wait_ms)),
            Msg::Redirect { control } if h.probed => h.redirect = Some(control),
            Msg::Verdict { ok, text } => m.handle_closed(
                now,
                &format!(
                    "the hybrid sender at {sender} ended the session before this receiver had \
                     the object ({})",
                    if ok {
                        "every other receiver verified"
                    } else {
                        &text
                    }
                ),
            ),
            msg => m.handle_closed(
                now,
                &format!(
                    "the hybrid sender at {sender} sent {:?} out of turn",
                    msg.kind()
                ),
            ),
        }
    }

    /// Runs a pending probe (blocking: listening for the multicast session
    /// for its wait, then receiving the object over multicast if heard),
    /// or, redirected, the registration with the TCP overlay (blocking);
    /// then waits for the session's verdict.
    pub(super) fn hybrid_step(
        &mut self,
        progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<Option<Done>, Error> {
        let Some(h) = &mut self.hybrid else {
            return Ok(None);
        };
        if let Some(to) = h.redirect.take() {
            tracing::info!("registering with the sender's TCP overlay at {to}");
            let redirected = OverlayRecvConfig {
                sender: to,
                ..self.node.cfg.clone()
            };
            let mut r = super::recv_once(&redirected, progress, false)?;
            r.group = self.await_verdict(None);
            return Ok(Some(r));
        }
        let Some((group, session, wait_ms)) = h.probe.take() else {
            return Ok(None);
        };
        h.probed = true;
        match self.probe(group, session, wait_ms, progress)? {
            Some(mut r) => {
                r.group = self.await_verdict(r.group.take());
                Ok(Some(Box::new(r)))
            }
            None => Ok(None),
        }
    }

    /// This receiver's copy is verified: the session's outcome, from the
    /// hybrid sender's `Verdict` on the lobby connection once both halves
    /// are over. `multicast`: what the multicast half's farewell said
    /// (about its own receivers only). No verdict (the sender went away,
    /// or fell silent for the inactivity timeout): unknown, unless the
    /// multicast half already failed.
    fn await_verdict(
        &mut self,
        multicast: Option<Result<(), String>>,
    ) -> Option<Result<(), String>> {
        let sender = self.node.cfg.sender;
        let limit = self.node.cfg.inactivity;
        let failed = multicast.filter(Result::is_err);
        tracing::info!("copy verified: waiting for the sender's word on the whole session");
        loop {
            match self.rx.recv_timeout(limit) {
                Ok(Ev::Ctl(Ok(Msg::Verdict { ok: true, .. }))) => return Some(Ok(())),
                Ok(Ev::Ctl(Ok(Msg::Verdict { text, .. }))) => return Some(Err(text)),
                Ok(Ev::Ctl(Ok(Msg::Abort { text }))) => return Some(Err(text)),
                Ok(Ev::Ctl(Err(why))) => {
                    tracing::warn!(
                        "the hybrid sender at {sender} closed before its verdict on the \
                         session: {why}"
                    );
                    return failed;
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    tracing::warn!(
                        "the hybrid sender at {sender} was silent for {:.1} s: no verdict on \
                         the session",
                        limit.as_secs_f64()
                    );
                    return failed;
                }
                Err(RecvTimeoutError::Disconnected) => return failed,
            }
            if super::cancelled(self.node.cfg) {
                return failed;
            }
        }
    }

    fn probe(
        &mut self,
        group: SocketAddr,
        session: u64,
        wait_ms: u32,
        progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<Option<RecvReport>, Error> {
        let cfg = self.node.cfg;
        let Some(template) = &cfg.multicast else {
            return Err(Error::Failed(format!(
                "the sender at {} serves the receivers that hear its group {group} over \
                 multicast and asked this one to listen, but it has no multicast settings",
                cfg.sender
            )));
        };
        let SocketAddr::V4(named) = group else {
            return Err(Error::Failed(format!(
                "the sender at {} names the multicast group {group}: not IPv4",
                cfg.sender
            )));
        };
        let wait = Duration::from_millis(wait_ms.into());
        let mc = RecvConfig {
            group: cfg.probe_group.unwrap_or(named),
            session: Some(SessionId(session)),
            listen_timeout: Some(wait),
            out_dir: cfg.out_dir.clone(),
            name: cfg.name.clone(),
            cancel: cfg.cancel.clone(),
            group_key: cfg.key.clone(),
            trust: cfg.trust.clone(),
            no_clobber: cfg.no_clobber,
            max_bytes: cfg.max_bytes,
            ..template.clone()
        };
        tracing::info!(
            "the sender at {} runs a hybrid session: listening for session {} on {} for {wait_ms} ms",
            cfg.sender,
            SessionId(session),
            mc.group
        );
        match crate::recv_to_dir(&mc, progress) {
            Ok(r) => Ok(Some(r)),
            Err(Error::NoSession(_)) => {
                tracing::info!(
                    "did not hear the group within {wait_ms} ms: asking the sender for TCP"
                );
                let limit = self.node.lock().inactivity();
                io::send_msg(&mut self.ctl, self.ctl_seal.as_mut(), &Msg::Unheard, limit).map_err(
                    |e| Error::Failed(format!("cannot talk to the sender at {}: {e}", cfg.sender)),
                )?;
                // The machine was not polled while this thread listened on
                // the group; the sender's connection just took our answer,
                // so it is alive: its silence counts from now.
                let now = self.node.clock.now();
                self.node.lock().handle_msg(now, Msg::Heartbeat);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
