"""``piw serve`` for a test: the real command as a subprocess on a free loopback port, and a real HTTP client.

:func:`served` starts ``piw serve --port 0`` with the test's ``PIW_HOME``, waits for the one line that names the
address it bound, and stops it (SIGTERM, then SIGKILL) at the end; what it printed stays readable as
``Served.output`` (for the "no token in logs" checks).
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2

from tests.support.cli import Cli

ADDRESS = re.compile(r"Serving the piw API on (http://\S+) ")
START_S = 30.0


@dataclass
class Served:
    """A running ``piw serve``: its base URL, its process and everything it printed so far."""

    url: str
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def client(self, token: str | None = None, timeout: float = 30.0) -> httpx2.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx2.Client(base_url=self.url, headers=headers, timeout=timeout)

    def get(self, path: str, token: str | None = None, **params: Any) -> httpx2.Response:
        with self.client(token) as client:
            return client.get(path, params=params or None)

    def post(self, path: str, token: str | None = None, body: Any = None) -> httpx2.Response:
        with self.client(token) as client:
            return client.post(path, json=body if body is not None else {})


def _drain(stream: Any, lines: list[str], found: threading.Event) -> None:
    for line in stream:
        lines.append(line)
        if ADDRESS.search(line):
            found.set()
    found.set()


@contextlib.contextmanager
def served(cli: Cli, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``piw serve --port 0 ARGS`` until the block ends."""
    process = subprocess.Popen(
        [*cli_command(), "serve", "--port", "0", *args],
        cwd=cli.cwd,
        env=cli.environment(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    found = threading.Event()
    reader = threading.Thread(target=_drain, args=(process.stdout, lines, found), daemon=True)
    reader.start()
    try:
        found.wait(START_S)
        match = next((m for m in map(ADDRESS.search, lines) if m), None)
        assert match is not None, "".join(lines)
        server = Served(match.group(1), process, lines)
        _wait_until_answering(server)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        reader.join(5)


def _wait_until_answering(server: Served) -> None:
    deadline = time.monotonic() + START_S
    while True:
        try:
            httpx2.get(server.url + "/openapi.json", timeout=5.0)
            return
        except httpx2.TransportError:
            if time.monotonic() > deadline or server.process.poll() is not None:
                raise
            time.sleep(0.05)


def cli_command() -> list[str]:
    from tests.support.cli import PIW_COMMAND

    return list(PIW_COMMAND)


def create_token(cli: Cli, name: str, scope: str, *extra: str) -> str:
    """``piw tokens create NAME --scope SCOPE --json``: the token it printed once."""
    done = cli("tokens", "create", name, "--scope", scope, "--json", *extra)
    assert done.returncode == 0, done.stderr
    import json

    token = json.loads(done.stdout)["token"]
    assert isinstance(token, str)
    return token
