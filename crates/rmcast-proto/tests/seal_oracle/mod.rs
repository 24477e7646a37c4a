//! The sealing layer's contracts as executable checks, shared by the fuzz
//! targets `open` and `key_file` (`fuzz/fuzz_targets/`, which include this
//! file by path) and the seed replay (`tests/corpus_security.rs`), so both
//! hold [`Keyring::open`] and [`GroupKey::parse_file`] to the same rules.
//!
//! Each check **panics** when a contract is broken and returns whether the
//! input was accepted (opened, or parsed as a key).
//!
//! The fixture is one group key and a fixed set of sealed packets (the
//! *templates*: several kinds of both datagram families, from the sender
//! and from receivers, with and without the session nonce and the party
//! field). Sealing is deterministic for a given key, session nonce and
//! counter, so the templates are the same bytes in every run, and the
//! committed seeds can hold them.

#![allow(dead_code)] // each includer uses its part

use std::sync::{Arc, OnceLock};

use rmcast_proto::security::{AuthError, GroupKey, KEY_LEN, Keyring};
use rmcast_wire::seal::Envelope;
use rmcast_wire::stream::{
    ConnectRequest, DATA_FIRST, DATA_LAST, StreamBody, StreamData, StreamPacket,
};
use rmcast_wire::{
    Body, Close, DecodeError, Feedback, Header, Hello, Join, MAX_DATAGRAM, Packet, ProtocolId,
    RANK_SENDER, RANK_UNASSIGNED, Seq, SessionId, oracle,
};

/// The fixture's group key secret (a test key, public by design).
pub const SECRET: [u8; KEY_LEN] = [0x42; KEY_LEN];
/// The session every keyring of the fixture knows of.
pub const SESSION: SessionId = SessionId(0x0102_0304_0506_0708);
/// The sender's session nonce.
pub const NONCE: [u8; 16] = [0x55; 16];
/// Another session on the same group.
pub const OTHER: SessionId = SessionId(0x1112_1314_1516_1718);
/// A second key holder's nonce (the other session's, and a second sender
/// claiming [`SESSION`]).
pub const OTHER_NONCE: [u8; 16] = [0x66; 16];
/// Receiver ids of the parties that sealed the receivers' templates.
pub const PARTY_A: u64 = 0xAAAA;
pub const PARTY_B: u64 = 0xBBBB;
/// The receiver id of the primed receiver keyring.
const PRIMED_PARTY: u64 = 0xCCCC;

/// One authentic sealed packet and what it opens to.
pub struct Template {
    pub name: &'static str,
    pub sealed: Vec<u8>,
    pub plain: Vec<u8>,
    pub party: Option<u64>,
    pub session: SessionId,
}

/// The key, the templates, and what each keyring kind makes of the
/// templates opened in order (the reference a keyring must still agree
/// with after refusing an input: a refusal changes nothing).
pub struct Fixture {
    pub key: Arc<GroupKey>,
    pub templates: Vec<Template>,
    reference: [Vec<Result<(), AuthError>>; KINDS],
}

/// The keyrings every input is opened by: the sender's, a receiver that
/// has heard nothing yet, and a receiver that opened the sender's `Hello`
/// and took the session.
const KINDS: usize = 3;
const KIND_NAMES: [&str; KINDS] = ["sender", "fresh receiver", "primed receiver"];

pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(build)
}

fn transfer(session: SessionId, rank: u16, body: Body<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let n = Packet {
        header: Header::new(session, rank),
        body,
    }
    .encode(&mut buf)
    .expect("template encodes");
    buf.truncate(n);
    buf
}

fn stream(rank: u16, body: StreamBody<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let n = StreamPacket {
        header: Header::new(SESSION, rank),
        body,
    }
    .encode(&mut buf)
    .expect("template encodes");
    buf.truncate(n);
    buf
}

