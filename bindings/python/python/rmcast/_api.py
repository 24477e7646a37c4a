"""send / recv: one object to N receivers over reliable multicast."""

from __future__ import annotations

import ctypes
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Union

from . import _rmcast
from ._rmcast import CancelToken, Key
from .errors import InvalidArgument, SendFailed, TransferFailed
from .reports import RecvReport, SendReport

PathLike = Union[str, "os.PathLike[str]"]
KeyLike = Union[None, PathLike, Key]
Seconds = Union[None, float, int, str]

__all__ = ["send", "recv", "Received", "keygen", "load_key", "resolve_key"]


def keygen(path: PathLike) -> Key:
    """Make a group key, write it to ``path`` (mode 0600; an existing file is
    never overwritten) and return it. Same format as ``rmcast keygen``."""
    return _rmcast.keygen(os.fspath(path))


def load_key(path: PathLike) -> Key:
    """Load a key file made by ``rmcast keygen`` or :func:`keygen`."""
    return Key.load(os.fspath(path))


def resolve_key(key: KeyLike, insecure: bool) -> Optional[Key]:
    """The group key of a session, as the CLI chooses it: ``key`` (a
    :class:`Key` or a key file), else ``$RMCAST_KEY_FILE``; ``insecure=True``
    runs without one (unauthenticated, in the clear) and every member of the
    group must do the same. Neither is an error that says how to make one."""
    if insecure:
        if key is not None:
            raise InvalidArgument("pass key= or insecure=True, not both")
        return None
    if isinstance(key, Key):
        return key
    if key is None:
        env = os.environ.get(_rmcast.KEY_FILE_ENV, "")
        if not env:
            raise InvalidArgument(
                "no group key: pass key=PATH (a file from rmcast.keygen(PATH) or "
                f"`rmcast keygen`), a rmcast.Key, or set {_rmcast.KEY_FILE_ENV}; "
                "insecure=True runs without one, unauthenticated and in the clear "
                f"(CLI: {_rmcast.KEY_HOWTO})"
            )
        key = env
    return load_key(key)


def _secs(v: Seconds, what: str) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, str):
        return _rmcast.parse_duration(v)
    if v < 0:
        raise InvalidArgument(f"{what}={v} is negative")
    return float(v)


def _common(group: Optional[str], iface: Optional[str], key: KeyLike, insecure: bool) -> Dict[str, Any]:
    return {"group": group, "iface": iface, "key": resolve_key(key, insecure)}


def _normalise_protocol(protocol: str) -> str:
    p = protocol.lower().replace("_", "-")
    if p not in _rmcast.PROTOCOLS:
        raise InvalidArgument(
            f"unknown protocol {protocol!r}; one of: {', '.join(_rmcast.PROTOCOLS)}"
        )
    return p


def send_options(
    *,
    receivers: int,
    group: Optional[str] = None,
    key: KeyLike = None,
    insecure: bool = False,
    protocol: str = "auto",
    name: Optional[str] = None,
    wait: Seconds = None,
    iface: Optional[str] = None,
    ttl: Optional[int] = None,
    rate: Union[None, int, str] = None,
    packet_size: Optional[int] = None,
    window: Optional[int] = None,
    peer_timeout: Seconds = None,
    stall_timeout: Seconds = None,
    segment_size: Union[None, int, str] = None,
    fanout: Optional[int] = None,
    control: Optional[str] = None,
    sign: Optional[PathLike] = None,
    loss: Optional[float] = None,
    socket_buffer: Union[None, int, str] = None,
    fec: Optional[str] = None,
    laggard: Optional[str] = None,
    laggard_after: Seconds = None,
) -> Dict[str, Any]:
    if not isinstance(receivers, int) or receivers < 1:
        raise InvalidArgument(f"receivers must be a whole number >= 1, not {receivers!r}")
    o = _common(group, iface, key, insecure)
    o.update(
        receivers=receivers,
        protocol=_normalise_protocol(protocol),
        name=name,
        wait=_secs(wait, "wait"),
        ttl=ttl,
        rate=_rmcast.parse_rate(rate) if isinstance(rate, str) else rate,
        packet_size=packet_size,
        window=window,
        peer_timeout=_secs(peer_timeout, "peer_timeout"),
        stall_timeout=_secs(stall_timeout, "stall_timeout"),
        segment_size=_rmcast.parse_size(segment_size) if isinstance(segment_size, str) else segment_size,
        fanout=fanout,
        control=control,
        sign=os.fspath(sign) if sign is not None else None,
        loss=loss,
        socket_buffer=_rmcast.parse_size(socket_buffer) if isinstance(socket_buffer, str) else socket_buffer,
        fec=fec,
        laggard=laggard,
        laggard_after=_secs(laggard_after, "laggard_after"),
    )
    return o


