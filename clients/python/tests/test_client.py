"""The sync client against a real `tern dev`: every call, every typed error,
and a watch that resumes across a node's crash, missing and repeating nothing."""

from __future__ import annotations

import threading

import pytest

from tern_client import (
    BadRequest,
    ConditionFailed,
    NotFound,
    PermissionDenied,
    Tern,
    Unauthenticated,
    Unreachable,
)


def test_put_get_delete_with_conditions_and_positions(node):
    with Tern(node.url) as tern:
        written = tern.put("svc/api", "config", {"replicas": 3}, wait=True)
        assert written.version is not None and written.position.startswith("default:")
        record = tern.get("svc/api", "config", after=written.position)
        assert (record.pk, record.sk, record.value, record.version) == ("svc/api", "config", {"replicas": 3}, written.version)
        assert record.position == written.position
        assert tern.get("svc/api", "config", strong=True).value == {"replicas": 3}
        assert tern.get("svc/api", "nothing") is None
        with pytest.raises(ConditionFailed) as failed:
            tern.put("svc/api", "config", {"replicas": 4}, if_version=written.version + 100)
        assert failed.value.status == 409 and failed.value.code == "condition_failed"
        with pytest.raises(ConditionFailed):
            tern.put("svc/api", "config", 1, if_absent=True)
        again = tern.put("svc/api", "config", {"replicas": 5}, if_version=written.version, wait=True)
        assert tern.get("svc/api", "config", after=again.position).value == {"replicas": 5}
        deleted = tern.delete("svc/api", "config", wait=True)
        assert tern.get("svc/api", "config", after=deleted.position) is None
        # Keys with every kind of byte a path can carry.
        # "." and "..": URL normalization would address ("dots", "") instead.
        for pk, sk in [("a/b?c#d", "é 𝄞 %2F"), ("v1", "kv"), ("dots", "."), ("dots", "..")]:
            tern.put(pk, sk, [pk, sk], wait=True)
            assert tern.get(pk, sk).value == [pk, sk]
        assert tern.get("dots", "") is None
        # A pk starting with "." is Tern's own: refused, said so.
        with pytest.raises(BadRequest) as reserved:
            tern.put("..", "x", 1)
        assert reserved.value.code == "reserved_key"


def test_lists_scans_multi_gets_and_batches(node):
    with Tern(node.url) as tern:
        tern.put("other", "x", True)
        for i in range(25):
            last = tern.put("users", f"u{i:02}", {"n": i})
        page = tern.list_page("users", limit=10, after=last.position)
        assert [r.sk for r in page.items] == [f"u{i:02}" for i in range(10)] and page.next_cursor
        assert [r.value["n"] for r in tern.list("users", limit=7)] == list(range(25))
        assert [r.sk for r in tern.list("users", prefix="u1", reverse=True)] == [f"u{i}" for i in range(19, 9, -1)]
        scanned = [(r.pk, r.sk) for r in tern.scan(limit=4)]
        assert scanned == sorted(scanned) and len(scanned) == 26
        assert [r.pk for r in tern.scan(prefix="oth")] == ["other"]
        got = tern.get_many([("users", "u03"), "nope", ("other", "x")])
        assert [g and g.value for g in got] == [{"n": 3}, None, True]
        result = tern.batch([
            {"op": "put", "pk": "cart", "sk": "a", "value": 1},
            {"op": "put", "pk": "cart", "sk": "b", "value": 2},
        ])
        assert [r.value for r in tern.list("cart", after=result.position)] == [1, 2]
        with pytest.raises(ConditionFailed):
            tern.batch([{"op": "put", "pk": "cart", "sk": "c", "value": 3}, {"op": "put", "pk": "cart", "sk": "a", "value": 9, "if_absent": True}])
        assert tern.get("cart", "c") is None, "a batch is all or nothing"


def test_namespaces_and_their_errors(node):
    with Tern(node.url) as tern:
        assert tern.create_namespace("dns", 8)["created"] is True
        assert tern.create_namespace("dns", 8)["created"] is False
        with pytest.raises(ConditionFailed):
            tern.create_namespace("dns", 4)
        assert {"default", "dns"} <= {n["name"] for n in tern.namespaces()}
        assert len(tern.describe_namespace("dns")["state"]) == 8
        tern.put("example.com", "A", "192.0.2.1", ns="dns", wait=True)
        assert tern.get("example.com", "A", ns="dns").value == "192.0.2.1"
        with pytest.raises(NotFound) as missing:
            tern.get("k", ns="nope")
        assert missing.value.code == "namespace_not_found"
        with pytest.raises(BadRequest) as unconfirmed:
            tern.delete_namespace("dns", confirm="DNS")
        assert unconfirmed.value.code == "confirmation_required"
        assert tern.delete_namespace("dns", confirm="dns")["partitions"] == 8
        assert "dns" not in {n["name"] for n in tern.namespaces()}
        with pytest.raises(NotFound):
            tern.delete_namespace("dns", confirm="dns")


def test_tokens_and_unreachable_nodes_raise_their_own_errors(auth_node):
    with Tern(auth_node.url) as anonymous:
        with pytest.raises(Unauthenticated):
            anonymous.get("k")
    with Tern(auth_node.url, token=auth_node.token()) as root:
        root.put("k", "", 1, wait=True)
        token = root._http.post("/v1/tokens", json={"ns": "default", "prefix": "public/", "verbs": ["read"]}).json()["token"]
    with Tern(auth_node.url, token=token) as reader:
        assert reader.get("public/x") is None
        with pytest.raises(PermissionDenied):
            reader.get("k")
    auth_node.kill()
    with Tern(auth_node.url, timeout_s=5) as gone:
        with pytest.raises(Unreachable):
            gone.get("k")


def test_a_watch_resumes_across_a_crash_and_misses_and_repeats_nothing(node):
    with Tern(node.url) as tern:
        tern.put("flags", "a", 0, wait=True)
        seen, kinds, synced, done = [], [], threading.Event(), threading.Event()
        watch = tern.watch("flags", backoff_initial_s=0.2, backoff_max_s=1.0)

        def follow():
            for event in watch:
                kinds.append(event.type)
                if event.type == "synced":
                    synced.set()
                if event.type in ("put", "delete") and synced.is_set():
                    seen.append((event.record.sk, event.record.value))
                    if len(seen) == 10:
                        done.set()
                        return

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        assert synced.wait(30), "the snapshot arrives"
        assert watch.view[("flags", "a")].value == 0
        for i in range(5):
            tern.put("flags", f"k{i}", i, wait=True)
        node.restart()  # SIGKILL, then the same data directory and port
        with Tern(node.url) as after_restart:
            for i in range(5, 10):
                after_restart.put("flags", f"k{i}", i, wait=True)
        assert done.wait(60), f"every change arrives: {seen}"
        watch.close()
        follower.join(10)
        assert seen == [(f"k{i}", i) for i in range(10)], "in order, each once"
        assert kinds.count("disconnected") >= 1 and kinds.count("connected") >= 2, f"it reconnected: {kinds}"
        assert {sk for (_, sk) in watch.view} == {"a"} | {f"k{i}" for i in range(10)}


def test_a_watch_of_an_unknown_namespace_raises(node):
    with Tern(node.url) as tern:
        with pytest.raises(NotFound):
            for _ in tern.watch(ns="nope"):
                pass