fn seal(k: &mut Keyring, plain: &[u8], with_nonce: bool) -> Vec<u8> {
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + rmcast_wire::SEAL_OVERHEAD_MAX, 0);
    let n = k
        .seal(&mut buf, plain.len(), with_nonce)
        .expect("template seals");
    buf.truncate(n);
    buf
}

fn build() -> Fixture {
    let key = Arc::new(GroupKey::from_secret(SECRET));
    let mut tx = Keyring::for_sender(key.clone(), SESSION, NONCE);
    let mut templates = Vec::new();
    let mut add = |name, k: &mut Keyring, plain: Vec<u8>, nonce, party, session| {
        let sealed = seal(k, &plain, nonce);
        templates.push(Template {
            name,
            sealed: sealed.clone(),
            plain,
            party,
            session,
        });
        sealed
    };
    let hello = |session| {
        transfer(
            session,
            RANK_SENDER,
            Body::Hello(Hello {
                receivers_wanted: 3,
                protocol: ProtocolId::NakPoll,
            }),
        )
    };
    let hello_sealed = add("sender-hello", &mut tx, hello(SESSION), true, None, SESSION);
    let payload: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    let data = transfer(
        SESSION,
        RANK_SENDER,
        Body::Data(rmcast_wire::Data {
            seq: Seq(7),
            poll: 0,
            copy: 0,
            payload: &payload,
        }),
    );
    add("sender-data", &mut tx, data, false, None, SESSION);
    let sdata = stream(
        RANK_SENDER,
        StreamBody::Data(StreamData {
            seq: Seq(1000),
            flags: DATA_FIRST | DATA_LAST,
            poll: None,
            payload: b"a message",
        }),
    );
    add("sender-stream-data", &mut tx, sdata, false, None, SESSION);
    let close = transfer(
        SESSION,
        RANK_SENDER,
        Body::Close(Close {
            hash: [0xAB; 32],
            signature: None,
        }),
    );
    add("sender-close", &mut tx, close, false, None, SESSION);

    // Receivers learn the session from the sender's Hello, then seal their
    // own packets as their party.
    let receiver = |party| {
        let mut r = Keyring::new(key.clone());
        r.open(&mut hello_sealed.clone()).expect("the hello opens");
        r.take_session(SESSION, party);
        r
    };
    let mut ra = receiver(PARTY_A);
    let ack = transfer(
        SESSION,
        2,
        Body::Ack(Feedback {
            cumulative: Seq(8),
            echo: Seq(7),
            echo_copy: 0,
            aggregate: false,
            bitmap: &[0b0000_0101],
        }),
    );
    add("receiver-ack", &mut ra, ack, false, Some(PARTY_A), SESSION);
    let mut rb = receiver(PARTY_B);
    let join = transfer(
        SESSION,
        RANK_UNASSIGNED,
        Body::Join(Join {
            receiver_id: PARTY_B,
            name: "host:1",
        }),
    );
    add(
        "receiver-join-nonce",
        &mut rb,
        join,
        true,
        Some(PARTY_B),
        SESSION,
    );
    let connect = stream(
        RANK_UNASSIGNED,
        StreamBody::ConnectRequest(ConnectRequest {
            receiver_id: PARTY_B,
            buffer_packets: 64,
            name: "host:1",
        }),
    );
    add(
        "receiver-stream-connect-nonce",
        &mut rb,
        connect,
        true,
        Some(PARTY_B),
        SESSION,
    );

    // Two other key holders: another session's sender, and a second sender
    // claiming SESSION under its own nonce.
    let mut other = Keyring::for_sender(key.clone(), OTHER, OTHER_NONCE);
    add(
        "other-session-hello",
        &mut other,
        hello(OTHER),
        true,
        None,
        OTHER,
    );
    let mut second = Keyring::for_sender(key.clone(), SESSION, OTHER_NONCE);
    add(
        "second-sender-hello",
        &mut second,
        hello(SESSION),
        true,
        None,
        SESSION,
    );

    let mut fx = Fixture {
        key,
        templates,
        reference: Default::default(),
    };
    for kind in 0..KINDS {
        let mut k = keyring(&fx, kind);
        fx.reference[kind] = replay_templates(&fx, &mut k);
    }
    // The reference must reach the success paths of every keyring.
    for (kind, r) in fx.reference.iter().enumerate() {
        assert!(r.iter().filter(|r| r.is_ok()).count() >= 5, "{kind}: {r:?}");
    }
    fx
}

