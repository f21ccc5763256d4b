"""Tern's Python client: ``Tern`` (sync) and ``AsyncTern`` (asyncio) over
Tern's HTTP API, with watches that reconnect and resume by position."""

from .aio import AsyncTern, AsyncWatch
from .client import Tern, Watch
from .errors import (
    BadRequest,
    ConditionFailed,
    NotFound,
    PermissionDenied,
    RateLimited,
    TernError,
    Unauthenticated,
    Unavailable,
    Unreachable,
)
from .types import Event, Page, Record, WriteResult

__all__ = [
    "AsyncTern",
    "AsyncWatch",
    "BadRequest",
    "ConditionFailed",
    "Event",
    "NotFound",
    "Page",
    "PermissionDenied",
    "RateLimited",
    "Record",
    "Tern",
    "TernError",
    "Unauthenticated",
    "Unavailable",
    "Unreachable",
    "Watch",
    "WriteResult",
]
