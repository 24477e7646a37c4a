"""rmcast: reliable multicast of files, objects, arrays and streams.

Quick start (one sender, two receivers, on this machine)::

    import rmcast, numpy as np
    key = rmcast.keygen("group.key")            # once; share the file
    # each receiver:  a = rmcast.bcast(key="group.key", group=g)
    # the sender:     rmcast.bcast(np.arange(10.0), receivers=2, key="group.key", group=g)

Traffic stays on the machine by default (interface 127.0.0.1, TTL 1).
See :func:`send`, :func:`recv`, :func:`bcast`, :class:`StreamSender`,
:class:`StreamReceiver` and :mod:`rmcast.aio`.
"""

from __future__ import annotations

from . import _rmcast, aio
from ._api import Received, keygen, load_key, recv, send
from ._bcast import bcast
from ._rmcast import (
    KEY_FILE_ENV,
    PROTOCOLS,
    CancelToken,
    Key,
    parse_duration,
    parse_rate,
    parse_size,
    random_group,
)
from .errors import (
    Cancelled,
    InvalidArgument,
    Refused,
    RmcastError,
    RmcastIOError,
    SendFailed,
    TransferFailed,
    NoSession,
)
from .reports import (
    Failure,
    Member,
    RecvReport,
    SendReport,
    StreamRecvReport,
    StreamSendReport,
)
from .stream import StreamReceiver, StreamSender

__version__ = "0.1.0"

__all__ = [
    "send", "recv", "bcast", "Received", "keygen", "load_key", "Key", "CancelToken",
    "random_group", "parse_size", "parse_rate", "parse_duration", "PROTOCOLS", "KEY_FILE_ENV",
    "StreamSender", "StreamReceiver", "aio",
    "SendReport", "RecvReport", "StreamSendReport", "StreamRecvReport", "Member", "Failure",
    "RmcastError", "InvalidArgument", "RmcastIOError", "Refused", "TransferFailed", "NoSession",
    "SendFailed", "Cancelled",
]
