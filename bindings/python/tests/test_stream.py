"""PRMP streams as file-like objects."""

from __future__ import annotations

import os

import rmcast
from conftest import LISTEN, WAIT


def test_stream_messages_and_bytes(key, group, threads):
    messages = [os.urandom(n) for n in (1, 1000, 5000, 64 * 1024, 17)]
    big = os.urandom(200_000)  # more than max_message: cut into several

    def reader():
        with rmcast.StreamReceiver(key=key, group=group, listen_timeout=LISTEN, sender_timeout=10) as r:
            first = [r.recv_message() for _ in messages]
            buf = bytearray(3)
            n = r.readinto(buf)
            rest = r.read()
            return first, bytes(buf[:n]) + rest, r

    def iterate():
        with rmcast.StreamReceiver(key=key, group=group, listen_timeout=LISTEN, sender_timeout=10) as r:
            return list(r), r

    threads.start(reader)
    threads.start(iterate)
    with rmcast.StreamSender(receivers=2, key=key, group=group, wait=WAIT) as s:
        assert s.wait() == 2
        for m in messages:
            assert s.send(m) == len(m)
        assert s.write(big) == len(big)
    assert s.report.ok and s.report.established == 2
    assert s.report.bytes == sum(map(len, messages)) + len(big)
    (first, tail, r1), (all_msgs, r2) = threads.join()
    assert first == messages and tail == big
    assert all_msgs[: len(messages)] == messages and b"".join(all_msgs[len(messages):]) == big
    assert r1.report is not None and r1.report.complete
    assert r2.report.messages == len(all_msgs)


def test_stream_no_sender_times_out(key, group):
    r = rmcast.StreamReceiver(key=key, group=group, listen_timeout=0.3)
    try:
        r.recv_message()
    except rmcast.TransferFailed:
        pass
    else:
        raise AssertionError("expected a failure")
    finally:
        r.close()
