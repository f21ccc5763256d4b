"""The asyncio client: ``AsyncTern``, the same methods as ``Tern``, awaited;
``watch`` returns an ``AsyncWatch`` to ``async for`` over."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

import httpx

from . import protocol
from .client import BACKOFF_INITIAL_S, BACKOFF_MAX_S, REQUEST_TIMEOUT_S, WATCH_IDLE_S, Watch, backoff
from .errors import TernError, Unreachable
from .types import Event, Page, Record, WriteResult


class AsyncTern:
    """``async with AsyncTern("http://127.0.0.1:7070") as tern: await tern.put("flags", "checkout", True)``"""

    def __init__(self, url: str = "http://127.0.0.1:7070", *, token: Optional[str] = None, ns: str = "default", timeout_s: float = REQUEST_TIMEOUT_S):
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.ns = ns
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout_s)

    async def __aenter__(self) -> "AsyncTern":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, call: protocol.Call) -> Tuple[int, bytes]:
        try:
            response = await self._http.request(call.method, call.path, params=call.params, content=call.body, headers=call.headers)
        except httpx.TransportError as e:
            raise Unreachable(0, "unreachable", f"cannot reach {self.url}: {e}") from e
        return response.status_code, response.content

    async def get(self, pk: str, sk: str = "", *, ns: Optional[str] = None, after: Optional[str] = None, strong: bool = False) -> Optional[Record]:
        return protocol.read(*await self._send(protocol.get(ns or self.ns, pk, sk, after, strong)))

    async def put(self, pk: str, sk: str, value: Any, *, ns=None, if_version=None, if_absent=False, wait=False, idempotency_key=None) -> WriteResult:
        call = protocol.put(ns or self.ns, pk, sk, value, if_version, if_absent, wait, idempotency_key)
        return protocol.written(*await self._send(call))

    async def delete(self, pk: str, sk: str = "", *, ns=None, if_version=None, wait=False) -> WriteResult:
        return protocol.written(*await self._send(protocol.delete(ns or self.ns, pk, sk, if_version, wait)))

    async def list_page(self, pk: str, *, ns=None, prefix=None, start=None, end=None, limit=None, reverse=False, cursor=None, after=None) -> Page:
        return protocol.page(*await self._send(protocol.list_pk(ns or self.ns, pk, prefix, start, end, limit, reverse, cursor, after)))

    async def list(self, pk: str, **options: Any) -> AsyncIterator[Record]:
        cursor = options.pop("cursor", None)
        while True:
            page = await self.list_page(pk, cursor=cursor, **options)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def scan_page(self, *, ns=None, prefix=None, limit=None, cursor=None, partition=None, after=None) -> Page:
        return protocol.page(*await self._send(protocol.list_namespace(ns or self.ns, prefix, limit, cursor, partition, after)))

    async def scan(self, **options: Any) -> AsyncIterator[Record]:
        cursor = options.pop("cursor", None)
        while True:
            page = await self.scan_page(cursor=cursor, **options)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def get_many(self, keys: List[Any], *, ns=None) -> List[Optional[Record]]:
        return protocol.many(*await self._send(protocol.get_many(ns or self.ns, keys)))

    async def batch(self, ops: List[Dict[str, Any]], *, ns=None, idempotency_key=None) -> WriteResult:
        return protocol.written(*await self._send(protocol.batch(ns or self.ns, ops, idempotency_key)))

    async def namespaces(self) -> List[Dict[str, Any]]:
        return protocol.answer(*await self._send(protocol.Call("GET", "/v1/ns")))["namespaces"]

    async def create_namespace(self, name: str, partitions: int = 16) -> Dict[str, Any]:
        return protocol.answer(*await self._send(protocol.create_namespace(name, partitions)))

    async def delete_namespace(self, name: str, *, confirm: str) -> Dict[str, Any]:
        return protocol.answer(*await self._send(protocol.delete_namespace(name, confirm)))

    def watch(self, pk=None, *, ns=None, prefix=None, sk=None, start="snapshot", mode=None, backoff_initial_s=BACKOFF_INITIAL_S, backoff_max_s=BACKOFF_MAX_S) -> "AsyncWatch":
        return AsyncWatch(self, ns or self.ns, pk, prefix, sk, start, mode, backoff_initial_s, backoff_max_s)


class AsyncWatch(Watch):
    """``Watch`` for asyncio: ``async for event in tern.watch(...)``; the same view and resume."""

    def __iter__(self):
        raise TypeError("an AsyncWatch is iterated with `async for`")

    async def _pause(self, delay_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + delay_s
        while not self._closed.is_set() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(min(0.1, delay_s))

    async def __aiter__(self) -> AsyncIterator[Event]:
        attempt = 0
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=WATCH_IDLE_S)
        while not self._closed.is_set():
            call = self.call()
            error: Optional[Exception] = None
            at_once = False
            try:
                async with self._tern._http.stream("GET", call.path, params=call.params, headers=call.headers, timeout=timeout) as response:
                    if response.status_code >= 300:
                        rejected = protocol.error_from(response.status_code, await response.aread())
                        if response.status_code < 500:
                            raise rejected
                        error = rejected
                    else:
                        yield Event("connected")
                        parser = protocol.SseParser()
                        ended = True
                        async for line in response.aiter_lines():
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
                                at_once = event.reason == "slow_consumer"
                                error = TernError(0, event.reason or "cancel", "the server ended the subscription")
                                ended = False
                                break
                        if ended:
                            error = TernError(0, "stream_ended", "the subscription stream ended")
            except httpx.TransportError as e:
                error = e
            if self._closed.is_set():
                return
            delay = 0.0 if at_once else backoff(attempt, *self._backoff)
            attempt += 1
            yield Event("disconnected", reason=str(error), details={"retry_in_s": delay})
            await self._pause(delay)
