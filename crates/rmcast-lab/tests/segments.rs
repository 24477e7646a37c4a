//! The segmented testbed (issue #23 item 2) and the cascade through
//! `rmcast relay` (item 1).
//!
//! - Segment isolation (root, `RMCAST_LAB_NETNS=1`): a multicast session on
//!   segment A reaches A's receivers and not B's, though B's join the same
//!   group and port; the relay host between them forwards nothing by itself
//!   (IP forwarding off, read back); teardown leaves no namespace, /etc/netns
//!   entry or state file, and a run SIGKILLed with its segmented testbed up
//!   is swept by the next testbed.
//! - The cascade through `rmcast relay` (a failure if the binary has
//!   none): one sender and 10 receivers on segment
//!   A, 10 on B behind relay r1, 10 on C behind relay r2 cascaded after r1,
//!   100 Mbit/s per host, all 30 copies byte-exact; the quick cascade
//!   scenario beside its flat group, with the claims' verdicts; and a
//!   loopback cascade that needs no root.
//!
//! Every process is started here or by the lab, killed by PID only; every
//! wait is bounded.

mod common;

use common::{LAB, is_root, rmcast_bin};
use rmcast_lab::testbed::{Netns, NetnsSpec, Segments, Testbed, list_namespaces};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The namespace tests share two cores: one at a time.
static NETNS: Mutex<()> = Mutex::new(());

/// The rmcast binary, when the namespace tests may run here.
fn netns_ready() -> Result<PathBuf, String> {
    if std::env::var_os("RMCAST_LAB_NETNS").is_none() {
        return Err(
            "namespace tests run only with RMCAST_LAB_NETNS=1 (as root; see docs/lab.md)".into(),
        );
    }
    if !is_root() {
        return Err("namespace tests need root".into());
    }
    rmcast_bin().ok_or_else(|| "no rmcast binary (build rmcast-cli or set RMCAST_BIN)".into())
}

/// Fails the test unless this rmcast's relay answers (`rmcast relay
/// --help` succeeds): the relay is part of the product, so its absence is
/// a failure, not a skip.
fn assert_relay(rmcast: &Path) {
    if let Err(why) = relay_answers(rmcast) {
        panic!("{why}");
    }
}

