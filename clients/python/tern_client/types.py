"""What Tern's answers hold, as plain dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional


@dataclass(frozen=True)
class Record:
    """A stored record. ``version`` is the log offset of the write that wrote it."""

    pk: str
    sk: str
    value: Any
    version: int
    #: The position the read saw (reads only): pass it as ``after`` elsewhere.
    position: Optional[str] = None


@dataclass(frozen=True)
class WriteResult:
    """``position`` is just after the write: read your write with ``after=position``."""

    position: str
    version: Optional[int] = None
    #: True when an idempotency key matched an earlier write, which this repeats.
    duplicate: bool = False


@dataclass(frozen=True)
class Page:
    """One page of a listing; ``next_cursor`` is None on the last."""

    items: List[Record]
    next_cursor: Optional[str]
    position: str


@dataclass(frozen=True)
class Event:
    """One watch event.

    ``type`` is ``put`` or ``delete`` (a change, with ``record``), ``snapshot``
    or ``reset`` (the full state follows as puts, then ``synced``),
    ``synced``, ``progress``, ``cancel`` (the server ended the stream; the
    watch resumes), ``connected`` or ``disconnected`` (the watch's own).
    """

    type: str
    record: Optional[Record] = None
    position: Optional[str] = None
    reason: Optional[str] = None
    details: dict = field(default_factory=dict)
