"""bcast: broadcast an array (numpy or any buffer) from one sender to N receivers.

Design (see README, "bcast"): like mpi4py's ``comm.bcast``, every party
calls the same function; the one holding the object is the root (it passes
``obj`` and ``receivers=N``), the others pass nothing (or ``into=``) and get
the object back. Unlike MPI there is no communicator: the group address and
key define who meets, and the root waits for N receivers to join.

The bytes travel as one rmcast object, read in place from the array's
memory on the sender (no copy). Its *metadata* (kind, dtype, shape and
memory order) travels in the object's name: ``rmcast-bcast-v1.`` followed
by base64url(JSON), e.g. ``{"k":"ndarray","d":"<f8","s":[3,4],"o":"C"}``.
The name is part of the sealed, hash-checked offer, so metadata and data are
authenticated together, and a plain ``rmcast recv`` of a bcast session just
stores a file of raw bytes.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any, Dict, Optional, Tuple

from ._api import _owned_view, _recv_raw, recv_options, send, Received  # noqa: F401
from .errors import InvalidArgument
from .reports import SendReport

__all__ = ["bcast", "PREFIX"]

PREFIX = "rmcast-bcast-v1."


def _np() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is optional
        return None
    return numpy


def _encode(meta: Dict[str, Any]) -> str:
    raw = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(name: str) -> Dict[str, Any]:
    if not name.startswith(PREFIX):
        raise InvalidArgument(
            f"the session's object {name!r} was not sent by rmcast.bcast "
            "(use rmcast.recv for plain objects)"
        )
    b = name[len(PREFIX):]
    return json.loads(base64.urlsafe_b64decode(b + "=" * (-len(b) % 4)))


def _describe(obj: Any, copy: bool) -> Tuple[Any, Dict[str, Any]]:
    """(what to send, metadata): a flat byte view of ``obj`` and how to rebuild it."""
    np = _np()
    if np is not None and isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise InvalidArgument(
                f"cannot bcast an array of dtype {obj.dtype}: it holds Python object "
                "references, not data (pickle it and send the bytes)"
            )
        if obj.flags.c_contiguous:
            order, flat = "C", obj
        elif obj.flags.f_contiguous:
            order, flat = "F", obj.T
        elif copy:
            order, flat = "C", np.ascontiguousarray(obj)
        else:
            raise InvalidArgument(
                "cannot bcast a non-contiguous array without a copy (strides "
                f"{obj.strides} for shape {obj.shape}); pass copy=True or "
                "numpy.ascontiguousarray(a)"
            )
        meta = {
            "k": "ndarray",
            "d": np.lib.format.dtype_to_descr(obj.dtype),
            "s": list(obj.shape),
            "o": order,
        }
        # A flat byte view of the same memory (any dtype, also 0-d and
        # datetime, which refuse to export a buffer of their own).
        return flat.reshape(-1).view(np.uint8), meta
    if isinstance(obj, (bytes, bytearray)):
        return obj, {"k": type(obj).__name__}
    try:
        mv = memoryview(obj)
    except TypeError:
        raise InvalidArgument(
            f"cannot bcast a {type(obj).__name__}: it has no buffer protocol "
            "(pickle it and send the bytes)"
        ) from None
    if not mv.contiguous:
        if not copy:
            raise InvalidArgument(
                "cannot bcast a non-contiguous buffer without a copy; pass copy=True"
            )
        mv = memoryview(mv.tobytes())
    meta = {"k": "buffer", "f": mv.format, "s": list(mv.shape), "i": mv.itemsize}
    return mv, meta


def _rebuild(meta: Dict[str, Any], data: memoryview, into: Any) -> Any:
    kind = meta.get("k")
    if kind == "ndarray":
        np = _np()
        if np is None:
            raise InvalidArgument("this bcast carries a numpy array: install numpy")
        dtype = np.lib.format.descr_to_dtype(meta["d"])
        shape = tuple(meta["s"])
        order = meta.get("o", "C")
        want = dtype.itemsize * math.prod(shape)
        if len(data) != want:
            raise InvalidArgument(
                f"received {len(data)} bytes for a {dtype} array of shape {shape} ({want} bytes)"
            )
        stored = shape[::-1] if order == "F" else shape
        if want == 0:
            arr = np.empty(stored, dtype=dtype)
        else:
            arr = np.frombuffer(data, dtype=dtype).reshape(stored)
        if order == "F":
            arr = arr.T
        if into is None:
            return arr
        if not isinstance(into, np.ndarray):
            into = np.asarray(memoryview(into))
        if into.shape != shape or into.dtype != dtype:
            raise InvalidArgument(
                f"into= is a {into.dtype} array of shape {into.shape}; the sender's is "
                f"{dtype} of shape {shape}"
            )
        np.copyto(into, arr)
        return into
    if kind == "bytes":
        if into is not None:
            return _copy_into(data, into)
        return bytes(data)
    if kind == "bytearray":
        if into is not None:
            return _copy_into(data, into)
        return bytearray(data)
    if kind == "buffer":
        if into is not None:
            return _copy_into(data, into)
        try:
            return data.cast(meta["f"], meta["s"]) if meta["s"] else data.cast(meta["f"])
        except (TypeError, ValueError):
            return data  # a format memoryview.cast does not know: the raw bytes
    raise InvalidArgument(f"unknown bcast kind {kind!r} (newer sender?)")


def _copy_into(data: memoryview, into: Any) -> Any:
    dst = memoryview(into).cast("B")
    if dst.readonly or dst.nbytes != len(data):
        raise InvalidArgument(
            f"into= must be writable and hold exactly {len(data)} bytes (it holds {dst.nbytes})"
        )
    dst[:] = data
    return into


def bcast(
    obj: Any = None,
    *,
    receivers: Optional[int] = None,
    into: Any = None,
    copy: bool = False,
    **session: Any,
) -> Any:
    """Broadcast ``obj`` from the one party that has it to ``receivers`` others.

    Root (sender): ``rmcast.bcast(array, receivers=N, key=..., group=...)``
    sends the array's memory in place (no copy; it must stay unchanged until
    the call returns) with its dtype, shape and order, and returns the
    :class:`SendReport` (raises :class:`SendFailed` naming the receivers that
    failed). Non-contiguous arrays are refused unless ``copy=True``.

    Others (receivers): ``rmcast.bcast(key=..., group=...)`` returns a fresh
    array (numpy, writable, backed by the received buffer without a copy);
    ``rmcast.bcast(into=a)`` copies into ``a`` (same dtype and shape) and
    returns it. ``bytes`` come back as ``bytes``, other buffers as a
    ``memoryview`` with the sender's format and shape.

    ``session`` takes the keywords of :func:`rmcast.send` (root) or
    :func:`rmcast.recv` (others): ``group``, ``key``, ``insecure``,
    ``protocol``, ``wait``, ``listen_timeout``, ``cancel``, ...
    """
    if obj is not None:
        if receivers is None:
            raise InvalidArgument("the sending side of bcast needs receivers=N")
        if into is not None:
            raise InvalidArgument("into= is for the receiving side (obj=None)")
        if "name" in session:
            raise InvalidArgument("bcast names the object itself (its metadata); drop name=")
        data, meta = _describe(obj, copy)
        report: SendReport = send(data, receivers, name=_encode(meta), **session)
        return report
    if receivers is not None:
        raise InvalidArgument("receivers= is for the sending side; receivers pass no object")
    cancel = session.pop("cancel", None)
    opts = recv_options(**session)
    report, buf = _recv_raw(opts, None, cancel)
    if not report.verified:
        from .errors import TransferFailed

        raise TransferFailed(f"the object {report.name!r} did not verify")
    meta = _decode(report.name)
    data = buf if isinstance(buf, memoryview) else _owned_view(buf)
    return _rebuild(meta, data, into)
