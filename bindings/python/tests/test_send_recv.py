"""send/recv of bytes and files, keys, protocols and receiver failures."""

from __future__ import annotations

import os

import pytest

import rmcast
from conftest import LISTEN, WAIT


def test_bytes_to_two_receivers(key, group, threads):
    payload = os.urandom(300_000)
    for i in range(2):
        threads.start(lambda i=i: rmcast.recv(key=key, group=group, listen_timeout=LISTEN, name=f"r{i}"))
    report = rmcast.send(payload, receivers=2, key=key, group=group, name="blob.bin", wait=WAIT)
    got = threads.join()
    assert report.ok and report.verified == 2 and report.bytes == len(payload)
    assert report.protocol == "nak-poll" and report.auth["sealed"]
    assert sorted(m.name for m in report.members) == ["r0", "r1"]
    for r in got:
        assert r.name == "blob.bin" and r.path is None
        assert bytes(r.data) == payload
        assert r.report.verified and r.report.bytes == len(payload)
    assert set(report.to_json()) >= {"protocol", "receivers", "bytes", "ok", "failures", "auth"}


def test_file_to_directory(key, group, threads, tmp_path):
    src = tmp_path / "in.dat"
    src.write_bytes(os.urandom(1_000_000) + b"end")
    out = tmp_path / "out"
    threads.start(lambda: rmcast.recv(out, key=key, group=group, listen_timeout=LISTEN))
    report = rmcast.send(src, receivers=1, key=rmcast.load_key(key), group=group, wait=WAIT)
    (got,) = threads.join()
    assert report.ok
    assert got.path == str(out / "in.dat") and got.data is None
    assert (out / "in.dat").read_bytes() == src.read_bytes()


def test_tree_to_directory(key, group, threads, tmp_path):
    src = tmp_path / "ckpt"
    (src / "sub" / "empty").mkdir(parents=True)
    (src / "a.bin").write_bytes(os.urandom(300_000))
    (src / "sub" / "b.txt").write_bytes(b"b")
    os.symlink("a.bin", src / "latest")
    out = tmp_path / "out"
    threads.start(lambda: rmcast.recv(out, key=key, group=group, listen_timeout=LISTEN))
    report = rmcast.send(src, receivers=1, key=key, group=group, wait=WAIT)
    (got,) = threads.join()
    assert report.ok
    assert got.path == str(out / "ckpt")
    assert got.report.tree == {"files": 2, "dirs": 2, "symlinks": 1}
    assert (out / "ckpt" / "a.bin").read_bytes() == (src / "a.bin").read_bytes()
    assert (out / "ckpt" / "sub" / "b.txt").read_bytes() == b"b"
    assert (out / "ckpt" / "sub" / "empty").is_dir()
    assert os.readlink(out / "ckpt" / "latest") == "a.bin"
    # Only the zero padding between files needs no packet the first time.
    assert report.skipped_bytes < 8192 and got.report.held_bytes == 0
    # The next version: only what changed travels.
    (src / "sub" / "b.txt").write_bytes(b"b, version 2")
    threads.start(lambda: rmcast.recv(out, key=key, group=group, listen_timeout=LISTEN))
    report = rmcast.send(src, receivers=1, key=key, group=group, wait=WAIT)
    got = threads.join()[-1]
    assert report.ok and got.report.replaced
    assert got.report.held_bytes == 300_000 and report.skipped_bytes >= 290_000
    assert (out / "ckpt" / "sub" / "b.txt").read_bytes() == b"b, version 2"


def test_recv_into_bytearray(key, group, threads):
    buf = bytearray(100)
    threads.start(lambda: rmcast.recv(into=buf, key=key, group=group, listen_timeout=LISTEN))
    rmcast.send(b"x" * 40, receivers=1, key=key, group=group, wait=WAIT)
    (got,) = threads.join()
    assert bytes(got.data) == b"x" * 40 and buf[:40] == b"x" * 40 and buf[40:] == bytes(60)


