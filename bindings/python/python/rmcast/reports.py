"""Reports of sessions, as dataclasses with the fields of ``rmcast ... --json``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = ["Member", "Failure", "SendReport", "RecvReport", "StreamSendReport", "StreamRecvReport"]


def _mib(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


@dataclass(frozen=True)
class Member:
    """A receiver admitted to a session and how it fared."""

    rank: int
    name: str
    addr: str
    verified: bool
    reason: Optional[str] = None
    #: Moved to a TCP catch-up (``laggard="tcp"``) holding this many bytes.
    caught_up_from: Optional[int] = None


@dataclass(frozen=True)
class Failure:
    """A receiver that did not confirm a verified copy (``failures`` of ``--json``)."""

    rank: int
    name: str
    addr: str
    reason: str

    def __str__(self) -> str:
        return f"receiver {self.rank} ({self.name} at {self.addr}) failed: {self.reason}"


@dataclass(frozen=True)
class SendReport:
    """What a sender reports: the fields of ``rmcast send --json``, plus
    ``members`` (every admitted receiver), ``session`` and ``data_seconds``."""

    protocol: str
    receivers: int
    bytes: int
    seconds: float
    goodput_mbps: float
    verified: int
    data_packets: int
    retransmitted_packets: int
    control_packets: int
    control_per_data_packet: float
    acks: int
    naks: int
    timeouts: int
    unicast_repairs: int
    multicast_repairs: int
    group_naks: int
    group_packets: int
    group_sent: int
    auth: Dict[str, Any]
    auth_failures: List[str]
    ok: bool
    error: Optional[str]
    failures: List[Failure]
    members: List[Member] = field(default_factory=list)
    session: str = ""
    data_seconds: float = 0.0
    #: A tree: bytes never sent because every receiver held them (resume,
    #: delta; on a first push only the zero padding between files).
    skipped_bytes: int = 0
    #: FEC parity packets sent (``fec="K:P"``), proactive and on demand.
    parity_packets: int = 0
    #: Members asked again by unicast because their answer went missing
    #: while the others' arrived (a poll, the offer, the close), instead of
    #: waiting for a timeout.
    repolls: int = 0
    #: FEC in effect: ``"K:P"``, ``"K:P:D"`` (interleaved) or ``"off"``
    #: (given, or chosen by auto).
    fec: str = "off"
    #: ``protocol="auto"``: what it chose for the group and why, in a line
    #: (``rmcast send --explain``); ``None`` when the protocol was given.
    auto: Optional[str] = None
    #: ``laggard="tcp"``: the receivers moved to a TCP catch-up (``rank``,
    #: ``name``, ``addr``, ``from_bytes``, ``verified``), as ``--json``.
    caught_up: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def _from_dict(cls, d: Dict[str, Any]) -> "SendReport":
        d = dict(d)
        d["failures"] = [Failure(**f) for f in d["failures"]]
        d["members"] = [Member(**m) for m in d.get("members", [])]
        return cls(**d)

    def to_json(self) -> Dict[str, Any]:
        """The object ``rmcast send --json`` prints (plus the extra fields)."""
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """The human summary ``rmcast send`` prints on stderr."""
        lines = [
            f"rmcast send: {_mib(self.bytes)} to {self.receivers} receivers with "
            f"{self.protocol} in {self.seconds:.3f} s: {self.goodput_mbps:.1f} Mbit/s goodput",
            f"  {self.verified}/{self.receivers} receivers verified; "
            + ("sealed under the group key" if self.auth.get("sealed") else
               "INSECURE: unauthenticated, in the clear"),
        ]
        if self.error:
            lines.append(f"  error: {self.error}")
        lines += [f"  did not authenticate: {f}" for f in self.auth_failures]
        lines += [f"  {f}" for f in self.failures]
        lines.append("  ok" if self.ok else "  FAILED")
        return "\n".join(lines)


@dataclass(frozen=True)
class RecvReport:
    """What a receiver reports: the fields of ``rmcast recv --json``."""

    ok: bool
    name: str
    path: Optional[str]
    bytes: int
    seconds: float
    goodput_mbps: float
    rank: Optional[int]
    session: Optional[str]
    verified: bool
    data_packets: int
    duplicates: int
    acks: int
    naks: int
    malformed: int
    foreign: int
    auth: Dict[str, Any]
    rate_naks: int
    rate_naks_heard: int
    #: NAKs not sent: in a group of over 1,000 the repair came first.
    naks_suppressed: int
    #: A file of the same name was there: the verified object replaced it.
    replaced: bool = False
    #: A directory tree: ``{"files", "dirs", "symlinks"}``; ``None``: one file.
    tree: Optional[Dict[str, int]] = None
    #: A tree: bytes found on this disk already (resume, delta), not received.
    held_bytes: int = 0
    #: The whole group's outcome from the sender's farewell: ``True`` when
    #: every receiver verified, ``False`` (``group_error`` says who did not),
    #: ``None`` when no farewell was heard.
    group_ok: Optional[bool] = None
    group_error: Optional[str] = None

    @classmethod
    def _from_dict(cls, d: Dict[str, Any]) -> "RecvReport":
        return cls(**d)

    def to_json(self) -> Dict[str, Any]:
        """The object ``rmcast recv --json`` prints."""
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """The line ``rmcast recv`` prints on stderr."""
        where = self.path if self.path is not None else "<memory>"
        return (f"rmcast recv: {_mib(self.bytes)} verified and stored as {where} "
                f"({self.seconds:.3f} s, {self.goodput_mbps:.1f} Mbit/s)")


@dataclass(frozen=True)
class StreamSendReport:
    """What a stream sender reports when closed."""

    ok: bool
    session: str
    established: int
    members: List[str]
    removed: List[str]
    left: List[str]
    messages: int
    bytes: int
    seconds: float
    goodput_mbps: float
    auth_failures: Optional[str]


@dataclass(frozen=True)
class StreamRecvReport:
    """What a stream receiver reports when closed."""

    ok: bool
    session: Optional[str]
    rank: Optional[int]
    messages: int
    bytes: int
    seconds: float
    goodput_mbps: float
    complete: bool
    failure: Optional[str]
    auth_failures: Optional[str]
