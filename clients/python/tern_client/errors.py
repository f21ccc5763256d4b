"""Tern's error answers as Python exceptions.

Every error body is ``{"error": {"code": ..., "message": ..., ...details}}``;
each code a program branches on has a class of its own, all under
``TernError`` (docs/api.md, "Error codes").
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class TernError(Exception):
    """An error answer from Tern (``status`` 0: no answer at all)."""

    def __init__(self, status: int, code: str, message: str, details: Optional[Dict[str, Any]] = None):
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        #: Extra fields of the error object (``current_version``, ``position``, ...).
        self.details: Dict[str, Any] = details or {}


class BadRequest(TernError):
    """400: the request itself is wrong (a limit, a malformed key or value)."""


class Unauthenticated(TernError):
    """401: no valid token."""


class PermissionDenied(TernError):
    """403: the token has no grant for this."""


class NotFound(TernError):
    """404: no such record, namespace or route."""


class ConditionFailed(TernError):
    """409/412: ``if_version`` or ``if_absent`` did not hold, or a namespace differs."""


class RateLimited(TernError):
    """429: too many failed authentications from this address."""


class Unavailable(TernError):
    """503: the node cannot answer now (not ready, a wait timed out, the log is down)."""


class Unreachable(TernError):
    """No answer: the connection failed or timed out."""


_BY_STATUS: Dict[int, Type[TernError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    409: ConditionFailed,
    412: ConditionFailed,
    429: RateLimited,
    503: Unavailable,
}


def error_from(status: int, body: bytes) -> TernError:
    """The exception for an error answer, whatever its body holds."""
    import json

    code, message, details = "http_error", body[:200].decode("utf-8", "replace"), {}
    try:
        error = json.loads(body).get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            details = {k: v for k, v in error.items() if k not in ("code", "message")}
            code, message = error["code"], str(error.get("message", error["code"]))
    except (ValueError, AttributeError):
        pass
    return _BY_STATUS.get(status, TernError)(status, code, message, details)
