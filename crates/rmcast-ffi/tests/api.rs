//! The C API called as C calls it (through the extern functions), on this
//! machine only: 127.0.0.1, TTL 1, a random group per test. Every wait is
//! bounded by the config's timeout.

#![warn(clippy::undocumented_unsafe_blocks)]

use rmcast_ffi::*;
use std::ffi::{CStr, CString, c_char};
use std::ptr;

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn last_error() -> String {
    // SAFETY: rmcast_last_error never returns NULL and the string is
    // NUL-terminated; it is copied before the next call.
    unsafe { CStr::from_ptr(rmcast_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn text(p: *const c_char) -> Option<String> {
    // SAFETY: the library hands out NULL or NUL-terminated strings.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Owns a config for the test; frees it on drop.
struct Config(*mut RmcastConfig);

// SAFETY: a config is only read by the calls that take it as `*const`;
// the tests change it before sharing it.
unsafe impl Send for Config {}
// SAFETY: as above.
unsafe impl Sync for Config {}

impl Config {
    /// Insecure (or under `key`), on `group`, with a 10 s timeout.
    fn new(group: &str, key: Option<&str>) -> Self {
        let cfg = rmcast_config_new();
        assert!(!cfg.is_null());
        // SAFETY: a live config and NUL-terminated strings.
        unsafe {
            assert_eq!(
                rmcast_config_set_group(cfg, c(group).as_ptr()),
                RmcastStatus::Ok
            );
            match key {
                Some(k) => assert_eq!(
                    rmcast_config_set_key_file(cfg, c(k).as_ptr()),
                    RmcastStatus::Ok,
                    "{}",
                    last_error()
                ),
                None => assert_eq!(rmcast_config_set_insecure(cfg, 1), RmcastStatus::Ok),
            }
            assert_eq!(rmcast_config_set_timeout_ms(cfg, 10_000), RmcastStatus::Ok);
        }
        Self(cfg)
    }
}

impl Config {
    /// The handle (a method, so closures capture the whole `Config`).
    fn ptr(&self) -> *mut RmcastConfig {
        self.0
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: the config is live and freed once.
        unsafe { rmcast_config_free(self.0) };
    }
}

fn random_group() -> String {
    let mut buf = [0 as c_char; 32];
    // SAFETY: buf holds 32 bytes.
    let st = unsafe { rmcast_random_group(buf.as_mut_ptr(), buf.len()) };
    assert_eq!(st, RmcastStatus::Ok);
    text(buf.as_ptr()).unwrap()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 251) as u8).collect()
}

/// Receives one object into memory on another thread.
fn spawn_receiver(
    cfg: &std::sync::Arc<Config>,
) -> std::thread::JoinHandle<(RmcastStatus, Vec<u8>)> {
    let cfg = cfg.clone();
    std::thread::spawn(move || {
        let mut buf = RmcastBuffer {
            data: ptr::null_mut(),
            len: 0,
        };
        // SAFETY: a live config and a writable buffer.
        let st = unsafe { rmcast_recv_buffer(cfg.0, &mut buf, ptr::null_mut()) };
        let bytes = if buf.data.is_null() {
            Vec::new()
        } else {
            // SAFETY: the library filled `len` bytes at `data`.
            unsafe { std::slice::from_raw_parts(buf.data, buf.len) }.to_vec()
        };
        // SAFETY: a buffer filled by the library.
        unsafe { rmcast_buffer_free(&mut buf) };
        (st, bytes)
    })
}

#[test]
fn a_buffer_reaches_every_receiver_under_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("group.key");
    let key = key.to_str().unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { rmcast_keygen(c(key).as_ptr()) }, RmcastStatus::Ok);
    let group = random_group();
    let rx = std::sync::Arc::new(Config::new(&group, Some(key)));
    let receivers: Vec<_> = (0..3).map(|_| spawn_receiver(&rx)).collect();

    let tx = Config::new(&group, Some(key));
    // SAFETY: a live config.
    let st = unsafe { rmcast_config_set_receivers(tx.0, 3) };
    assert_eq!(st, RmcastStatus::Ok);
    let data = pattern(300_000);
    let mut report = ptr::null_mut();
    // SAFETY: live config, name, data of `len` bytes, writable report pointer.
    let st = unsafe {
        rmcast_send_buffer(
            tx.0,
            c("blob").as_ptr(),
            data.as_ptr(),
            data.len(),
            &mut report,
        )
    };
    assert_eq!(st, RmcastStatus::Ok, "{}", last_error());
    // SAFETY: a live report, read then freed once.
    unsafe {
        assert_eq!(rmcast_report_ok(report), 1);
        assert_eq!(rmcast_report_bytes(report), data.len() as u64);
        assert_eq!(rmcast_report_receivers(report), 3);
        assert_eq!(rmcast_report_verified(report), 3);
        assert_eq!(rmcast_report_failure_count(report), 0);
        assert!(rmcast_report_failure_name(report, 0).is_null());
        let json: serde_json::Value =
            serde_json::from_str(&text(rmcast_report_json(report)).unwrap()).unwrap();
        assert_eq!(json["ok"], true);
        assert_eq!(json["verified"], 3);
        assert_eq!(json["auth"]["sealed"], true);
        rmcast_report_free(report);
    }
    for r in receivers {
        let (st, bytes) = r.join().unwrap();
        assert_eq!(st, RmcastStatus::Ok);
        assert!(bytes == data, "a receiver's copy differs");
    }
}

