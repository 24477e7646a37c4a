"""asyncio faces of :func:`rmcast.send`, :func:`rmcast.recv` and :func:`rmcast.bcast`.

Each runs the blocking call in the loop's default executor with a fresh
:class:`rmcast.CancelToken`; cancelling the awaiting task raises the token,
which stops the session within ~100 ms, waits for the worker to finish and
re-raises ``CancelledError``. The event loop never blocks.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable

from . import _api, _bcast
from ._rmcast import CancelToken
from .reports import SendReport

__all__ = ["send", "recv", "bcast"]


async def _run(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    token = kw.pop("cancel", None) or CancelToken()
    loop = asyncio.get_running_loop()
    fut = loop.run_in_executor(None, functools.partial(fn, *args, cancel=token, **kw))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        token.cancel()
        try:
            await fut
        except BaseException:  # the session ended by the cancellation
            pass
        raise


async def send(source: Any, receivers: int = 1, **kw: Any) -> SendReport:
    """``await rmcast.aio.send(...)``: see :func:`rmcast.send`."""
    return await _run(_api.send, source, receivers, **kw)


async def recv(out_dir: Any = None, **kw: Any) -> _api.Received:
    """``await rmcast.aio.recv(...)``: see :func:`rmcast.recv`."""
    return await _run(_api.recv, out_dir, **kw)


async def bcast(obj: Any = None, **kw: Any) -> Any:
    """``await rmcast.aio.bcast(...)``: see :func:`rmcast.bcast`."""
    return await _run(_bcast.bcast, obj, **kw)
