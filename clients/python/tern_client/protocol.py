"""Tern's HTTP API as requests and answers, shared by the sync and the
asyncio clients: each method builds a ``Call`` and reads its answer here;
the clients only send it (docs/api.md is the reference)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional
from urllib.parse import quote

from .errors import NotFound, error_from
from .types import Event, Page, Record, WriteResult


@dataclass
class Call:
    """One request: ``method`` on ``path`` with query ``params`` and a JSON ``body``."""

    method: str
    path: str
    params: Dict[str, str] = field(default_factory=dict)
    body: Optional[bytes] = None
    headers: Dict[str, str] = field(default_factory=dict)


def segment(key: str) -> str:
    """A key as one path segment: every byte but unreserved ones encoded (``/`` is ``%2F``).

    A key that is ``.`` or ``..`` is sent as ``%2E`` / ``%2E%2E``: sent bare,
    URL normalization would drop it (and address another record).
    """
    if key in (".", ".."):
        return key.replace(".", "%2E")
    return quote(key, safe="-_.~")


def record_path(ns: str, pk: str, sk: Optional[str]) -> str:
    path = f"/v1/ns/{segment(ns)}/kv/{segment(pk)}"
    return path if sk is None else f"{path}/{segment(sk)}"


def flags(**options: Any) -> Dict[str, str]:
    """Query parameters from keyword options: None left out, booleans as ``true``."""
    out = {}
    for name, value in options.items():
        if value is None or value is False:
            continue
        out[name] = "true" if value is True else str(value)
    return out


def get(ns: str, pk: str, sk: str, after: Optional[str], strong: bool) -> Call:
    return Call("GET", record_path(ns, pk, sk), flags(after=after, consistency="strong" if strong else None))


def put(ns: str, pk: str, sk: str, value: Any, if_version: Optional[int], if_absent: bool, wait: bool, idempotency_key: Optional[str]) -> Call:
    params = flags(if_version=if_version, if_absent=if_absent, wait="applied" if wait else None)
    headers = {"content-type": "application/json"}
    if idempotency_key:
        headers["idempotency-key"] = idempotency_key
    return Call("PUT", record_path(ns, pk, sk), params, json.dumps(value).encode(), headers)


def delete(ns: str, pk: str, sk: str, if_version: Optional[int], wait: bool) -> Call:
    return Call("DELETE", record_path(ns, pk, sk), flags(if_version=if_version, wait="applied" if wait else None))


def list_pk(ns: str, pk: str, prefix, start, end, limit, reverse, cursor, after) -> Call:
    params = flags(prefix=prefix, start=start, end=end, limit=limit, reverse=reverse, cursor=cursor, after=after)
    return Call("GET", record_path(ns, pk, None), params)


def list_namespace(ns: str, prefix, limit, cursor, partition, after) -> Call:
    params = flags(prefix=prefix, limit=limit, cursor=cursor, partition=partition, after=after)
    return Call("GET", f"/v1/ns/{segment(ns)}/kv", params)


def get_many(ns: str, keys: Iterable[Any]) -> Call:
    listed = [{"pk": k[0], "sk": k[1]} if isinstance(k, tuple) else {"pk": k, "sk": ""} for k in keys]
    return Call("POST", f"/v1/ns/{segment(ns)}/get", body=json.dumps({"keys": listed}).encode(), headers={"content-type": "application/json"})


def batch(ns: str, ops: List[Dict[str, Any]], idempotency_key: Optional[str]) -> Call:
    headers = {"content-type": "application/json"}
    if idempotency_key:
        headers["idempotency-key"] = idempotency_key
    return Call("POST", f"/v1/ns/{segment(ns)}/batch", body=json.dumps({"ops": ops}).encode(), headers=headers)


def create_namespace(name: str, partitions: int) -> Call:
    return Call("PUT", f"/v1/ns/{segment(name)}", body=json.dumps({"partitions": partitions}).encode(), headers={"content-type": "application/json"})


def delete_namespace(name: str, confirm: str) -> Call:
    # `confirm` must repeat the name: the server deletes nothing otherwise.
    return Call("DELETE", f"/v1/ns/{segment(name)}", params={"confirm": confirm})


def watch(ns: str, pk, prefix, sk, start: str, mode, position: Optional[str]) -> Call:
    params = flags(pk=pk, prefix=prefix, sk=sk, mode=mode)
    headers = {"accept": "text/event-stream"}
    if position:
        headers["last-event-id"] = position
    else:
        params["from"] = start
    return Call("GET", f"/v1/ns/{segment(ns)}/watch", params, headers=headers)


def answer(status: int, body: bytes) -> Any:
    """The JSON of a 2xx answer; raises the error an error answer names."""
    if 200 <= status < 300:
        return json.loads(body) if body else None
    raise error_from(status, body)


def record_of(item: Dict[str, Any], position: Optional[str] = None) -> Record:
    return Record(item["pk"], item.get("sk", ""), item.get("value"), int(item["version"]), position or item.get("position"))


def read(status: int, body: bytes) -> Optional[Record]:
    """A GET's record, or None when there is none."""
    try:
        item = answer(status, body)
    except NotFound as missing:
        if missing.code == "not_found":
            return None
        raise
    return record_of(item)


def written(status: int, body: bytes) -> WriteResult:
    item = answer(status, body)
    return WriteResult(item["position"], item.get("version"), bool(item.get("duplicate", False)))


def page(status: int, body: bytes) -> Page:
    item = answer(status, body)
    return Page([record_of(i) for i in item["items"]], item.get("next_cursor"), item["position"])


def many(status: int, body: bytes) -> List[Optional[Record]]:
    item = answer(status, body)
    return [None if i is None else record_of(i, item.get("position")) for i in item["items"]]


class SseParser:
    """Server-Sent Events from lines: ``feed`` each line, get a message at each blank one."""

    def __init__(self) -> None:
        self.event, self.id, self.data = "message", None, []

    def feed(self, line: str):
        if line == "":
            message = (self.event, self.id, "\n".join(self.data)) if self.data else None
            self.event, self.id, self.data = "message", None, []
            return message
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self.event = value
        elif name == "id":
            self.id = value
        elif name == "data":
            self.data.append(value)
        return None


def event_of(kind: str, id_: Optional[str], data: str) -> Optional[Event]:
    """A watch event from an SSE message (None: one this client does not know)."""
    item = json.loads(data)
    if kind in ("put", "delete"):
        record = Record(item["pk"], item.get("sk", ""), item.get("value"), int(item["version"]), id_)
        return Event(kind, record=record, position=id_)
    if kind in ("snapshot", "reset"):
        return Event(kind, position=item.get("position"), reason=item.get("reason"))
    if kind in ("synced", "progress"):
        return Event(kind, position=item.get("position"))
    if kind == "cancel":
        return Event(kind, position=item.get("position"), reason=item.get("reason"), details=item)
    return None