@pytest.mark.parametrize(
    "protocol", ["auto", "ack", "nak-poll", "ring", "tree", "tcp-chain", "tcp-pipeline"]
)
def test_every_protocol(key, group, threads, protocol, tmp_path):
    payload = os.urandom(200_000)
    extra = {}
    recv_extra = {}
    if protocol.startswith("tcp-"):
        # The overlay's control address, on a port of the test's own.
        control = "127.0.0.1:" + group.split(":")[1]
        extra = {"control": control}
        recv_extra = {"sender": control}
    for i in range(2):
        threads.start(lambda i=i: rmcast.recv(key=key, group=group, listen_timeout=LISTEN, **recv_extra))
    report = rmcast.send(payload, receivers=2, key=key, group=group, protocol=protocol, wait=WAIT,
                         stall_timeout=30, **extra)
    got = threads.join()
    assert report.ok and all(bytes(r.data) == payload for r in got)


def test_fec_repairs_with_parity(key, group, threads):
    payload = os.urandom(3_000_000)
    for _ in range(3):
        threads.start(lambda: rmcast.recv(key=key, group=group, listen_timeout=LISTEN))
    report = rmcast.send(payload, receivers=3, key=key, group=group, protocol="nak-poll",
                         wait=WAIT, fec="32:1:4", loss=0.05)
    got = threads.join()
    assert report.ok and all(bytes(r.data) == payload for r in got)
    assert report.fec == "32:1:4"
    # One proactive parity packet per block of 32 (4 blocks interleaved),
    # more on demand; data goes again only as a stall poll after a timeout.
    assert report.parity_packets > report.data_packets // 32
    assert report.retransmitted_packets <= report.timeouts
    with pytest.raises(rmcast.InvalidArgument, match="is not K:P"):
        rmcast.send(b"x", receivers=1, key=key, group=group, protocol="nak-poll", fec="64")
    with pytest.raises(rmcast.InvalidArgument, match="interleaved blocks is outside"):
        rmcast.send(b"x", receivers=1, key=key, group=group, protocol="nak-poll", fec="64:2:0")
    with pytest.raises(rmcast.InvalidArgument, match="UDP multicast"):
        rmcast.send(b"x", receivers=1, key=key, protocol="tcp-chain", fec="8:1")


def test_a_slow_receiver_catches_up_over_tcp(key, group, threads):
    payload = os.urandom(6_000_000)
    for i in range(3):
        # r1 stores 1.5 MB/s against the group's 12.5 MB/s.
        slow = {"store_rate": 1_500_000} if i == 1 else {}
        threads.start(lambda i=i, slow=slow: rmcast.recv(key=key, group=group, listen_timeout=LISTEN,
                                                         name=f"r{i}", **slow))
    report = rmcast.send(payload, receivers=3, key=key, group=group, wait=WAIT, rate="100mbit",
                         laggard="tcp", laggard_after=0.3)
    got = threads.join()
    assert report.ok and all(bytes(r.data) == payload for r in got)
    assert [c["name"] for c in report.caught_up] == ["r1"], report.caught_up
    assert report.caught_up[0]["verified"] and report.caught_up[0]["from_bytes"] < len(payload)
    assert [m.name for m in report.members if m.caught_up_from is not None] == ["r1"]
    fast = max(got[0].report.seconds, got[2].report.seconds)
    slow = got[1].report.seconds
    # The two others did not wait for it: its disk needs 4 s for 6 MB.
    assert fast < slow / 2, (fast, slow)
    with pytest.raises(rmcast.InvalidArgument, match="one of"):
        rmcast.send(b"x", receivers=1, key=key, group=group, laggard="later")
    with pytest.raises(rmcast.InvalidArgument, match="not wait"):
        rmcast.send(b"x", receivers=1, key=key, group=group, laggard_after=1)
    with pytest.raises(rmcast.InvalidArgument, match="UDP multicast"):
        rmcast.send(b"x", receivers=1, key=key, protocol="tcp-chain", laggard="tcp")


def test_auto_is_the_default_and_says_what_it_chose(key, group, threads):
    payload = os.urandom(200_000)
    for _ in range(2):
        threads.start(lambda: rmcast.recv(key=key, group=group, listen_timeout=LISTEN))
    report = rmcast.send(payload, receivers=2, key=key, group=group, wait=WAIT, fec="16:1")
    got = threads.join()
    assert report.ok and all(bytes(r.data) == payload for r in got)
    assert report.protocol == "nak-poll" and report.fec == "16:1"
    assert report.auto.startswith("auto: 2 receivers, 200000 bytes"), report.auto
    assert "FEC 16:1 as given" in report.auto
    assert report.parity_packets > 0
    threads.start(lambda: rmcast.recv(key=key, group=group, listen_timeout=LISTEN))
    named = rmcast.send(b"x" * 1000, receivers=1, key=key, group=group, wait=WAIT,
                        protocol="ring", window=8)
    threads.join()
    assert named.protocol == "ring" and named.auto is None and named.fec == "off"


