"""Ctrl-C during a blocking call, and asyncio."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import rmcast
from conftest import LISTEN, WAIT

CHILD = textwrap.dedent(
    """
    import sys, time, rmcast
    what, key, group = sys.argv[1:4]
    print("ready", flush=True)
    t = time.monotonic()
    try:
        if what == "recv":
            rmcast.recv(key=key, group=group)            # no listen_timeout: waits forever
        elif what == "send":
            rmcast.send(b"x" * 1000, receivers=3, key=key, group=group, wait=600)
        elif what == "stream":
            r = rmcast.StreamReceiver(key=key, group=group)
            r.recv_message()
    except KeyboardInterrupt:
        print("interrupted after %.3f" % (time.monotonic() - t), flush=True)
        sys.exit(42)
    sys.exit(1)
    """
)


@pytest.mark.parametrize("what", ["recv", "send", "stream"])
def test_sigint_interrupts_blocking_call(key, group, what):
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, what, key, group],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A test runner started in the background (`cmd &`, nohup) passes
        # SIGINT on ignored, and Python then installs no KeyboardInterrupt
        # handler: give the child the default disposition, as a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.7)  # well inside the blocking call
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=5)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 42, (out, err)
    assert "interrupted" in out
    assert took < 2.0, f"took {took:.2f}s to stop"


def test_asyncio_round_trip(key, group):
    a = np.arange(100_000, dtype=np.float64)

    async def main():
        recvs = [rmcast.aio.recv(key=key, group=group, listen_timeout=LISTEN) for _ in range(2)]
        bc_group = rmcast.random_group()
        results = await asyncio.gather(
            rmcast.aio.send(a.tobytes(), receivers=2, key=key, group=group, wait=WAIT), *recvs
        )
        arrays = await asyncio.gather(
            rmcast.aio.bcast(a, receivers=1, key=key, group=bc_group, wait=WAIT),
            rmcast.aio.bcast(key=key, group=bc_group, listen_timeout=LISTEN),
        )
        return results, arrays

    (report, r1, r2), (_, b) = asyncio.run(asyncio.wait_for(main(), 60))
    assert report.ok
    assert bytes(r1.data) == a.tobytes() == bytes(r2.data)
    np.testing.assert_array_equal(b, a)


def test_asyncio_cancel_stops_the_call(key, group):
    async def main():
        task = asyncio.ensure_future(rmcast.aio.recv(key=key, group=group))
        await asyncio.sleep(0.3)
        t = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t

    assert asyncio.run(asyncio.wait_for(main(), 20)) < 2.0


def test_cancel_token(key, group, threads):
    tok = rmcast.CancelToken()
    threads.start(lambda: rmcast.recv(key=key, group=group, cancel=tok))
    time.sleep(0.3)
    tok.cancel()
    (e,) = threads.outcomes(timeout=5)
    assert isinstance(e, rmcast.Cancelled) and tok.cancelled