def send(
    source: Any,
    receivers: int = 1,
    *,
    group: Optional[str] = None,
    key: KeyLike = None,
    insecure: bool = False,
    protocol: str = "auto",
    name: Optional[str] = None,
    wait: Seconds = None,
    check: bool = True,
    cancel: Optional[CancelToken] = None,
    **options: Any,
) -> SendReport:
    """Send one object to ``receivers`` receivers and return the report.

    ``source`` is a path (``str`` or ``os.PathLike``; the file is
    memory-mapped; a directory travels as a tree in one session and is
    stored as a directory of its name) or any object with the buffer protocol (``bytes``,
    ``bytearray``, ``memoryview``, a contiguous numpy array, ...), read in
    place without a copy: do not modify it until the call returns.

    The sender announces the session on ``group`` (``"ADDR:PORT"``; default
    ``239.77.0.1:7700``), waits up to ``wait`` seconds for ``receivers``
    receivers, sends, and waits for each to confirm a hash-verified copy.
    ``protocol`` is ``"auto"`` (the library's default: chosen for the group
    once it has registered, as ``rmcast send --protocol auto``; the
    report's ``auto`` says what and why) or any name
    ``rmcast send --protocol`` accepts (``ack``, ``nak-poll``, ``ring``,
    ``tree``, ``tcp-direct``, ``tcp-tree``, ``tcp-binomial``, ``tcp-chain``,
    ``tcp-bintree``, ``tcp-pipeline``). ``key`` is a :class:`Key` or a key file path
    (default ``$RMCAST_KEY_FILE``); ``insecure=True`` runs without one.

    Further keywords (as the CLI's flags): ``iface``, ``ttl``, ``rate``
    (bit/s or ``"90mbit"``), ``packet_size``, ``window``, ``peer_timeout``,
    ``stall_timeout`` (no progress this long ends the session, naming what
    stalled; it must exceed ``peer_timeout``), ``segment_size``, ``fanout``, ``control`` (tcp-*), ``sign`` (signing
    key file), ``loss`` (test knob), ``socket_buffer``, ``fec`` (``"K:P"``:
    repair with Reed-Solomon parity, K data packets per block, P parity
    packets sent with each and more on demand; for large groups on lossy
    links, e.g. ``"64:2"``; ``"K:P:D"`` interleaves D blocks so a burst of D
    losses costs each one packet, e.g. ``"64:2:8"``; the report's
    ``parity_packets`` counts them),
    ``laggard`` (a receiver that falls far behind the rest while it keeps
    answering: ``"tcp"`` moves it to a TCP catch-up with the sender, the
    report's ``caught_up`` names it; ``"eject"`` fails it; ``"wait"``, the
    default here, lets it set the group's pace; ``rmcast send`` defaults to
    ``"tcp"``), ``laggard_after`` (seconds it may stay half a window behind
    the median receiver; default 2).

    Raises :class:`SendFailed` (with the report and every failed receiver's
    name and reason) when a receiver did not verify its copy, unless
    ``check=False``; :class:`InvalidArgument`, :class:`RmcastIOError` for
    local problems. The GIL is released; Ctrl-C cancels the session and
    raises ``KeyboardInterrupt`` within about 100 ms.
    """
    opts = send_options(
        receivers=receivers, group=group, key=key, insecure=insecure,
        protocol=protocol, name=name, wait=wait, **options,
    )
    if isinstance(source, (str, os.PathLike)):
        src: Any = os.fspath(source)
        if isinstance(src, bytes):
            src = os.fsdecode(src)
    else:
        src = source
    report = SendReport._from_dict(_rmcast.send(src, opts, cancel))
    if check and not report.ok:
        raise SendFailed(report)
    return report


@dataclass
class Received:
    """What :func:`recv` returns.

    ``path``: where the object was stored (``out_dir`` mode), else None.
    ``data``: the bytes in memory (a writable ``memoryview``, no copy of the
    received buffer; or a view of ``into``), else None.
    """

    name: str
    path: Optional[str]
    data: Optional[memoryview]
    report: RecvReport

    @property
    def bytes(self) -> int:
        return self.report.bytes


def _owned_view(buf: Any) -> memoryview:
    """A writable memoryview of a RecvBuffer's memory, keeping it alive."""
    n = len(buf)
    if n == 0:
        return memoryview(bytearray())
    arr = (ctypes.c_char * n).from_address(buf.address())
    arr._rmcast_owner = buf  # the Rust Vec lives as long as the array
    return memoryview(arr).cast("B")


def _into_view(into: Any, n: int) -> memoryview:
    mv = memoryview(into)
    if mv.readonly:
        raise InvalidArgument("into= must be writable (a bytearray, numpy array, ...)")
    if not mv.contiguous:
        raise InvalidArgument("into= must be contiguous")
    mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
    if mv.nbytes < n:
        raise InvalidArgument(f"into= holds {mv.nbytes} bytes; the object has {n}")
    return mv