fn keyring(fx: &Fixture, kind: usize) -> Keyring {
    match kind {
        0 => Keyring::for_sender(fx.key.clone(), SESSION, NONCE),
        1 => Keyring::new(fx.key.clone()),
        _ => {
            let mut k = Keyring::new(fx.key.clone());
            k.open(&mut fx.templates[0].sealed.clone())
                .expect("the hello opens");
            k.take_session(SESSION, PRIMED_PARTY);
            k
        }
    }
}

/// Opens every template in order; each that opens must be its plain packet.
fn replay_templates(fx: &Fixture, k: &mut Keyring) -> Vec<Result<(), AuthError>> {
    fx.templates
        .iter()
        .map(|t| {
            let mut buf = t.sealed.clone();
            let o = k.open(&mut buf)?;
            assert_eq!(&buf[..o.len], &t.plain[..], "{} opens wrong", t.name);
            assert_eq!(o.party, t.party, "{}", t.name);
            Ok(())
        })
        .collect()
}

fn session_of(bytes: &[u8]) -> SessionId {
    bytes.get(8..16).map_or(SESSION, |b| {
        SessionId(u64::from_be_bytes(b.try_into().unwrap()))
    })
}

/// Opens `bytes` with each keyring kind. Contracts:
///
/// - no panic;
/// - only the exact bytes of an authentic packet (a template) open, to that
///   template's plain packet and party, exactly once (again: `Replayed`),
///   and the plain packet satisfies a plain decoder's contract;
/// - a refusal is counted under its reason and nothing else in the stats
///   moves; the reason agrees with the envelope (plain: `Unsealed`, not an
///   envelope: `Malformed`, another key hint: `WrongKey`);
/// - a refusal changes no state: `knows` is unchanged for every session,
///   and the keyring then opens the templates exactly as a pristine one.
///
/// Returns whether any keyring opened it.
pub fn open(bytes: &[u8]) -> bool {
    let fx = fixture();
    let ours = fx.key.id().hint();
    let sessions = [SESSION, OTHER, session_of(bytes)];
    let mut opened = false;
    for (kind, name) in KIND_NAMES.into_iter().enumerate() {
        let mut k = keyring(fx, kind);
        let knew = sessions.map(|s| k.knows(s));
        let before = *k.stats();
        let mut buf = bytes.to_vec();
        match k.open(&mut buf) {
            Ok(o) => {
                let t = fx
                    .templates
                    .iter()
                    .find(|t| t.sealed == bytes)
                    .unwrap_or_else(|| panic!("{name}: a forgery opened: {bytes:02x?}"));
                assert_eq!(
                    &buf[..o.len],
                    &t.plain[..],
                    "{name}: {} opens wrong",
                    t.name
                );
                assert_eq!(o.party, t.party, "{name}: {}", t.name);
                let mut want = before;
                want.opened += 1;
                assert_eq!(*k.stats(), want, "{name}: stats after opening {}", t.name);
                assert!(
                    k.knows(t.session),
                    "{name}: opened {} but forgot it",
                    t.name
                );
                let plain = &buf[..o.len];
                assert!(
                    oracle::transfer(plain) | oracle::stream(plain),
                    "{name}: {} opened to a packet no decoder reads",
                    t.name
                );
                let mut again = bytes.to_vec();
                assert_eq!(
                    k.open(&mut again),
                    Err(AuthError::Replayed),
                    "{name}: {} opened twice",
                    t.name
                );
                opened = true;
            }
            Err(e) => {
                let mut want = before;
                want.count(e);
                assert_eq!(*k.stats(), want, "{name}: refusal {e:?} miscounted");
                assert_eq!(
                    sessions.map(|s| k.knows(s)),
                    knew,
                    "{name}: {e:?} taught a session"
                );
                let past_hint = match Envelope::parse(bytes) {
                    Err(DecodeError::UnsupportedFlags(0)) => {
                        assert_eq!(e, AuthError::Unsealed, "{name}");
                        false
                    }
                    Err(_) => {
                        assert_eq!(e, AuthError::Malformed, "{name}");
                        false
                    }
                    Ok(env) if env.header.key_hint != ours => {
                        assert!(matches!(e, AuthError::WrongKey { .. }), "{name}: {e:?}");
                        false
                    }
                    Ok(_) => {
                        assert!(
                            matches!(
                                e,
                                AuthError::UnknownSession
                                    | AuthError::Replayed
                                    | AuthError::TooOld
                                    | AuthError::Forged
                            ),
                            "{name}: {e:?}"
                        );
                        true
                    }
                };
                // Past the key hint the keyring looked its session and
                // party up: check that it kept nothing of the refusal.
                if past_hint {
                    assert_eq!(
                        replay_templates(fx, &mut k),
                        fx.reference[kind],
                        "{name}: refusing {e:?} changed what opens"
                    );
                }
            }
        }
    }
    opened
}

