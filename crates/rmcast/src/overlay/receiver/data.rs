//! The data phase's threads of an overlay receiver: the acceptor of the
//! parents' connections, a reader per parent edge (accepted, or coming
//! back on a connection this node opened), a writer per child edge, and
//! the disk writer that stores, hashes and commits the object.

use super::{ChildCmd, Ev, Expected, Node};
use crate::Status;
use crate::overlay::frame::FrameReader;
use crate::overlay::io::{self, Pool, Seg, TICK, XferError};
use crate::overlay::secure::{self, SegmentOut};
use crate::storage::Sink;
use rmcast_proto::overlay::{Forwarding, SegmentSet, Segments};
use rmcast_proto::security::{FRAME_HEADER_LEN, FRAME_OVERHEAD, FrameKind, Opener, Sealer};
use rmcast_wire::overlay::{Assignment, Msg};
use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// Bytes read from the stored file per write when serving children from it.
const FILE_CHUNK: usize = 256 << 10;

/// Accepts the parents' data connections; the machine says which are
/// welcome, and a reader starts for each.
pub(super) fn accept_parents<'s, 'n: 's>(
    scope: &'s std::thread::Scope<'s, 'n>,
    node: &'n Node<'_>,
    a: &Assignment,
    listener: TcpListener,
    pools: &Arc<Vec<Pool>>,
    disk_tx: &mpsc::SyncSender<Seg>,
    children: &[Option<mpsc::SyncSender<ChildCmd>>],
) {
    if let Err(e) = listener.set_nonblocking(true) {
        let _ = node.tx.send(Ev::DiskStopped);
        tracing::warn!("cannot poll the data listener: {e}");
        return;
    }
    // Until the session ends: the sender may re-attach an edge whose
    // parent failed (a second connection for the same parent edge).
    while let Some(accepted) = io::accept_unless(&listener, &node.abort) {
        let (mut stream, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("cannot accept a data connection: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let inactivity = node.lock().inactivity();
        if let Err(e) = stream
            .set_nonblocking(false)
            .and_then(|()| io::tune(&stream))
        {
            tracing::warn!("dropping data connection from {peer}: {e}");
            continue;
        }
        let mut sealer = None;
        let mut frames = match &node.cfg.key {
            None => FrameReader::default(),
            Some(key) => {
                match secure::respond(
                    &mut stream,
                    "receiver",
                    key,
                    a.session,
                    &node.abort,
                    inactivity,
                ) {
                    Ok(ch) => {
                        sealer = Some(ch.sealer);
                        FrameReader::sealed(ch.opener)
                    }
                    Err(e) => {
                        let why = format!("data connection from {peer} {e}");
                        tracing::warn!("{why}");
                        if e.is_auth() {
                            let mut f =
                                node.auth_failures.lock().unwrap_or_else(|e| e.into_inner());
                            if f.len() < rmcast_proto::overlay::AUTH_FAILURES_MAX {
                                f.push(why);
                            }
                        }
                        continue;
                    }
                }
            }
        };
        let taken = match io::read_msg(&mut stream, &mut frames, &node.abort, inactivity) {
            Ok(hello) => {
                let mut m = node.lock();
                let r = m.handle_parent_hello(node.clock.now(), &hello);
                if let Ok(pi) = r {
                    let mut streams =
                        (node.parent_streams.lock()).unwrap_or_else(|e| e.into_inner());
                    streams.resize_with(a.parents.len(), || None);
                    streams[pi] = stream.try_clone().ok();
                    let mut back = (node.back_streams.lock()).unwrap_or_else(|e| e.into_inner());
                    back.resize_with(a.parents.len(), || None);
                    back[pi] = stream.try_clone().ok().map(|s| (s, sealer.take()));
                }
                let first = match hello {
                    Msg::DataHello { first, .. } => first,
                    _ => 0,
                };
                r.map(|pi| (pi, first))
            }
            Err(e) => Err(e.to_string()),
        };
        let (pi, first) = match taken {
            Ok(taken) => taken,
            Err(why) => {
                tracing::warn!("dropping data connection from {peer}: {why}");
                continue;
            }
        };
        if first > 0 {
            tracing::warn!(
                "rank {}: re-attached to the sender in place of {}, from its segment {first}",
                a.rank,
                a.parents[pi]
            );
        }
        let opener = frames.into_opener();
        let a = a.clone();
        let (disk_tx, children, pools) = (disk_tx.clone(), children.to_vec(), pools.clone());
        scope.spawn(move || {
            let (pool, s) = (&pools[pi], &mut stream);
            let r = read_parent(node, &a, (pi, first), s, opener, pool, &disk_tx, &children);
            let ev = match r {
                Ok(()) => Ev::Poke,
                Err(e) => {
                    // Both ways, should a child edge ride back on it.
                    let _ = s.shutdown(std::net::Shutdown::Both);
                    Ev::ParentFailed(pi, e.to_string())
                }
            };
            let _ = node.tx.send(ev);
        });
    }
}

/// What the reader of a parent edge that comes back on a connection this
/// node opened needs ([`DataOp::Connect`]'s `back`).
pub(super) struct Back {
    /// The parent edge.
    pub(super) pi: usize,
    pub(super) disk_tx: mpsc::SyncSender<Seg>,
    pub(super) children: Vec<Option<mpsc::SyncSender<ChildCmd>>>,
}

/// Reads parent edge `b.pi`, which its node writes back on the connection
/// this node opened to it: its `DataHello` first (the machine checks it is
/// that edge), then its segments, as for an accepted connection.
pub(super) fn read_back(
    node: &Node<'_>,
    a: &Assignment,
    mut s: TcpStream,
    opener: Option<Opener>,
    pools: &[Pool],
    b: Back,
) {
    let inactivity = node.lock().inactivity();
    let mut frames = opener.map_or_else(FrameReader::default, FrameReader::sealed);
    let taken = match io::read_msg(&mut s, &mut frames, &node.abort, inactivity) {
        Err(e) => Err(e.to_string()),
        Ok(hello) => {
            let mut m = node.lock();
            match m.handle_parent_hello(node.clock.now(), &hello) {
                Ok(pi) if pi == b.pi => {
                    let mut streams =
                        (node.parent_streams.lock()).unwrap_or_else(|e| e.into_inner());
                    streams.resize_with(a.parents.len(), || None);
                    streams[pi] = s.try_clone().ok();
                    Ok(())
                }
                r => {
                    // Refused (as an accepted connection would be): the
                    // machine keeps waiting for, or re-attaching, the edge.
                    drop(m);
                    tracing::warn!("dropping the way back from {}: {r:?}", a.parents[b.pi]);
                    let _ = s.shutdown(std::net::Shutdown::Both);
                    return;
                }
            }
        }
    };
    let r = taken.and_then(|()| {
        let (pi, pool) = (b.pi, &pools[b.pi]);
        let opener = frames.into_opener();
        read_parent(
            node,
            a,
            (pi, 0),
            &mut s,
            opener,
            pool,
            &b.disk_tx,
            &b.children,
        )
        .map_err(|e| e.to_string())
    });
    let ev = match r {
        Ok(()) => Ev::Poke,
        Err(why) => {
            let _ = s.shutdown(std::net::Shutdown::Both);
            Ev::ParentFailed(b.pi, why)
        }
    };
    let _ = node.tx.send(ev);
}

pub(super) fn node_keyed(node: &Node<'_>) -> bool {
    node.cfg.key.is_some()
}

/// Reads the segments a parent edge carries, from its `first`-th on
/// (keyed: each in a sealed frame, opened where it lies in its pool slot);
/// the machine says which children each goes to, and every one goes to
/// the disk writer.
///
/// A silent parent is not timed out here: the sender hears every node's
/// heartbeat, cuts out one that goes silent and detaches its children
/// (`DataOp::Drop` closes this connection). A reader that timed out by
/// itself would also fire below a live parent that is only waiting for
/// its own, and the sender would re-attach the whole subtree.
#[allow(clippy::too_many_arguments)]
fn read_parent(
    node: &Node<'_>,
    a: &Assignment,
    (pi, first): (usize, u64),
    stream: &mut TcpStream,
    mut opener: Option<Opener>,
    pool: &Pool,
    disk_tx: &mpsc::SyncSender<Seg>,
    children: &[Option<mpsc::SyncSender<ChildCmd>>],
) -> Result<(), XferError> {
    let set = a.parents[pi].segments;
    let segs = Segments::new(a.size, a.segment_size);
    for i in first..set.count(segs.count()) {
        let index = set.nth(i);
        let len = segs.len(index);
        let slot = pool.acquire(&node.abort).ok_or(XferError::Aborted)?;
        let (frame, at) = match opener {
            Some(_) => (len + FRAME_OVERHEAD, FRAME_HEADER_LEN),
            None => (len, 0),
        };
        let r = {
            let mut buf = pool.fill(slot);
            io::read_exact(stream, &mut buf[..frame], &node.abort, None).and_then(|()| {
                let Some(op) = opener.as_mut() else {
                    return Ok(());
                };
                match op.open_in_place(&mut buf[..frame]) {
                    Ok((FrameKind::Data, _)) => Ok(()),
                    Ok(_) => Err(XferError::Auth(format!(
                        "{} sent a control frame where segment {index} belongs",
                        a.parents[pi]
                    ))),
                    Err(e) => Err(XferError::Auth(format!(
                        "segment {index} from {} failed authentication: {e}",
                        a.parents[pi]
                    ))),
                }
            })
        };
        if let Err(e) = r {
            pool.share(slot, 1);
            pool.release(slot);
            return Err(e);
        }
        if i == first {
            tracing::debug!("first segment from {}", a.parents[pi]);
        }
        let route = node.lock().handle_segment(node.clock.now(), pi, index);
        pool.share(slot, 1 + route.len());
        let seg = Seg {
            pool: pi as u32,
            slot,
            index,
            at: at as u32,
            len: len as u32,
        };
        if disk_tx.send(seg).is_err() {
            pool.release(slot);
        }
        for ci in route {
            let sent = children[ci]
                .as_ref()
                .is_some_and(|c| c.send(ChildCmd::Seg(seg)).is_ok());
            if !sent {
                pool.release(slot);
            }
        }
    }
    tracing::debug!("read every segment from {}", a.parents[pi]);
    Ok(())
}

/// Writes what goes to child `ci`: routed segments from the pools as they
/// come (pipelined), or the whole share from the verified file once the
/// machine says so (store-and-forward). Keyed, each segment is sealed in
/// a frame of its own (under this connection's keys: a relayed segment is
/// opened and sealed again).
fn write_child(
    node: &Node<'_>,
    a: &Assignment,
    ci: usize,
    s: &mut TcpStream,
    sealer: Option<Sealer>,
    rx: &mpsc::Receiver<ChildCmd>,
    pools: &[Pool],
) -> Result<(), XferError> {
    let child = &a.children[ci];
    let segs = Segments::new(a.size, a.segment_size);
    let pipelined = Forwarding::of(a.shape) == Forwarding::Pipelined;
    let count = child.segments.count(segs.count());
    let inactivity = node.lock().inactivity();
    let batch = if pipelined { 0 } else { FILE_CHUNK };
    let mut out = SegmentOut::new(sealer, a.segment_size as usize, batch);
    let mut written = 0;
    while written < count || !pipelined {
        match rx.recv_timeout(TICK) {
            Ok(ChildCmd::Seg(seg)) => {
                debug_assert_eq!(seg.index, child.segments.nth(written));
                let pool = &pools[seg.pool as usize];
                let r = if out.sealed() {
                    // Sealed into the writer's own buffer: the slot is free
                    // again before the write.
                    let r = out.stage(
                        s,
                        &pool.view(seg.slot)[seg.range()],
                        &node.abort,
                        inactivity,
                    );
                    pool.release(seg.slot);
                    r.and_then(|()| out.flush(s, &node.abort, inactivity))
                } else {
                    let r = io::write_all(
                        s,
                        &pool.view(seg.slot)[seg.range()],
                        &node.abort,
                        inactivity,
                    );
                    pool.release(seg.slot);
                    r
                };
                r?;
                written += 1;
            }
            Ok(ChildCmd::File(path, set)) => {
                let file = File::open(&path).map_err(XferError::Io)?;
                return send_file_share(&file, segs, set, s, &mut out, &node.abort, inactivity);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if node.abort.load(Ordering::Relaxed) {
                    return Err(XferError::Aborted);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(XferError::Aborted),
        }
    }
    Ok(())
}

/// Writes every segment to storage, then verifies against the sender's hash
/// (once the machine passes it on) and commits.
pub(super) fn disk(
    node: &Node<'_>,
    segs: Segments,
    mut sink: Sink,
    rx: &mpsc::Receiver<Seg>,
    expected: &mpsc::Receiver<Expected>,
    pools: &[Pool],
    (name, size): &(String, u64),
) -> Ev {
    let total = segs.count();
    let mut got = 0u64;
    // Segments from several parents land out of order: hash the stored
    // prefix as it grows (read back from the page cache, off the tail)
    // rather than the whole copy after the last byte.
    let mut stored = vec![0u64; usize::try_from(total.div_ceil(64)).unwrap_or(0)];
    let mut prefix = 0u64;
    while got < total {
        match rx.recv_timeout(TICK) {
            Ok(seg) => {
                let pool = &pools[seg.pool as usize];
                let r = sink.write(segs.offset(seg.index), &pool.view(seg.slot)[seg.range()]);
                pool.release(seg.slot);
                if let Err(e) = r {
                    let status = if e.raw_os_error() == Some(libc::ENOSPC) {
                        Status::NoSpace
                    } else {
                        Status::Io
                    };
                    return Ev::Disk(status, format!("cannot write the object: {e}"));
                }
                if let Some(w) = stored.get_mut((seg.index / 64) as usize) {
                    *w |= 1 << (seg.index % 64);
                }
                let before = prefix;
                while prefix < total && stored[(prefix / 64) as usize] & (1 << (prefix % 64)) != 0 {
                    prefix += 1;
                }
                if prefix > before
                    && let Err(e) = sink.hash_ahead(segs.offset(prefix).min(segs.size))
                {
                    return Ev::Disk(Status::Io, format!("cannot read back the object: {e}"));
                }
                got += 1;
                let now = node.clock.now();
                node.lock().handle_stored(now, seg.index, seg.len as usize);
                if got == total {
                    let _ = node.tx.send(Ev::Poke);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if node.abort.load(Ordering::Relaxed) {
                    return Ev::DiskStopped;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return Ev::DiskStopped,
        }
    }
    tracing::debug!("stored every segment");
    let got = match sink.hash() {
        Ok(h) => h,
        Err(e) => return Ev::Disk(Status::Io, format!("cannot read back the object: {e}")),
    };
    let (want, signature) = loop {
        match expected.recv_timeout(TICK) {
            Ok(h) => break h,
            Err(mpsc::RecvTimeoutError::Timeout) if !node.abort.load(Ordering::Relaxed) => {}
            Err(_) => return Ev::DiskStopped,
        }
    };
    if got != want {
        return Ev::Disk(
            Status::HashMismatch,
            "the received bytes do not match the object's BLAKE3 hash".into(),
        );
    }
    if !node.cfg.trust.is_empty()
        && !crate::keys::signature_trusted(&node.cfg.trust, signature.as_ref(), &got, *size, name)
    {
        // Intact, but not vouched for by a key we trust: keep nothing.
        let text = if signature.is_some() {
            "the object's signature does not verify under any --trust key"
        } else {
            "the object is not signed, and --trust requires a signature"
        };
        return Ev::Disk(Status::Untrusted, text.into());
    }
    match sink.commit() {
        Ok(path) => Ev::Verified(path),
        Err(e) => Ev::Disk(Status::Io, format!("cannot store the object: {e}")),
    }
}

/// Writes child edge `ci` on `s`: `hello` first when it is given (an edge
/// written back on a connection its peer opened), then its segments
/// ([`write_child`]). A failure shuts the connection down both ways, so
/// the peer hears it on either direction it reads, and is reported as
/// [`child_failed`] does; success is reported to the driver.
#[allow(clippy::too_many_arguments)]
pub(super) fn serve_child(
    node: &Node<'_>,
    a: &Assignment,
    ci: usize,
    mut s: TcpStream,
    mut sealer: Option<Sealer>,
    hello: Option<&Msg>,
    rx: &mpsc::Receiver<ChildCmd>,
    pools: &[Pool],
) {
    let limit = node.lock().inactivity();
    let r = hello
        .map_or(Ok(()), |h| io::send_msg(&mut s, sealer.as_mut(), h, limit))
        .and_then(|()| write_child(node, a, ci, &mut s, sealer, rx, pools));
    match r {
        Ok(()) => {
            tracing::debug!("wrote every segment to {}", a.children[ci]);
            let _ = node.tx.send(Ev::Child(ci, Ok(())));
        }
        Err(e) => {
            let _ = s.shutdown(std::net::Shutdown::Both);
            child_failed(node, ci, &e, rx, pools);
        }
    }
}

/// Child edge `ci` failed with `e` (or its connection never opened): the
/// driver hears it, and what still arrives for it is released.
pub(super) fn child_failed(
    node: &Node<'_>,
    ci: usize,
    e: &XferError,
    rx: &mpsc::Receiver<ChildCmd>,
    pools: &[Pool],
) {
    let _ = node.tx.send(Ev::Child(ci, Err(e.to_string())));
    drain(rx, pools, &node.abort);
}

/// Releases whatever still arrives for a child that failed, so the pool
/// never runs dry because of it.
fn drain(rx: &mpsc::Receiver<ChildCmd>, pools: &[Pool], abort: &AtomicBool) {
    loop {
        match rx.recv_timeout(TICK) {
            Ok(ChildCmd::Seg(seg)) => pools[seg.pool as usize].release(seg.slot),
            Ok(ChildCmd::File(..)) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if abort.load(Ordering::Relaxed) {
                    return;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn send_file_range(
    file: &File,
    size: u64,
    s: &mut TcpStream,
    buf: &mut [u8],
    abort: &AtomicBool,
    inactivity: Duration,
) -> Result<(), XferError> {
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], offset)
            .map_err(XferError::Io)?;
        io::write_all(s, &buf[..n], abort, inactivity)?;
        offset += n as u64;
    }
    Ok(())
}

/// Sends the segments of `set` from the verified file (keyed: each read
/// straight into its sealed frame in `out`'s buffer).
fn send_file_share(
    file: &File,
    segs: Segments,
    set: SegmentSet,
    s: &mut TcpStream,
    out: &mut SegmentOut,
    abort: &AtomicBool,
    inactivity: Duration,
) -> Result<(), XferError> {
    if out.sealed() {
        for i in 0..set.count(segs.count()) {
            let k = set.nth(i);
            let fill = |b: &mut [u8]| file.read_exact_at(b, segs.offset(k));
            out.segment_with(s, segs.len(k), fill, abort, inactivity)?;
        }
        return out.flush(s, abort, inactivity);
    }
    let mut buf = vec![0u8; FILE_CHUNK.max(segs.segment_size as usize)];
    if set == SegmentSet::All {
        return send_file_range(file, segs.size, s, &mut buf, abort, inactivity);
    }
    for i in 0..set.count(segs.count()) {
        let k = set.nth(i);
        let piece = &mut buf[..segs.len(k)];
        file.read_exact_at(piece, segs.offset(k))
            .map_err(XferError::Io)?;
        io::write_all(s, piece, abort, inactivity)?;
    }
    Ok(())
}