def recv_options(
    *,
    group: Optional[str] = None,
    key: KeyLike = None,
    insecure: bool = False,
    iface: Optional[str] = None,
    listen_timeout: Seconds = None,
    sender_timeout: Seconds = None,
    name: Optional[str] = None,
    max_bytes: Union[None, int, str] = None,
    sender: Optional[str] = None,
    trust: Optional[Iterable[PathLike]] = None,
    loss: Optional[float] = None,
    socket_buffer: Union[None, int, str] = None,
    store_rate: Union[None, int, str] = None,
) -> Dict[str, Any]:
    o = _common(group, iface, key, insecure)
    o.update(
        listen_timeout=_secs(listen_timeout, "listen_timeout"),
        sender_timeout=_secs(sender_timeout, "sender_timeout"),
        name=name,
        max_bytes=_rmcast.parse_size(max_bytes) if isinstance(max_bytes, str) else max_bytes,
        sender=sender,
        trust=[os.fspath(p) for p in trust] if trust is not None else None,
        loss=loss,
        socket_buffer=_rmcast.parse_size(socket_buffer) if isinstance(socket_buffer, str) else socket_buffer,
        store_rate=_rmcast.parse_size(store_rate) if isinstance(store_rate, str) else store_rate,
    )
    return o


def _recv_raw(opts: Dict[str, Any], out_dir: Optional[PathLike], cancel: Optional[CancelToken]):
    """(report, RecvBuffer | memoryview | None)."""
    if out_dir is not None:
        opts["out_dir"] = os.fspath(out_dir)
        d, _ = _rmcast.recv(opts, False, cancel)
        return RecvReport._from_dict(d), None
    if opts.get("sender"):
        # A TCP overlay stores to a directory only: receive into a private
        # one and read the object back.
        with tempfile.TemporaryDirectory(prefix="rmcast-") as tmp:
            opts["out_dir"] = tmp
            d, _ = _rmcast.recv(opts, False, cancel)
            with open(d["path"], "rb") as f:
                data = bytearray(f.read())
        d["path"] = None
        return RecvReport._from_dict(d), memoryview(data)
    d, buf = _rmcast.recv(opts, True, cancel)
    return RecvReport._from_dict(d), buf


def recv(
    out_dir: Optional[PathLike] = None,
    *,
    into: Any = None,
    group: Optional[str] = None,
    key: KeyLike = None,
    insecure: bool = False,
    listen_timeout: Seconds = None,
    sender_timeout: Seconds = None,
    cancel: Optional[CancelToken] = None,
    **options: Any,
) -> Received:
    """Join the next session announced on ``group`` and receive its object.

    With ``out_dir`` the object is stored there under its offered name
    (written to a hidden partial file, renamed once its BLAKE3 hash
    matched). Without it the object is kept in memory: ``Received.data`` is
    a writable memoryview of the received buffer (no copy), or, with
    ``into=`` (a writable buffer at least as large as the object), the bytes
    are copied into ``into`` and ``data`` is a view of its first bytes.

    ``listen_timeout``: give up when no session is announced this long
    (default: wait forever; Ctrl-C still works). ``sender_timeout``: give up
    when the sender is silent this long (default 10 s). Further keywords:
    ``iface``, ``name`` (shown in the sender's report), ``max_bytes``,
    ``sender`` (``"ADDR:PORT"``: join a tcp-* overlay sender), ``trust``
    (public key files: keep only signed objects), ``loss`` (test knob),
    ``socket_buffer``, ``store_rate`` (test knob: store at most this many
    bytes/s, a slow disk; ``"2MB"`` or an int).

    Raises :class:`TransferFailed`, :class:`Refused`, :class:`InvalidArgument`
    or :class:`RmcastIOError`; Ctrl-C leaves the session and raises
    ``KeyboardInterrupt``.
    """
    if out_dir is not None and into is not None:
        raise InvalidArgument("pass out_dir= or into=, not both")
    opts = recv_options(
        group=group, key=key, insecure=insecure, listen_timeout=listen_timeout,
        sender_timeout=sender_timeout, **options,
    )
    report, buf = _recv_raw(opts, out_dir, cancel)
    if not report.verified:
        raise TransferFailed(f"the object {report.name!r} did not verify")
    if out_dir is not None:
        return Received(report.name, report.path, None, report)
    src = buf if isinstance(buf, memoryview) else _owned_view(buf)
    if into is not None:
        dst = _into_view(into, len(src))
        dst[: len(src)] = src
        return Received(report.name, None, dst[: len(src)], report)
    return Received(report.name, None, src, report)
