"""The official Firebase Admin SDK for Python (firebase-admin, from PyPI),
unmodified, against a real `tern dev` in emulator mode.

Run by scripts/test.sh (it makes the venv); by hand:
    TERN_BIN=target/release/tern python -m pytest tests/firebase -q
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import firebase_admin
import pytest
from firebase_admin import db, exceptions


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def tern():
    binary = os.environ.get("TERN_BIN") or os.path.expanduser("~/.cache/tern-target/release/tern")
    data_dir = tempfile.mkdtemp(prefix="tern-firebase-")
    port = free_port()
    process = subprocess.Popen(
        [binary, "dev", "--listen", f"127.0.0.1:{port}", "--data-dir", data_dir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{url}/readyz", timeout=1)
            break
        except Exception:
            time.sleep(0.05)
    else:
        process.kill()
        raise RuntimeError("tern dev did not become ready")
    yield url
    process.terminate()
    process.wait(timeout=30)
    shutil.rmtree(data_dir, ignore_errors=True)


apps = {}


def app_for(url, ns, uid=None):
    """An SDK app on database `ns`; with `uid`, as that user (auth override)."""
    name = f"{ns}-{uid}"
    if name not in apps:
        options = {"databaseURL": f"{url}?ns={ns}", "projectId": "tern-test"}
        if uid is not None:
            options["databaseAuthVariableOverride"] = {"uid": uid}
        apps[name] = firebase_admin.initialize_app(credential=_Anonymous(), options=options, name=name)
    return apps[name]


class _Anonymous(firebase_admin.credentials.Base):
    """Emulator mode: the SDK sends `Bearer owner` itself; no Google credential is used."""

    def get_credential(self):
        import google.auth.credentials

        class Creds(google.auth.credentials.Credentials):
            def refresh(self, request):
                self.token = "owner"

        return Creds()


def put_rules(url, ns, rules):
    request = urllib.request.Request(
        f"{url}/.settings/rules.json?ns={ns}",
        data=json.dumps(rules).encode(),
        method="PUT",
        headers={"Authorization": "Bearer owner"},
    )
    urllib.request.urlopen(request, timeout=10).read()


def test_set_get_update_push_delete(tern):
    root = db.reference("/", app=app_for(tern, "crud"))
    root.child("users/alice").set({"name": "Alice", "age": 30})
    assert root.child("users/alice").get() == {"name": "Alice", "age": 30}
    root.child("users").update({"bob/name": "Bob", "alice/age": 31})
    assert root.child("users").get() == {"alice": {"name": "Alice", "age": 31}, "bob": {"name": "Bob"}}
    first = root.child("log").push("one")
    second = root.child("log").push({"n": 2})
    assert len(first.key) == 20 and first.key < second.key, "push ids are ordered"
    assert list(root.child("log").get().values()) == ["one", {"n": 2}]
    root.child("users/bob").delete()
    assert root.child("users/bob").get() is None
    assert root.child("users").get(shallow=True) == {"alice": True}
    value, etag = root.child("users/alice").get(etag=True)
    assert value == {"name": "Alice", "age": 31} and etag
    # Server values, resolved at apply time.
    root.child("stamp").set({".sv": "timestamp"})
    assert abs(root.child("stamp").get() - time.time() * 1000) < 60_000
    root.child("n").set(5)
    root.child("n").set({".sv": {"increment": 2}})
    assert root.child("n").get() == 7


def test_etag_conditions(tern):
    ref = db.reference("/cond", app=app_for(tern, "etags"))
    ref.set({"v": 1})
    value, etag = ref.get(etag=True)
    ok, written, set_etag = ref.set_if_unchanged(etag, {"v": 2})
    # The new ETag comes back with the 200, as Firebase sends it (it was None before).
    assert ok is True and written == {"v": 2} and set_etag == ref.get(etag=True)[1]
    ok, current, new_etag = ref.set_if_unchanged(etag, {"v": 3})
    assert ok is False and current == {"v": 2} and new_etag == set_etag
    assert ref.get_if_changed(new_etag) == (False, None, None)
    # Changed since the old tag: the value and the current tag (it was None before).
    assert ref.get_if_changed(etag) == (True, {"v": 2}, set_etag)


def test_concurrent_transactions_on_one_counter_are_exact(tern):
    app = app_for(tern, "counter")
    db.reference("/counter", app=app).set(0)
    db.reference("/hits", app=app).set(0)
    threads, per_thread = 8, 15
    committed = []

    def work():
        ref = db.reference("/counter", app=app)
        hits = db.reference("/hits", app=app)
        for _ in range(per_thread):
            # Server-side increments never conflict.
            hits.set({".sv": {"increment": 1}})
            # A transaction the SDK gives up on after its 25 retries
            # (contention) changed nothing; every committed one counts once.
            try:
                ref.transaction(lambda current: (current or 0) + 1)
                committed.append(1)
            except db.TransactionAbortedError:
                pass

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert db.reference("/hits", app=app).get() == threads * per_thread
    assert len(committed) > 0
    assert db.reference("/counter", app=app).get() == len(committed)


def test_every_query_form_with_index_on(tern):
    app = app_for(tern, "queries")
    put_rules(tern, "queries", {"rules": {".read": True, ".write": True, "dinos": {".indexOn": ["height", ".value"]}, "scores": {".indexOn": ".value"}}})
    dinos = db.reference("/dinos", app=app)
    dinos.set({
        "bruhathkayosaurus": {"height": 25},
        "lambeosaurus": {"height": 2.1},
        "linhenykus": {"height": 0.6},
        "pterodactyl": {"height": 0.6},
        "stegosaurus": {"height": 4},
        "triceratops": {"height": 3},
    })
    def by_height():
        return dinos.order_by_child("height")  # the SDK's queries are builders: one per query

    assert list(by_height().limit_to_first(2).get().keys()) == ["linhenykus", "pterodactyl"]
    assert list(by_height().limit_to_last(2).get().keys()) == ["stegosaurus", "bruhathkayosaurus"]
    assert list(by_height().start_at(3).end_at(5).get().keys()) == ["triceratops", "stegosaurus"]
    assert list(by_height().equal_to(0.6).get().keys()) == ["linhenykus", "pterodactyl"]
    assert list(dinos.order_by_key().start_at("p").limit_to_first(2).get().keys()) == ["pterodactyl", "stegosaurus"]
    scores = db.reference("/scores", app=app)
    scores.set({"a": 3, "b": 1, "c": "x", "d": True})
    assert list(scores.order_by_value().get().keys()) == ["d", "b", "a", "c"]
    assert list(scores.order_by_value().start_at(2).end_at(10).get().keys()) == ["a"]
    # Without .indexOn: Firebase's error.
    db.reference("/other", app=app).set({"x": {"h": 1}})
    with pytest.raises(exceptions.InvalidArgumentError, match="Index not defined"):
        db.reference("/other", app=app).order_by_child("h").get()


def test_listen_gets_the_whole_value_then_changes(tern):
    app = app_for(tern, "listen")
    ref = db.reference("/room", app=app)
    ref.set({"a": 1})
    events = []
    got = threading.Event()

    def on_event(event):
        events.append((event.event_type, event.path, event.data))
        if len(events) >= 3:
            got.set()

    registration = ref.listen(on_event)
    try:
        time.sleep(0.3)
        ref.child("b").set(2)
        ref.update({"a": 5, "c": 3})
        assert got.wait(10), f"events so far: {events}"
    finally:
        registration.close()
    assert events[0] == ("put", "/", {"a": 1})
    assert events[1] == ("put", "/b", 2)
    assert events[2] == ("patch", "/", {"a": 5, "c": 3})


def test_rules_with_auth_overrides(tern):
    put_rules(tern, "rules", {"rules": {
        "users": {"$uid": {
            ".read": "auth != null && auth.uid == $uid",
            ".write": "auth != null && auth.uid == $uid",
            "age": {".validate": "newData.isNumber() && newData.val() >= 0"},
        }},
    }})
    alice = app_for(tern, "rules", uid="alice")
    admin = app_for(tern, "rules")
    db.reference("/users/alice", app=alice).set({"age": 30})
    assert db.reference("/users/alice", app=alice).get() == {"age": 30}
    with pytest.raises(exceptions.UnauthenticatedError, match="Permission denied"):
        db.reference("/users/bob", app=alice).set({"age": 1})
    with pytest.raises(exceptions.UnauthenticatedError, match="Permission denied"):
        db.reference("/users/alice/age", app=alice).set(-1)
    with pytest.raises(exceptions.UnauthenticatedError):
        db.reference("/users", app=alice).get()
    # The owner is not bound by rules.
    db.reference("/users/bob", app=admin).set({"age": 1})
    assert db.reference("/users", app=admin).get() == {"alice": {"age": 30}, "bob": {"age": 1}}