fn relay_answers(rmcast: &Path) -> Result<(), String> {
    let mut child = Command::new(rmcast)
        .args(["relay", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", rmcast.display()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            return if st.success() {
                Ok(())
            } else {
                Err(format!("`{} relay --help` failed ({st})", rmcast.display()))
            };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("`rmcast relay --help` did not answer within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
}

/// Children started here, killed (by PID, through `Child`) if a test panics.
#[derive(Default)]
struct Kids(Vec<Child>);

impl Kids {
    /// Waits up to `within` for child `k`; its exit code (None: killed or timed out).
    fn wait(&mut self, k: usize, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(st)) = self.0[k].try_wait() {
                return st.code();
            }
            if Instant::now() > deadline {
                let _ = self.0[k].kill();
                let _ = self.0[k].wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// A counter of `dev` in namespace `ns`.
fn counter(ns: &str, dev: &str, what: &str) -> u64 {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "cat"])
        .arg(format!("/sys/class/net/{dev}/statistics/{what}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// Asserts that nothing of testbed `id` remains: namespaces, /etc/netns
/// entries, its state file.
fn assert_gone(id: &str) {
    let left: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&format!("{id}-")))
        .collect();
    assert!(left.is_empty(), "namespaces of {id} remain: {left:?}");
    let etc: Vec<_> = std::fs::read_dir("/etc/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(id))
        .collect();
    assert!(etc.is_empty(), "/etc/netns entries of {id} remain");
    assert!(
        !Path::new(&format!("/run/rmcast-lab/{id}.json")).exists(),
        "the state file of {id} remains"
    );
}

/// Asserts that no process mentions `needle` in its command line (within 5 s).
fn assert_no_process_mentions(needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(needle))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes remain: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn write_object(path: &Path, size: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let data: Vec<u8> = (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(path, &data).unwrap();
    data
}

/// The one file a receiver wrote into `dir` (hidden part files aside).
fn received(dir: &Path) -> Option<Vec<u8>> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .find(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .and_then(|e| std::fs::read(e.path()).ok())
}

#[test]
fn netns_a_session_on_one_segment_does_not_reach_the_next_and_teardown_leaves_nothing() {
    let _one = NETNS.lock().unwrap_or_else(|e| e.into_inner());
    let rmcast = match netns_ready() {
        Ok(p) => p,
        Err(why) => return skip(&why),
    };
    let work = tempfile::tempdir().unwrap();
    let netns = Netns::create(&NetnsSpec {
        receivers: 4,
        rate_bits_per_s: Some(100_000_000),
        mtu: 1500,
        segments: Some(Segments::new(&[2, 2]).unwrap()),
    })
    .unwrap();
    let id = netns.id.clone();
    let mut tb = Testbed::Netns(netns);
    let relay_ns = tb.relays()[0].ns.clone().unwrap();
    let ns = |i: usize| tb.hosts()[i].ns.clone().unwrap();
    {
        // The relay host forwards nothing by itself.
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                &relay_ns,
                "cat",
                "/proc/sys/net/ipv4/ip_forward",
            ])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "0");
        // h1, h2 on segment A (10.77.0.0/24); h3, h4 on B (10.77.1.0/24).
        assert_eq!(tb.hosts()[1].addr.to_string(), "10.77.0.2");
        assert_eq!(tb.hosts()[3].addr.to_string(), "10.77.1.2");

        let object = work.path().join("object.bin");
        let data = write_object(&object, 1_000_000);
        let group = "239.77.250.1:20500".to_string();
        let out = |i: usize| work.path().join(format!("h{i}"));
        let h3_rx = counter(&ns(3), "eth0", "rx_bytes");
        let r1_tx_b = counter(&relay_ns, "eth1", "tx_bytes");
        let mut kids = Kids::default();
        // One receiver on each segment, both in the same group and port.
        for i in [1, 3] {
            std::fs::create_dir_all(out(i)).unwrap();
            let args: Vec<String> = [
                "recv",
                "--group",
                &group,
                "--iface",
                &tb.hosts()[i].addr.to_string(),
                "--out",
                out(i).to_str().unwrap(),
                "--timeout",
                "6s",
                "--name",
                &format!("h{i}"),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let mut c = tb.command(i, rmcast.to_str().unwrap(), &args);
            c.stdout(Stdio::null()).stderr(Stdio::null());
            kids.0.push(c.spawn().unwrap());
        }
        std::thread::sleep(Duration::from_millis(400));
        // The sender on A waits for both, starts with the one that came.
        let args: Vec<String> = [
            "send",
            object.to_str().unwrap(),
            "--group",
            &group,
            "--iface",
            "10.77.0.1",
            "--receivers",
            "2",
            "--min-receivers",
            "1",
            "--wait",
            "3s",
            "--rate",
            "95000000",
            "--protocol",
            "nak-poll",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut c = tb.command(0, rmcast.to_str().unwrap(), &args);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        kids.0.push(c.spawn().unwrap());
        let sender = kids.wait(2, Duration::from_secs(20));
        let h1 = kids.wait(0, Duration::from_secs(10));
        let h3 = kids.wait(1, Duration::from_secs(10));
        // Exit 3: the receivers that came (h1) all verified, h3 never came.
        assert_eq!(sender, Some(3), "the sender on segment A");
        assert_eq!(h1, Some(0), "h1 on segment A");
        assert_eq!(received(&out(1)).as_deref(), Some(&data[..]), "h1's copy");
        assert_ne!(h3, Some(0), "h3 on segment B must not get the session");
        assert!(received(&out(3)).is_none(), "h3 on segment B holds a file");
        // Not even the data reached B: only B's own chatter (h3's joins).
        let h3_got = counter(&ns(3), "eth0", "rx_bytes") - h3_rx;
        let r1_sent = counter(&relay_ns, "eth1", "tx_bytes") - r1_tx_b;
        assert!(
            h3_got < 50_000,
            "h3 received {h3_got} bytes from A's session"
        );
        assert!(r1_sent < 50_000, "relay r1 sent {r1_sent} bytes onto B");
    }
    tb.teardown().unwrap();
    assert_gone(&id);
    assert_no_process_mentions(work.path().to_str().unwrap());
}

#[test]
fn netns_a_segmented_testbed_whose_run_was_killed_is_swept_by_the_next() {
    let _one = NETNS.lock().unwrap_or_else(|e| e.into_inner());
    let rmcast = match netns_ready() {
        Ok(p) => p,
        Err(why) => return skip(&why),
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sc = dir.path().join("scenario.toml");
    // Many repeats keep the segmented testbed up for seconds whether or not
    // this rmcast has a relay (without one each run fails at once).
    std::fs::write(
        &sc,
        "name='t'\nsegments=[1,1]\nsizes=['8MB']\nrates=['20mbit']\nrepeats=30\nmax_run_s=60\n\
         [[tools]]\nname='c'\nkind='cascade'\n",
    )
    .unwrap();
    let before: Vec<String> = list_namespaces();
    let mut kids = Kids::default();
    kids.0.push(
        Command::new(LAB)
            .args([
                "run",
                sc.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--rmcast",
            ])
            .arg(&rmcast)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Wait for the relay namespace (made last), then SIGKILL the runner.
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        let new_relay = list_namespaces()
            .into_iter()
            .find(|n| !before.contains(n) && n.ends_with("-r1"));
        if let Some(n) = new_relay {
            break n.trim_end_matches("-r1").to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the segmented testbed never came up"
        );
        assert!(
            matches!(kids.0[0].try_wait(), Ok(None)),
            "the run ended before its testbed came up"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    std::thread::sleep(Duration::from_millis(300));
    kids.0[0].kill().unwrap(); // SIGKILL: no cleanup of its own
    let _ = kids.0[0].wait();
    // Its namespaces outlive it (and its tools die with it: PDEATHSIG).
    assert!(
        list_namespaces().iter().any(|n| n == &format!("{id}-r1")),
        "the killed run's testbed is already gone"
    );
    assert_no_process_mentions(out.to_str().unwrap());
    // The next testbed sweeps it (its owner's PID is gone), relays and all.
    let mut next = Netns::create(&NetnsSpec {
        receivers: 1,
        rate_bits_per_s: None,
        mtu: 1500,
        segments: None,
    })
    .unwrap();
    let next_id = next.id.clone();
    assert_gone(&id);
    next.teardown().unwrap();
    assert_gone(&next_id);
}

/// `runs.json` of a lab output directory.
fn runs(out: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(out.join("runs.json")).expect("runs.json");
    serde_json::from_str(&text).unwrap()
}

/// The testbed ids a run used (`testbeds.txt`).
fn testbed_ids(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("testbeds.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.strip_prefix("netns testbed ")?
                .split(':')
                .next()
                .map(String::from)
        })
        .collect()
}

fn lab_run(scenario: &Path, out: &Path, rmcast: &Path, more: &[&str]) -> std::process::Output {
    Command::new(LAB)
        .args([
            "run",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(more)
        .arg("--rmcast")
        .arg(rmcast)
        .output()
        .expect("run rmcast-lab")
}

/// Asserts a cascade run succeeded: every receiver verified (the runner
/// checks each copy byte-exact against the object), every relay exited 0
/// and left its --json report.
fn assert_cascade_ok(r: &serde_json::Value, receivers: u64, relays: usize) {
    assert_eq!(r["status"], "ok", "{r:#}");
    assert_eq!(r["kind"], "cascade");
    assert_eq!(r["receivers"], receivers);
    assert!(r["goodput_mbps"].as_f64().is_some_and(|g| g > 0.0), "{r:#}");
    // The sender's exit is the cascade's end: nobody finished much later.
    assert!(
        r["reasons"].as_array().unwrap().is_empty(),
        "warnings: {:#}",
        r["reasons"]
    );
    assert!(r["last_exit_seconds"].as_f64().is_some(), "{r:#}");
    let rel = r["relays"].as_array().expect("relays recorded");
    assert_eq!(rel.len(), relays, "{r:#}");
    for (k, x) in rel.iter().enumerate() {
        assert_eq!(x["name"], format!("r{}", k + 1));
        assert_eq!(x["exit"], serde_json::json!({"code": 0}), "{x:#}");
        assert!(
            x["report"].is_object(),
            "relay r{} left no --json report: {x:#}",
            k + 1
        );
    }
}

#[test]
fn netns_cascade_three_segments_of_ten_at_100mbit_all_thirty_copies_byte_exact() {
    let _one = NETNS.lock().unwrap_or_else(|e| e.into_inner());
    let rmcast = match netns_ready() {
        Ok(p) => p,
        Err(why) => return skip(&why),
    };
    assert_relay(&rmcast);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sc = dir.path().join("scenario.toml");
    std::fs::write(
        &sc,
        "name='cascade-30'\nsegments=[10,10,10]\nsizes=['4MiB']\nrates=['100mbit']\n\
         copies='tmpfs'\nmax_run_s=120\nstall_s=20\n\
         [[tools]]\nname='cascade'\nkind='cascade'\nprotocol='nak-poll'\n",
    )
    .unwrap();
    let o = lab_run(&sc, &out, &rmcast, &[]);
    let rs = runs(&out);
    assert_eq!(rs.len(), 1, "{}", String::from_utf8_lossy(&o.stderr));
    assert_cascade_ok(&rs[0], 30, 2);
    assert_eq!(rs[0]["segments"], serde_json::json!([10, 10, 10]));
    assert_eq!(rs[0]["relays"][0]["receivers"], 11, "r1: B's 10 + r2");
    assert_eq!(rs[0]["relays"][1]["receivers"], 10, "r2: C's 10");
    assert_eq!(o.status.code(), Some(0));
    for id in testbed_ids(&out) {
        assert_gone(&id);
    }
    assert_no_process_mentions(out.to_str().unwrap());
}

#[test]
fn netns_the_quick_cascade_scenario_passes_beside_its_flat_group_with_verdicts() {
    let _one = NETNS.lock().unwrap_or_else(|e| e.into_inner());
    let rmcast = match netns_ready() {
        Ok(p) => p,
        Err(why) => return skip(&why),
    };
    assert_relay(&rmcast);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/scenarios/cascade-quick.toml");
    let o = lab_run(&sc, &out, &rmcast, &["--report"]);
    let rs = runs(&out);
    assert_eq!(rs.len(), 2, "{}", String::from_utf8_lossy(&o.stderr));
    let flat = rs.iter().find(|r| r["tool"] == "flat-nak-poll").unwrap();
    assert_eq!(flat["status"], "ok", "{flat:#}");
    assert_eq!(flat["receivers"], 6);
    let cascade = rs.iter().find(|r| r["tool"] == "cascade-nak-poll").unwrap();
    assert_cascade_ok(cascade, 6, 2);
    assert_eq!(o.status.code(), Some(0));
    let claims: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(out.join("claims.json")).unwrap()).unwrap();
    assert_eq!(claims.len(), 2);
    for c in &claims {
        assert!(
            c["verdict"] == "holds" || c["verdict"] == "does not hold",
            "{c:#}"
        );
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("## Claims") && report.contains("## Relays"),
        "{report}"
    );
    // Two testbeds: the flat one, then the segmented one; both removed.
    let ids = testbed_ids(&out);
    assert_eq!(ids.len(), 2, "{ids:?}");
    for id in ids {
        assert_gone(&id);
    }
    assert_no_process_mentions(out.to_str().unwrap());
}

#[test]
fn cascade_on_loopback_every_copy_is_verified_without_root() {
    let Some(rmcast) = rmcast_bin() else {
        return skip("no rmcast binary (build rmcast-cli or set RMCAST_BIN)");
    };
    assert_relay(&rmcast);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sc = dir.path().join("scenario.toml");
    std::fs::write(
        &sc,
        "name='t'\ntestbed='local'\nsegments=[1,2,1]\nsizes=['1MiB']\nrates=['none']\nmax_run_s=60\n\
         [[tools]]\nname='cascade'\nkind='cascade'\n",
    )
    .unwrap();
    let o = lab_run(&sc, &out, &rmcast, &[]);
    let rs = runs(&out);
    assert_eq!(rs.len(), 1, "{}", String::from_utf8_lossy(&o.stderr));
    assert_cascade_ok(&rs[0], 4, 2);
    assert_no_process_mentions(out.to_str().unwrap());
}