def test_insecure_both_sides(group, threads):
    threads.start(lambda: rmcast.recv(insecure=True, group=group, listen_timeout=LISTEN))
    report = rmcast.send(b"plain", receivers=1, insecure=True, group=group, wait=WAIT)
    (got,) = threads.join()
    assert bytes(got.data) == b"plain" and not report.auth["sealed"]


def test_key_is_required(group, monkeypatch):
    monkeypatch.delenv(rmcast.KEY_FILE_ENV, raising=False)
    with pytest.raises(rmcast.InvalidArgument, match="no group key"):
        rmcast.send(b"x", receivers=1, group=group)
    with pytest.raises(rmcast.InvalidArgument, match="not both"):
        rmcast.recv(key="k", insecure=True, group=group)


def test_key_from_environment(key, group, threads, monkeypatch):
    monkeypatch.setenv(rmcast.KEY_FILE_ENV, key)
    threads.start(lambda: rmcast.recv(group=group, listen_timeout=LISTEN))
    assert rmcast.send(b"env", receivers=1, group=group, wait=WAIT).auth["sealed"]
    assert bytes(threads.join()[0].data) == b"env"


def test_bad_arguments(key, group):
    with pytest.raises(rmcast.InvalidArgument, match="unknown protocol"):
        rmcast.send(b"x", receivers=1, key=key, group=group, protocol="carrier-pigeon")
    with pytest.raises(rmcast.InvalidArgument, match="receivers"):
        rmcast.send(b"x", receivers=0, key=key, group=group)
    with pytest.raises(rmcast.InvalidArgument, match="not a multicast address|ADDR:PORT"):
        rmcast.send(b"x", receivers=1, key=key, group="10.0.0.1:5000", wait=1)
    with pytest.raises(rmcast.RmcastIOError):
        rmcast.send("/nonexistent/file", receivers=1, key=key, group=group)
    # A stall timeout must leave room to name a dead receiver first.
    with pytest.raises(rmcast.InvalidArgument, match="stall"):
        rmcast.send(b"x", receivers=1, key=key, group=group, peer_timeout=2, stall_timeout=1)
    with pytest.raises(rmcast.InvalidArgument, match="stall_timeout"):
        rmcast.send(b"x", receivers=1, key=key, protocol="tcp-chain", control="127.0.0.1:0",
                    peer_timeout=2, stall_timeout=1)


def test_failed_receiver_raises_on_sender_with_its_name(key, group, threads):
    threads.start(lambda: rmcast.recv(key=key, group=group, listen_timeout=LISTEN, name="fine"))
    threads.start(
        lambda: rmcast.recv(key=key, group=group, listen_timeout=LISTEN, name="too-small", max_bytes=1000)
    )
    with pytest.raises(rmcast.SendFailed) as info:
        rmcast.send(os.urandom(50_000), receivers=2, key=key, group=group, wait=WAIT)
    e = info.value
    assert [f.name for f in e.failures] == ["too-small"]
    assert e.failures[0].reason and e.failures[0].addr.startswith("127.0.0.1:")
    assert "too-small" in str(e) and "FAILED" in str(e)
    assert e.report.verified == 1 and not e.report.ok
    fine, small = threads.outcomes()
    assert isinstance(fine, rmcast.Received)
    assert isinstance(small, rmcast.Refused)
    # check=False returns the report instead
    threads2 = type(threads)()
    g2 = rmcast.random_group()
    threads2.start(lambda: rmcast.recv(key=key, group=g2, listen_timeout=LISTEN, max_bytes=10))
    report = rmcast.send(b"y" * 100, receivers=1, key=key, group=g2, wait=WAIT, check=False)
    assert not report.ok and report.failures and report.failures[0].rank == 0
    threads2.outcomes()


def test_listen_timeout(key, group):
    with pytest.raises(rmcast.NoSession):
        rmcast.recv(key=key, group=group, listen_timeout=0.3)
