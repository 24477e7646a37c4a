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

/// A loopback address whose port is free now and lies below Linux's
/// ephemeral range (32768–60999), for a listener the test binds later: a
/// port the kernel handed out for `bind(0)` and freed could meanwhile be
/// taken by another test's outgoing connection.
#[allow(dead_code)]
pub fn free_tcp_addr() -> std::net::SocketAddr {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let mut seed = std::process::id() ^ t;
    for _ in 0..64 {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let addr =
            std::net::SocketAddr::from(([127, 0, 0, 1], 21_000 + ((seed >> 8) % 11_000) as u16));
        if std::net::TcpListener::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no free port in 21000–32000")
}