/// The protocol, FEC and laggard setters reach the session: the report
/// says the protocol and FEC asked for (not auto's choice), and parity
/// went out with every block.
#[test]
fn a_fixed_protocol_and_fec_run_as_set() {
    let group = random_group();
    let rx = std::sync::Arc::new(Config::new(&group, None));
    let receivers: Vec<_> = (0..2).map(|_| spawn_receiver(&rx)).collect();
    let tx = Config::new(&group, None);
    // SAFETY: a live config and NUL-terminated strings.
    unsafe {
        assert_eq!(rmcast_config_set_receivers(tx.ptr(), 2), RmcastStatus::Ok);
        assert_eq!(
            rmcast_config_set_protocol(tx.ptr(), c("ring").as_ptr()),
            RmcastStatus::Ok
        );
        assert_eq!(
            rmcast_config_set_fec(tx.ptr(), c("16:1").as_ptr()),
            RmcastStatus::Ok
        );
        assert_eq!(
            rmcast_config_set_laggard(tx.ptr(), c("tcp").as_ptr(), 500),
            RmcastStatus::Ok
        );
    }
    let data = pattern(200_000);
    let mut report = ptr::null_mut();
    // SAFETY: live config, name, data of `len` bytes, writable report pointer.
    let st = unsafe {
        rmcast_send_buffer(
            tx.ptr(),
            c("fixed").as_ptr(),
            data.as_ptr(),
            data.len(),
            &mut report,
        )
    };
    assert_eq!(st, RmcastStatus::Ok, "{}", last_error());
    // SAFETY: a live report, read then freed once.
    unsafe {
        let json: serde_json::Value =
            serde_json::from_str(&text(rmcast_report_json(report)).unwrap()).unwrap();
        assert_eq!(json["protocol"], "ring", "{json}");
        assert_eq!(json["fec"], "16:1", "{json}");
        assert!(json["auto"].is_null(), "{json}");
        // 200,000 bytes are 9 blocks of 16 packets: one proactive parity each.
        assert!(json["parity_packets"].as_u64().unwrap() >= 9, "{json}");
        rmcast_report_free(report);
    }
    for r in receivers {
        let (st, bytes) = r.join().unwrap();
        assert_eq!(st, RmcastStatus::Ok);
        assert!(bytes == data, "a receiver's copy differs");
    }
}

/// What the progress callback saw.
#[derive(Default)]
struct Progress {
    calls: usize,
    last: (u64, u64),
    phases: Vec<String>,
}

unsafe extern "C" fn on_progress(
    done: u64,
    total: u64,
    phase: *const c_char,
    user: *mut std::ffi::c_void,
) {
    // SAFETY: `user` is the test's `Progress`, used by this thread only.
    let p = unsafe { &mut *user.cast::<Progress>() };
    p.calls += 1;
    p.last = (done, total);
    let phase = text(phase).unwrap();
    if p.phases.last() != Some(&phase) {
        p.phases.push(phase);
    }
}

#[test]
fn a_raised_token_stops_a_waiting_receiver() {
    let group = random_group();
    let rx = Config::new(&group, None);
    let cancel = rmcast_cancel_new();
    // SAFETY: a live config and token.
    let st = unsafe { rmcast_config_set_cancel(rx.0, cancel) };
    assert_eq!(st, RmcastStatus::Ok);
    let token = cancel as usize;
    let raiser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        // SAFETY: the token lives until the receive below returned.
        unsafe { rmcast_cancel_raise(token as *const RmcastCancel) };
    });
    let start = std::time::Instant::now();
    let mut buf = RmcastBuffer {
        data: ptr::null_mut(),
        len: 0,
    };
    // SAFETY: a live config and a writable buffer.
    let st = unsafe { rmcast_recv_buffer(rx.0, &mut buf, ptr::null_mut()) };
    assert_eq!(st, RmcastStatus::Cancelled, "{}", last_error());
    assert!(start.elapsed() < std::time::Duration::from_secs(3));
    raiser.join().unwrap();
    // SAFETY: a live token, freed once, no longer used by anyone.
    unsafe {
        assert_eq!(rmcast_cancel_is_raised(cancel), 1);
        rmcast_cancel_free(cancel);
    }
}

