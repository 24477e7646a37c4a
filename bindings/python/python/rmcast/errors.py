"""Exceptions raised by rmcast.

Every exception derives from :class:`RmcastError`. The extension module
raises these classes by name, so the hierarchy lives here, in Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .reports import Failure, SendReport

__all__ = [
    "RmcastError",
    "InvalidArgument",
    "RmcastIOError",
    "Refused",
    "TransferFailed",
    "SendFailed",
    "Cancelled",
]


class RmcastError(Exception):
    """Base class of every rmcast error."""


class InvalidArgument(RmcastError, ValueError):
    """A setting or argument cannot work (also a missing group key)."""


class RmcastIOError(RmcastError, OSError):
    """A system call failed; the message says what was being done."""


class Refused(RmcastError):
    """This receiver refused the offered object (too large, unsafe name,
    untrusted signature, ...)."""


class TransferFailed(RmcastError):
    """The transfer failed (sender silent, session aborted, ...)."""


class NoSession(TransferFailed):
    """Nothing was announced on the group within ``listen_timeout``."""


class Cancelled(RmcastError):
    """The call's cancel token was raised (``rmcast.aio`` task cancelled)."""


class SendFailed(TransferFailed):
    """Some receivers did not confirm a verified copy.

    ``report`` is the full :class:`rmcast.SendReport`; ``failures`` lists the
    receivers that failed (rank, name, address, reason), as ``rmcast send``
    prints them.
    """

    def __init__(self, report: "SendReport") -> None:
        self.report = report
        self.failures: List["Failure"] = list(report.failures)
        self.error: Optional[str] = report.error
        super().__init__(report.summary())
