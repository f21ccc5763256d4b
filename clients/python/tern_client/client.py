"""The synchronous client: ``Tern(url, token=..., ns=...)``.

Every method is one HTTP request (``protocol.py`` builds it); ``watch``
returns a ``Watch`` that reconnects and resumes by itself.
"""

from __future__ import annotations

import random
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import httpx

from . import protocol
from .errors import TernError, Unreachable
from .types import Event, Page, Record, WriteResult

#: Requests other than watches: connect, and the whole answer (far above the
#: server's own waits, `timeout_ms` up to 60 s).
REQUEST_TIMEOUT_S = 90.0
#: A watch with nothing read for this long is taken as dead and reconnects
#: (the server sends a keep-alive well within it).
WATCH_IDLE_S = 90.0
#: Reconnect delays: the first, doubling to the cap, each jittered to half..all.
BACKOFF_INITIAL_S = 1.0
BACKOFF_MAX_S = 30.0


def backoff(attempt: int, initial_s: float, max_s: float) -> float:
    """Jittered exponential backoff: half to all of min(max, initial * 2^attempt)."""
    ceiling = min(max_s, initial_s * (2 ** min(attempt, 30)))
    return ceiling / 2 + random.random() * ceiling / 2


class Tern:
    """A client of one Tern node (any node answers any request).

    ``with Tern("http://127.0.0.1:7070") as tern: tern.put("flags", "checkout", {"on": True})``
    """

    def __init__(self, url: str = "http://127.0.0.1:7070", *, token: Optional[str] = None, ns: str = "default", timeout_s: float = REQUEST_TIMEOUT_S):
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.ns = ns
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def __enter__(self) -> "Tern":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: protocol.Call) -> Tuple[int, bytes]:
        try:
            response = self._http.request(call.method, call.path, params=call.params, content=call.body, headers=call.headers)
        except httpx.TransportError as e:
            raise Unreachable(0, "unreachable", f"cannot reach {self.url}: {e}") from e
        return response.status_code, response.content

    def get(self, pk: str, sk: str = "", *, ns: Optional[str] = None, after: Optional[str] = None, strong: bool = False) -> Optional[Record]:
        """The record at (pk, sk), or None. ``after``: wait until this position is applied; ``strong``: linearizable."""
        return protocol.read(*self._send(protocol.get(ns or self.ns, pk, sk, after, strong)))

    def put(
        self,
        pk: str,
        sk: str,
        value: Any,
        *,
        ns: Optional[str] = None,
        if_version: Optional[int] = None,
        if_absent: bool = False,
        wait: bool = False,
        idempotency_key: Optional[str] = None,
    ) -> WriteResult:
        """Writes ``value`` (any JSON value). Raises ConditionFailed when a condition does not hold."""
        call = protocol.put(ns or self.ns, pk, sk, value, if_version, if_absent, wait, idempotency_key)
        return protocol.written(*self._send(call))

    def delete(self, pk: str, sk: str = "", *, ns: Optional[str] = None, if_version: Optional[int] = None, wait: bool = False) -> WriteResult:
        return protocol.written(*self._send(protocol.delete(ns or self.ns, pk, sk, if_version, wait)))

    def list_page(self, pk: str, *, ns: Optional[str] = None, prefix=None, start=None, end=None, limit=None, reverse=False, cursor=None, after=None) -> Page:
        """One page of pk's records in sort-key order."""
        return protocol.page(*self._send(protocol.list_pk(ns or self.ns, pk, prefix, start, end, limit, reverse, cursor, after)))

    def list(self, pk: str, **options: Any) -> Iterator[Record]:
        """Every record of pk in sort-key order, page after page."""
        cursor = options.pop("cursor", None)
        while True:
            page = self.list_page(pk, cursor=cursor, **options)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def scan_page(self, *, ns: Optional[str] = None, prefix=None, limit=None, cursor=None, partition=None, after=None) -> Page:
        """One page of the whole namespace in (pk, sk) order; ``prefix`` is a pk prefix."""
        return protocol.page(*self._send(protocol.list_namespace(ns or self.ns, prefix, limit, cursor, partition, after)))

    def scan(self, **options: Any) -> Iterator[Record]:
        """Every record of the namespace (or of pks with ``prefix``), in (pk, sk) order."""
        cursor = options.pop("cursor", None)
        while True:
            page = self.scan_page(cursor=cursor, **options)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_many(self, keys: List[Any], *, ns: Optional[str] = None) -> List[Optional[Record]]:
        """Records in request order (None where missing); a key is ``pk`` or ``(pk, sk)``."""
        return protocol.many(*self._send(protocol.get_many(ns or self.ns, keys)))

    def batch(self, ops: List[Dict[str, Any]], *, ns: Optional[str] = None, idempotency_key: Optional[str] = None) -> WriteResult:
        """Ops of one partition, all or nothing: ``{"op": "put"|"delete", "pk", "sk", "value", "if_version", "if_absent"}``."""
        return protocol.written(*self._send(protocol.batch(ns or self.ns, ops, idempotency_key)))

    def namespaces(self) -> List[Dict[str, Any]]:
        return protocol.answer(*self._send(protocol.Call("GET", "/v1/ns")))["namespaces"]

    def create_namespace(self, name: str, partitions: int = 16) -> Dict[str, Any]:
        """Creates it (``created`` true), or finds it as asked (false); ConditionFailed if it differs."""
        return protocol.answer(*self._send(protocol.create_namespace(name, partitions)))

    def delete_namespace(self, name: str, *, confirm: str) -> Dict[str, Any]:
        """Deletes it for good, on every node: its records, log, stores and snapshots.

        ``confirm`` must repeat ``name`` (else BadRequest ``confirmation_required``); NotFound if there is none."""
        return protocol.answer(*self._send(protocol.delete_namespace(name, confirm)))

    def describe_namespace(self, name: Optional[str] = None) -> Dict[str, Any]:
        return protocol.answer(*self._send(protocol.Call("GET", f"/v1/ns/{protocol.segment(name or self.ns)}")))

    def watch(self, pk: Optional[str] = None, *, ns: Optional[str] = None, prefix=None, sk=None, start: str = "snapshot", mode=None, backoff_initial_s=BACKOFF_INITIAL_S, backoff_max_s=BACKOFF_MAX_S) -> "Watch":
        """Changes as they happen. ``start``: ``snapshot`` (the state first), ``now``, or a position."""
        return Watch(self, ns or self.ns, pk, prefix, sk, start, mode, backoff_initial_s, backoff_max_s)