#[test]
fn a_file_is_stored_in_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("source.bin");
    let data = pattern(50_000);
    std::fs::write(&src, &data).unwrap();
    let out = dir.path().join("out");
    let group = random_group();
    let rx = Config::new(&group, None);
    let out_c = c(out.to_str().unwrap());
    let receiver = std::thread::spawn(move || {
        let mut report = ptr::null_mut();
        // SAFETY: live config, NUL-terminated directory, writable pointer.
        let st = unsafe { rmcast_recv_file(rx.ptr(), out_c.as_ptr(), &mut report) };
        // SAFETY: the report is NULL or live; freed once.
        let path = unsafe { text(rmcast_report_path(report)) };
        // SAFETY: as above.
        let name = unsafe { text(rmcast_report_name(report)) };
        // SAFETY: as above.
        unsafe { rmcast_report_free(report) };
        (st, path, name)
    });
    let tx = Config::new(&group, None);
    let mut calls = Progress::default();
    // SAFETY: a live config; `calls` outlives the send below.
    let st =
        unsafe { rmcast_config_set_progress(tx.0, Some(on_progress), (&raw mut calls).cast()) };
    assert_eq!(st, RmcastStatus::Ok);
    // SAFETY: live config and NUL-terminated path.
    let st = unsafe { rmcast_send_file(tx.0, c(src.to_str().unwrap()).as_ptr(), ptr::null_mut()) };
    assert_eq!(st, RmcastStatus::Ok, "{}", last_error());
    assert!(calls.calls > 0, "the progress callback was called");
    assert_eq!(calls.last, (data.len() as u64, data.len() as u64));
    assert!(
        calls.phases.iter().any(|p| p == "sending"),
        "{:?}",
        calls.phases
    );
    let (st, path, name) = receiver.join().unwrap();
    assert_eq!(st, RmcastStatus::Ok);
    assert_eq!(name.as_deref(), Some("source.bin"));
    let path = path.expect("the report names the stored file");
    assert_eq!(std::fs::read(path).unwrap(), data);
}

#[test]
fn too_few_receivers_is_incomplete_with_a_report() {
    let group = random_group();
    let tx = Config::new(&group, None);
    // SAFETY: a live config.
    unsafe {
        assert_eq!(rmcast_config_set_receivers(tx.0, 2), RmcastStatus::Ok);
        assert_eq!(rmcast_config_set_timeout_ms(tx.0, 1500), RmcastStatus::Ok);
    }
    let rx = std::sync::Arc::new(Config::new(&group, None));
    let receiver = spawn_receiver(&rx);
    let mut report = ptr::null_mut();
    // SAFETY: live config, name, one byte, writable pointer.
    let st = unsafe { rmcast_send_buffer(tx.0, c("x").as_ptr(), [7u8].as_ptr(), 1, &mut report) };
    let msg = last_error();
    assert_eq!(st, RmcastStatus::Incomplete, "{msg}");
    assert!(!report.is_null(), "an incomplete session still reports");
    // SAFETY: a live report, freed once.
    unsafe {
        assert_eq!(rmcast_report_ok(report), 0);
        assert!(text(rmcast_report_error(report)).is_some(), "{msg}");
        rmcast_report_free(report);
    }
    let _ = receiver.join().unwrap();
}

/// `got` must be `want`, with a message that contains `needle`.
fn expect(got: RmcastStatus, want: RmcastStatus, needle: &str) {
    let msg = last_error();
    assert_eq!(got, want, "{msg}");
    assert!(msg.contains(needle), "{msg:?} does not say {needle:?}");
}

