"""PRMP message streams as file-like objects.

:class:`StreamSender` announces a stream on a group, admits ``receivers``
receivers and sends messages (``send``) or bytes (``write``, cut into
messages of at most ``max_message`` bytes); every receiver that stays in
the session gets every message, in order. :class:`StreamReceiver` joins the
next stream on the group; ``read``/``readinto`` see the stream as bytes,
``recv_message`` and iteration return whole messages.

Blocking calls release the GIL and answer Ctrl-C within ~50 ms. An
interrupted ``send``/``read`` is not lost: it goes on in the background
and its outcome (an error, or the message read) comes with the next call.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from . import _rmcast
from ._api import KeyLike, Seconds, _secs, resolve_key
from .reports import StreamRecvReport, StreamSendReport

__all__ = ["StreamSender", "StreamReceiver"]


class StreamSender:
    """The sending end of a stream: ``with StreamSender(receivers=2, key=k) as s: s.write(b)``.

    ``wait``: how long admission stays open (default 30 s); it ends as soon
    as ``receivers`` joined. The first ``send``/``write`` waits for it (see
    :meth:`wait`). ``close()`` ends the stream and blocks until every
    remaining receiver confirmed it holds everything.
    """

    def __init__(
        self,
        receivers: int = 1,
        *,
        group: Optional[str] = None,
        key: KeyLike = None,
        insecure: bool = False,
        wait: Seconds = None,
        iface: Optional[str] = None,
        max_message: Optional[int] = None,
        buffer_packets: Optional[int] = None,
    ) -> None:
        opts = {
            "receivers": receivers,
            "group": group,
            "iface": iface,
            "key": resolve_key(key, insecure),
            "wait": _secs(wait, "wait"),
            "max_message": max_message,
            "buffer_packets": buffer_packets,
        }
        self._s = _rmcast.StreamSender(opts)
        self._established: Optional[int] = None
        self.report: Optional[StreamSendReport] = None

    @property
    def max_message(self) -> int:
        """The largest message :meth:`send` takes."""
        return self._s.max_message

    @property
    def closed(self) -> bool:
        return self.report is not None

    def writable(self) -> bool:
        return True

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Block until admission is over; the number of receivers admitted
        (None when ``timeout`` seconds passed first)."""
        if self._established is None:
            self._established = self._s.wait(timeout)
        return self._established

    def send(self, message: Any) -> int:
        """Send one message (a bytes-like object of at most
        :attr:`max_message` bytes); blocks while the send buffer is full."""
        self.wait()
        return self._s.send(message)

    def write(self, data: Any) -> int:
        """Send ``data`` as one message, or several if it is larger than
        :attr:`max_message`. Returns its length."""
        mv = memoryview(data).cast("B")
        step = self.max_message
        if len(mv) <= step:
            return self.send(mv)
        for i in range(0, len(mv), step):
            self.send(mv[i : i + step])
        return len(mv)

    def flush(self) -> None:
        """Messages leave as fast as the receivers take them; nothing to do."""

    def close(self) -> Optional[StreamSendReport]:
        """End the stream; wait until every remaining receiver confirmed it
        holds every message; return the report (idempotent)."""
        if self.report is None:
            d = self._s.close()
            if d is not None:
                self.report = StreamSendReport(**d)
        return self.report

    def __enter__(self) -> "StreamSender":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StreamReceiver:
    """The receiving end: ``for msg in StreamReceiver(key=k): ...``.

    ``listen_timeout``: give up when no stream admitted this receiver this
    long (default: wait forever). ``sender_timeout``: give up when the
    sender is silent this long.
    """

    def __init__(
        self,
        *,
        group: Optional[str] = None,
        key: KeyLike = None,
        insecure: bool = False,
        listen_timeout: Seconds = None,
        sender_timeout: Seconds = None,
        iface: Optional[str] = None,
        name: Optional[str] = None,
        buffer_packets: Optional[int] = None,
    ) -> None:
        opts = {
            "group": group,
            "iface": iface,
            "key": resolve_key(key, insecure),
            "listen_timeout": _secs(listen_timeout, "listen_timeout"),
            "sender_timeout": _secs(sender_timeout, "sender_timeout"),
            "name": name,
            "buffer_packets": buffer_packets,
        }
        self._r = _rmcast.StreamReceiver(opts)
        self._pending = memoryview(b"")
        self._eof = False
        self.report: Optional[StreamRecvReport] = None

    @property
    def closed(self) -> bool:
        return self.report is not None

    def readable(self) -> bool:
        return True

    def recv_message(self) -> Optional[bytes]:
        """The next whole message, or None at the end of the stream. Raises
        :class:`rmcast.TransferFailed` when the session failed for this
        receiver."""
        if self._pending:
            raise ValueError("recv_message after a partial read(); read the rest first")
        if self._eof:
            return None
        m = self._r.read()
        if m is None:
            self._eof = True
        return m

    def __iter__(self) -> Iterator[bytes]:
        while True:
            m = self.recv_message()
            if m is None:
                return
            yield m

    def _fill(self) -> bool:
        while not self._pending:
            if self._eof:
                return False
            m = self._r.read()
            if m is None:
                self._eof = True
                return False
            self._pending = memoryview(m)
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (at most what one message holds), or, with
        ``size < 0``, everything to the end of the stream. ``b""`` at the end."""
        if size is None or size < 0:
            parts = [bytes(self._pending)]
            self._pending = memoryview(b"")
            parts.extend(iter(self.recv_message, None))
            return b"".join(p for p in parts if p)
        if size == 0 or not self._fill():
            return b""
        out = self._pending[:size]
        self._pending = self._pending[size:]
        return bytes(out)

    def readinto(self, b: Any) -> int:
        """Copy the next bytes of the stream into ``b``; 0 at the end."""
        dst = memoryview(b).cast("B")
        if len(dst) == 0 or not self._fill():
            return 0
        n = min(len(dst), len(self._pending))
        dst[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> Optional[StreamRecvReport]:
        """Leave the session (or linger to answer the sender's last polls
        when the stream is over) and return the report (idempotent)."""
        if self.report is None:
            d = self._r.finish()
            if d is not None:
                self.report = StreamRecvReport(**d)
        return self.report

    def __enter__(self) -> "StreamReceiver":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
