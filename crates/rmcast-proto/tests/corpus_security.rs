//! Replays the sealing fuzz targets' committed seeds (`fuzz/seeds/open/`,
//! `fuzz/seeds/key_file/`) through the same contracts the targets check
//! (`seal_oracle`), so every `cargo test` guards what the fuzzers start
//! from, without nightly.
//!
//! `open` seeds are authentic sealed packets of several kinds (sender and
//! receivers, both datagram families, with and without the session nonce
//! and the party field), the same cut, bit-flipped, unsealed and under
//! another version or key, a few mutation programs, and garbage.
//! `key_file` seeds are valid key files (as rendered, and as an operator
//! may edit them) and damaged ones. To regenerate them after a format
//! change:
//!
//! ```text
//! cargo test -p rmcast-proto --test corpus_security -- --ignored write_seeds
//! ```

mod seal_oracle;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rmcast_proto::security::{GroupKey, KEY_LEN, Keyring};
use seal_oracle::{NONCE, SESSION, fixture};

/// A target's contract: panics when broken, true when the input was
/// accepted (opened as it is, or parsed).
type Check = fn(&[u8]) -> bool;

const TARGETS: [(&str, Check); 2] = [
    ("open", seal_oracle::open_input),
    ("key_file", seal_oracle::key_file),
];

fn seeds_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target)
}

#[test]
fn committed_seeds_keep_every_sealing_contract() {
    for (target, check) in TARGETS {
        let dir = seeds_dir(target);
        let (mut files, mut accepted) = (0, 0);
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let bytes = fs::read(&path).unwrap();
            files += 1;
            if check(&bytes) {
                accepted += 1;
            }
        }
        // A missing or emptied corpus must not pass silently, and it must
        // reach the success paths as well as the refusals.
        assert!(files >= 20, "{target}: only {files} seeds");
        assert!(accepted >= 4, "{target}: only {accepted} seeds accepted");
        assert!(files - accepted >= 10, "{target}: too few refused seeds");
    }
}

#[test]
fn generated_seeds_keep_every_sealing_contract() {
    for (target, check) in TARGETS {
        for (name, bytes) in seeds(target) {
            let valid = name.starts_with("valid-");
            assert_eq!(check(&bytes), valid, "{target}/{name}");
        }
    }
}

/// Writes the seeds into `fuzz/seeds/` (replacing the generated ones;
/// the fuzzers' `fuzz-*` files stay).
#[test]
#[ignore = "writes files; run by hand after a format change"]
fn write_seeds() {
    for (target, _) in TARGETS {
        let dir = seeds_dir(target);
        fs::create_dir_all(&dir).unwrap();
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.starts_with("fuzz-") {
                fs::remove_file(&path).unwrap();
            }
        }
        for (name, bytes) in seeds(target) {
            fs::write(dir.join(name), bytes).unwrap();
        }
    }
}

/// Named seeds of one target: `valid-*` are accepted, nothing else is.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    match target {
        "open" => open_seeds(),
        _ => key_file_seeds(),
    }
}

fn open_seeds() -> Vec<(String, Vec<u8>)> {
    let fx = fixture();
    let mut out = Vec::new();
    for t in &fx.templates {
        let s = &t.sealed;
        let n = t.name;
        out.push((format!("valid-{n}"), s.clone()));
        // Cut: one byte short (the tag), to the trailer, to the header.
        out.push((format!("cut-tag-{n}"), s[..s.len() - 1].to_vec()));
        out.push((format!("cut-trailer-{n}"), s[..t.plain.len()].to_vec()));
        out.push((format!("cut-header-{n}"), s[..16].to_vec()));
        // One bit flipped in the header's session, the body, the trailer's
        // counter and the tag.
        let flips = [
            ("session", 15),
            ("body", 17),
            ("counter", s.len() - 17),
            ("tag", s.len() - 1),
        ];
        for (what, at) in flips {
            let mut b = s.clone();
            b[at] ^= 0x01;
            out.push((format!("flip-{what}-{n}"), b));
        }
        // Unsealed: the plain packet itself.
        out.push((format!("plain-{n}"), t.plain.clone()));
    }
    let hello = &fx.templates[0].sealed;
    let mut bad = |name: &str, at: usize, v: u8| {
        let mut b = hello.clone();
        b[at] = v;
        out.push((name.to_string(), b));
    };
    bad("version-2", 2, 2);
    bad("flags-unknown", 4, 0x83);
    bad("flags-no-nonce", 4, 0x01);
    bad("key-hint", 5, hello[5] ^ 0xFF);
    bad("rank-receiver", 7, 0);
    // Sealed under another group key (with this key's hint, so the tag is
    // what refuses it).
    let mut other = Keyring::for_sender(
        Arc::new(GroupKey::from_secret([9; KEY_LEN])),
        SESSION,
        NONCE,
    );
    let plain = &fx.templates[0].plain;
    let mut buf = plain.clone();
    buf.resize(plain.len() + rmcast_wire::SEAL_OVERHEAD_MAX, 0);
    let len = other.seal(&mut buf, plain.len(), true).unwrap();
    buf.truncate(len);
    buf[5] = hello[5];
    out.push(("other-key".into(), buf));
    // Mutation programs (not datagrams themselves): template 1, xor the
    // first body byte; template 4, cut 3 bytes off; splice template 8's
    // tail onto template 0 past the header.
    out.push(("prog-xor".into(), vec![1, 0, 0, 17, 0x80]));
    out.push(("prog-cut".into(), vec![4, 1, 0, 60, 0]));
    out.push(("prog-splice".into(), vec![0, 4, 0, 16, 8]));
    out.push(("garbage-empty".into(), Vec::new()));
    out.push(("garbage-byte".into(), vec![0xFF]));
    out.push(("garbage-noise".into(), noise(80)));
    out
}