class Watch:
    """One subscription that never gives up: iterate it for events.

    It reconnects with jittered exponential backoff and resumes from the last
    position it received (``Last-Event-ID``), so it misses and repeats
    nothing; ``view`` holds the watched records as of ``position``. A request
    the server rejects (4xx: an unknown namespace, no grant) raises. ``close()``
    (from any thread) ends the iteration.
    """

    def __init__(self, tern: Tern, ns: str, pk, prefix, sk, start: str, mode, backoff_initial_s: float, backoff_max_s: float):
        self._tern, self._ns, self._pk, self._prefix, self._sk, self._start, self._mode = tern, ns, pk, prefix, sk, start, mode
        self._backoff = (backoff_initial_s, backoff_max_s)
        self._closed = threading.Event()
        #: The last position received: where a reconnect resumes.
        self.position: Optional[str] = None
        #: The watched records as of ``position``, by (pk, sk).
        self.view: Dict[Tuple[str, str], Record] = {}
        self._pending: Optional[Dict[Tuple[str, str], Record]] = None

    def close(self) -> None:
        self._closed.set()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def apply(self, event: Event) -> None:
        """Keeps ``view`` and ``position`` as of ``event`` (shared with the asyncio watch)."""
        if event.type in ("put", "delete") and event.record is not None:
            key = (event.record.pk, event.record.sk)
            target = self._pending if self._pending is not None else self.view
            if event.type == "put":
                target[key] = event.record
            else:
                target.pop(key, None)
            if event.position:
                self.position = event.position
        elif event.type in ("snapshot", "reset"):
            self._pending = {}
        elif event.type in ("synced", "progress", "cancel"):
            if event.type == "synced" and self._pending is not None:
                self.view, self._pending = self._pending, None
            self.position = event.position or self.position

    def call(self) -> protocol.Call:
        return protocol.watch(self._ns, self._pk, self._prefix, self._sk, self._start, self._mode, self.position)

    def __iter__(self) -> Iterator[Event]:
        attempt = 0
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=WATCH_IDLE_S)
        while not self._closed.is_set():
            call = self.call()
            error: Optional[Exception] = None
            at_once = False
            try:
                with self._tern._http.stream("GET", call.path, params=call.params, headers=call.headers, timeout=timeout) as response:
                    if response.status_code >= 300:
                        rejected = protocol.error_from(response.status_code, response.read())
                        if response.status_code < 500:
                            raise rejected
                        error = rejected
                    else:
                        yield Event("connected")
                        parser = protocol.SseParser()
                        for line in response.iter_lines():
                            if self._closed.is_set():
                                return
                            message = parser.feed(line)
                            event = message and protocol.event_of(*message)
                            if not event:
                                continue
                            attempt = 0
                            self.apply(event)
                            yield event
                            if event.type == "cancel":
                                # A slow watcher resumes at once from where it was cut.
                                at_once = event.reason == "slow_consumer"
                                error = TernError(0, event.reason or "cancel", "the server ended the subscription")
                                break
                        else:
                            error = TernError(0, "stream_ended", "the subscription stream ended")
            except httpx.TransportError as e:
                error = e
            if self._closed.is_set():
                return
            delay = 0.0 if at_once else backoff(attempt, *self._backoff)
            attempt += 1
            yield Event("disconnected", reason=str(error), details={"retry_in_s": delay})
            self._closed.wait(delay)