#[test]
fn wrong_arguments_return_codes_and_messages() {
    use RmcastStatus::{InvalidArgument, Key};
    let cfg = Config(rmcast_config_new());
    let mut out = RmcastBuffer {
        data: ptr::null_mut(),
        len: 0,
    };
    // SAFETY: NULL or live pointers and NUL-terminated strings throughout.
    unsafe {
        let g = c("239.1.1.1:9");
        expect(
            rmcast_config_set_group(ptr::null_mut(), g.as_ptr()),
            InvalidArgument,
            "cfg is NULL",
        );
        let g = c("nonsense");
        expect(
            rmcast_config_set_group(cfg.0, g.as_ptr()),
            InvalidArgument,
            "bad group \"nonsense\"",
        );
        let g = c("192.168.1.1:9");
        expect(
            rmcast_config_set_group(cfg.0, g.as_ptr()),
            InvalidArgument,
            "not a multicast address",
        );
        expect(
            rmcast_config_set_receivers(cfg.0, 0),
            InvalidArgument,
            "receivers must be 1 to 65520",
        );
        let k = c("/nonexistent/k");
        expect(
            rmcast_config_set_key_file(cfg.0, k.as_ptr()),
            Key,
            "/nonexistent/k",
        );
        expect(
            rmcast_recv_buffer(cfg.0, &mut out, ptr::null_mut()),
            Key,
            "rmcast_keygen",
        );
        let x = c("x");
        expect(
            rmcast_send_buffer(cfg.0, x.as_ptr(), ptr::null(), 0, ptr::null_mut()),
            Key,
            "rmcast_config_set_insecure",
        );
        expect(
            rmcast_send_buffer(cfg.0, ptr::null(), ptr::null(), 0, ptr::null_mut()),
            InvalidArgument,
            "name is NULL",
        );
        expect(
            rmcast_stream_send(ptr::null_mut(), ptr::null(), 0),
            InvalidArgument,
            "sender is NULL",
        );
        expect(
            rmcast_stream_read(ptr::null_mut(), &mut out),
            InvalidArgument,
            "receiver is NULL",
        );
        expect(rmcast_config_set_insecure(cfg.0, 1), RmcastStatus::Ok, "");
        assert_eq!(last_error(), "", "success clears the message");
        expect(
            rmcast_send_buffer(cfg.0, x.as_ptr(), ptr::null(), 3, ptr::null_mut()),
            InvalidArgument,
            "data is NULL but len is 3",
        );
    }
}

#[test]
fn a_stream_delivers_every_message_in_order() {
    let group = random_group();
    let rx = Config::new(&group, None);
    let receiver = std::thread::spawn(move || {
        let mut r = ptr::null_mut();
        // SAFETY: a live config and a writable pointer.
        let st = unsafe { rmcast_stream_receiver_open(rx.ptr(), &mut r) };
        assert_eq!(st, RmcastStatus::Ok, "{}", last_error());
        let mut got = Vec::new();
        loop {
            let mut msg = RmcastBuffer {
                data: ptr::null_mut(),
                len: 0,
            };
            // SAFETY: a live receiver and a writable buffer.
            match unsafe { rmcast_stream_read(r, &mut msg) } {
                RmcastStatus::Ok => {
                    // SAFETY: the library filled `len` bytes; freed once.
                    got.push(unsafe { std::slice::from_raw_parts(msg.data, msg.len) }.to_vec());
                    // SAFETY: as above.
                    unsafe { rmcast_buffer_free(&mut msg) };
                }
                RmcastStatus::EndOfStream => break,
                other => panic!("read: {other:?}: {}", last_error()),
            }
        }
        // SAFETY: a live receiver, given up here.
        let st = unsafe { rmcast_stream_receiver_close(r, ptr::null_mut()) };
        (st, got)
    });
    let tx = Config::new(&group, None);
    let mut s = ptr::null_mut();
    // SAFETY: live handles, writable pointers, messages of their length.
    unsafe {
        assert_eq!(rmcast_stream_sender_open(tx.0, &mut s), RmcastStatus::Ok);
        let mut n = 0;
        assert_eq!(
            rmcast_stream_sender_wait(s, &mut n),
            RmcastStatus::Ok,
            "{}",
            last_error()
        );
        assert_eq!(n, 1);
        for i in 0..50u32 {
            let m = pattern(i as usize * 100 + 1);
            assert_eq!(rmcast_stream_send(s, m.as_ptr(), m.len()), RmcastStatus::Ok);
        }
        let mut report = ptr::null_mut();
        assert_eq!(
            rmcast_stream_sender_close(s, &mut report),
            RmcastStatus::Ok,
            "{}",
            last_error()
        );
        assert_eq!(rmcast_report_verified(report), 1);
        rmcast_report_free(report);
    }
    let (st, got) = receiver.join().unwrap();
    assert_eq!(st, RmcastStatus::Ok);
    assert_eq!(got.len(), 50);
    for (i, m) in got.iter().enumerate() {
        assert!(*m == pattern(i * 100 + 1), "message {i} differs");
    }
}