fn key_file_seeds() -> Vec<(String, Vec<u8>)> {
    let key = GroupKey::from_secret([0x42; KEY_LEN]);
    let good = key.to_file();
    let id = key.id().to_string();
    let secret_line = good
        .lines()
        .find(|l| l.starts_with("secret "))
        .unwrap()
        .to_string();
    let secret = secret_line["secret ".len()..].to_string();
    let mut out: Vec<(String, String)> = vec![
        ("valid-rendered".into(), good.clone()),
        ("valid-crlf".into(), good.replace('\n', "\r\n")),
        (
            "valid-upper".into(),
            good.replace(&secret, &secret.to_uppercase())
                .replace(&id, &id.to_uppercase()),
        ),
        (
            "valid-edited".into(),
            format!("\n  # ours\n\nrmcast-group-key  1 \n\tsecret {secret}\n\nid {id}  \n"),
        ),
        ("valid-no-newline".into(), good.trim_end().to_string()),
        ("empty".into(), String::new()),
        ("comments-only".into(), "# nothing\n\n".into()),
        ("not-a-key".into(), "hello world\n".into()),
        (
            "version-2".into(),
            good.replace("rmcast-group-key 1", "rmcast-group-key 2"),
        ),
        (
            "version-none".into(),
            good.replace("rmcast-group-key 1", "rmcast-group-key"),
        ),
        ("no-id".into(), drop_line(&good, "id ")),
        ("no-secret".into(), drop_line(&good, "secret ")),
        ("id-twice".into(), format!("{good}id {id}\n")),
        ("unknown-field".into(), format!("{good}comment hello\n")),
        ("id-mismatch".into(), good.replace(&id, "0000000000000000")),
        ("secret-short".into(), good.replace(&secret, &secret[..62])),
        (
            "secret-long".into(),
            good.replace(&secret, &format!("{secret}00")),
        ),
        ("secret-odd".into(), good.replace(&secret, &secret[..63])),
        (
            "secret-not-hex".into(),
            good.replace(&secret, &format!("zz{}", &secret[2..])),
        ),
        (
            "secret-non-ascii".into(),
            good.replace(&secret, &format!("é{}", &secret[2..])),
        ),
        (
            "secret-edited".into(),
            good.replace(
                &secret,
                &format!("{}{}", &secret[..63], flip_hex(&secret[63..])),
            ),
        ),
    ];
    let mut bytes: Vec<(String, Vec<u8>)> =
        out.drain(..).map(|(n, t)| (n, t.into_bytes())).collect();
    let mut bad_utf8 = good.clone().into_bytes();
    let at = good.find("secret ").unwrap() + 9;
    bad_utf8[at] = 0xFF;
    bytes.push(("bad-utf8".into(), bad_utf8));
    bytes.push(("garbage-noise".into(), noise(80)));
    bytes
}

fn drop_line(text: &str, prefix: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with(prefix))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn flip_hex(d: &str) -> &'static str {
    if d == "0" { "1" } else { "0" }
}

/// A fixed pseudo-random run (xorshift).
fn noise(n: usize) -> Vec<u8> {
    let mut x: u32 = 0x9E37_79B9;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}