/// A mutation of a template: `program[0]` picks the template, each 4 bytes
/// after it are one edit `[op, pos hi, pos lo, value]`: xor a byte, cut,
/// insert, remove, or splice another template's tail. `None` if empty.
pub fn mutate(program: &[u8]) -> Option<Vec<u8>> {
    let ts = &fixture().templates;
    let (&pick, edits) = program.split_first()?;
    let mut b = ts[usize::from(pick) % ts.len()].sealed.clone();
    for e in edits.chunks_exact(4) {
        let pos = usize::from(u16::from_be_bytes([e[1], e[2]]));
        let v = e[3];
        match e[0] % 5 {
            0 if !b.is_empty() => {
                let p = pos % b.len();
                b[p] ^= v;
            }
            1 => b.truncate(pos % (b.len() + 1)),
            2 => {
                let p = pos % (b.len() + 1);
                b.insert(p, v);
            }
            3 if !b.is_empty() => {
                b.remove(pos % b.len());
            }
            4 => {
                let o = &ts[usize::from(v) % ts.len()].sealed;
                let p = pos % (b.len().min(o.len()) + 1);
                b.truncate(p);
                b.extend_from_slice(&o[p..]);
            }
            _ => {}
        }
    }
    Some(b)
}

/// The `open` target's whole input contract: the bytes as a datagram, and
/// as a mutation program of a template. Returns whether the bytes opened
/// as they are.
pub fn open_input(data: &[u8]) -> bool {
    let raw = open(data);
    if let Some(m) = mutate(data) {
        open(&m);
    }
    raw
}

/// Parses `bytes` (UTF-8, lossily) as a key file. Contracts: no panic; a
/// refusal has a message; a parsed key re-renders to a file that parses to
/// the same key and re-renders identically, whose `id` line is the key's
/// id, and whose secret the key's `Debug` does not show. Returns whether it
/// parsed.
pub fn key_file(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    match GroupKey::parse_file(&text) {
        Ok(k) => {
            let file = k.to_file();
            let back = GroupKey::parse_file(&file).expect("a rendered key file parses");
            assert_eq!(back, k, "the rendered file holds another key");
            assert_eq!(back.to_file(), file, "rendering is not stable");
            assert!(file.contains(&format!("\nid {}\n", k.id())), "{file}");
            let secret = file
                .lines()
                .find_map(|l| l.strip_prefix("secret "))
                .expect("a secret line");
            assert!(!format!("{k:?}").contains(secret), "Debug shows the secret");
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}
