"""A real `tern dev` per test, on a free loopback port (`TERN_BIN`, which
scripts/test.sh sets to the build under test)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request

import pytest

#: How long a node may take to start and say it is ready.
START_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """`tern dev` on `port` with `data_dir`; `restart()` kills it (SIGKILL) and starts it again."""

    def __init__(self, data_dir: str, *extra: str):
        self.binary = os.environ.get("TERN_BIN") or pytest.fail("TERN_BIN must name the tern binary (scripts/test.sh sets it)")
        self.data_dir, self.extra = data_dir, extra
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None
        self.start()

    def start(self) -> None:
        args = [self.binary, "dev", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data_dir, *self.extra]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TERN_LOG_LEVEL": "warn"})
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self.process.poll() is not None:
                pytest.fail(f"tern dev exited with {self.process.returncode}")
            time.sleep(0.05)
        pytest.fail("tern dev did not become ready")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def restart(self) -> None:
        self.kill()
        self.start()

    def token(self) -> str:
        with open(os.path.join(self.data_dir, "admin.token")) as f:
            return f.read().strip()


@pytest.fixture
def node(tmp_path):
    n = Node(str(tmp_path / "data"))
    yield n
    n.kill()


@pytest.fixture
def auth_node(tmp_path):
    n = Node(str(tmp_path / "data"), "--auth")
    yield n
    n.kill()
