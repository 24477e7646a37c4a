"""Shared fixtures: a fresh group key and a random group per test, and a
helper that runs receivers on threads with a bounded join."""

from __future__ import annotations

import threading
from typing import Any, Callable, List

import pytest

import rmcast

# Every call in these tests is bounded: receivers give up after LISTEN
# seconds without a session, senders after WAIT seconds without receivers.
LISTEN = 15.0
WAIT = 15.0


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "group.key"
    rmcast.keygen(path)
    return str(path)


@pytest.fixture
def group():
    return rmcast.random_group()


class Threads:
    """Runs callables on threads; ``join`` returns their results or raises
    the first exception."""

    def __init__(self) -> None:
        self.threads: List[threading.Thread] = []
        self.results: List[Any] = []

    def start(self, fn: Callable[[], Any]) -> None:
        i = len(self.results)
        self.results.append(None)

        def run() -> None:
            try:
                self.results[i] = ("ok", fn())
            except BaseException as e:  # noqa: BLE001 - handed to the test
                self.results[i] = ("err", e)

        t = threading.Thread(target=run, daemon=True)
        self.threads.append(t)
        t.start()

    def join(self, timeout: float = LISTEN + WAIT + 10) -> List[Any]:
        for t in self.threads:
            t.join(timeout)
            assert not t.is_alive(), "a receiver thread did not finish in time"
        out = []
        for r in self.results:
            kind, v = r
            if kind == "err":
                raise v
            out.append(v)
        return out

    def outcomes(self, timeout: float = LISTEN + WAIT + 10) -> List[Any]:
        for t in self.threads:
            t.join(timeout)
            assert not t.is_alive(), "a receiver thread did not finish in time"
        return [v for _, v in self.results]


@pytest.fixture
def threads():
    return Threads()
