//! PRMP over real UDP multicast: a blocking message stream from one sender
//! to a group of receivers (issue 8, `docs/prmp.md`).
//!
//! [`StreamSender`] and [`StreamReceiver`] each own a driver thread that runs
//! the sans-IO machines of [`rmcast_proto::stream`] over non-blocking
//! sockets (the same `net::Port` batching, `timerfd` alarm and
//! clock as the object transfer). The application talks to its driver
//! through a mutex around the machine and a condition variable:
//!
//! - [`StreamSender::send`] copies the message into the machine's send
//!   buffer, or blocks while the buffer is full (the machine never drops,
//!   and neither does this API); [`StreamSender::close`] blocks until every
//!   remaining receiver confirmed it holds everything and reports who did;
//! - [`StreamReceiver::read_into`] blocks until the next whole message is
//!   there, then copies it out of the receive buffer (which opens the
//!   advertised window), and returns `None` at the end of the stream.
//!
//! Several sessions may share one group port: each machine keeps to its own
//! session id (a receiver binds to the first session that invites it or
//! that it hears announced, or to [`StreamReceiverConfig::session`]) and
//! counts other sessions' packets as foreign.
//!
//! With a [`GroupKey`] (`group_key` in either config) every datagram is
//! sealed: opened in place in the receive buffer, sealed in the send buffer
//! after the machine wrote it. Both sides need the same key, or neither:
//! a mismatch ends in a failure that says so, not a hang.
//!
//! With the cargo feature `tokio`, `AsyncStreamSender` and
//! `AsyncStreamReceiver` give the same endpoints to async code.
//!
//! Defaults keep traffic on the machine: multicast leaves through
//! `127.0.0.1` with TTL 1.

mod receiver;
mod sender;
#[cfg(feature = "tokio")]
mod tokio_api;

#[cfg(feature = "tokio")]
pub use tokio_api::{AsyncStreamReceiver, AsyncStreamSender};

pub use receiver::{StreamReceiver, StreamRecvConfig, StreamRecvReport};
pub use rmcast_proto::security::{AuthStats, GroupKey};
pub use rmcast_proto::stream::{
    Admission, CongestionControl, MemberId, MemberInfo, MemberStatus, RemoveReason, ResetReason,
    StreamEvent, StreamReceiverConfig, StreamReceiverEvent, StreamReceiverStats,
    StreamSenderConfig, StreamSenderStats,
};
pub use sender::{SenderEvent, StreamSendConfig, StreamSendReport, StreamSender};

use std::sync::{Condvar, Mutex, MutexGuard};

/// A state shared by the application and its driver thread.
struct Shared<T> {
    state: Mutex<T>,
    cond: Condvar,
    waker: mio::Waker,
}

impl<T> Shared<T> {
    /// Locks the state; a panicked holder leaves it usable (the driver
    /// records its own failure in the state).
    fn lock(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait_timeout<'a>(
        &self,
        guard: MutexGuard<'a, T>,
        d: std::time::Duration,
    ) -> MutexGuard<'a, T> {
        self.cond
            .wait_timeout(guard, d)
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Wakes the driver out of its poll.
    fn wake_driver(&self) {
        let _ = self.waker.wake();
    }
}
