//! What the runtime's integration tests share.

use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread and fails the test if it takes longer than `limit`.
pub fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("test did not finish within {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("test thread panicked"),
    }
}
