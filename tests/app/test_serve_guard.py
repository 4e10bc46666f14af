"""``piw view --serve`` locked down (issue 27, items 1 and 2): a token, the Host and Origin checks, a session cap,
and sessions that render whatever ``NO_COLOR`` and ``TERM`` the server has.

Every test but the first few drives a real ``piw view --serve`` subprocess on 127.0.0.1 (a free port) over real
HTTP and websocket connections (aiohttp's client, the library textual-serve itself runs on); nothing is mocked.
The rules themselves are ``piw.web.guard`` (``docs/guarantees.md``, "Security").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import socket
import sqlite3
import subprocess
import time
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from piw.web.guard import WebGuard, host_with_port
from tests.support.cli import PIW_COMMAND, Cli
from tests.support.views import Runs, shared_runs

T = TypeVar("T")
STARTUP_S = 30.0  # a loaded two-core machine starts piw, aiohttp and textual-serve in 1–3 s
STEP_S = 10.0  # one request or handshake; a websocket session's first frames


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


# ---- the rules, without a server ------------------------------------------------------------------------------


def test_host_names_are_spelled_as_a_host_header_spells_them() -> None:
    assert host_with_port("127.0.0.1", 8765) == "127.0.0.1:8765"
    assert host_with_port("Box.Example", 8765) == "box.example:8765"
    assert host_with_port("::1", 8765) == "[::1]:8765"
    assert host_with_port("[::1]", 8765) == "[::1]:8765"
    assert host_with_port("proxy.example:443", 8765) == "proxy.example:443"


def test_the_guard_checks_host_then_token_then_origin() -> None:
    guard = WebGuard("127.0.0.1", 8765, allowed_hosts=("box.example",))
    good = {
        "host": "127.0.0.1:8765",
        "origin": "http://127.0.0.1:8765",
        "query_token": None,
        "cookie_token": guard.token,
        "websocket": True,
    }
    assert guard.check(**good) is None
    assert guard.check(**{**good, "host": "BOX.example:8765", "origin": "http://box.example:8765"}) is None
    refused: list[dict[str, Any]] = [
        {"host": "evil.example:8765"},
        {"host": None},
        {"origin": "http://evil.example"},
        {"cookie_token": guard.token[:-1] + "x"},
        {"cookie_token": None},
        {"cookie_token": None, "query_token": "é" * 43},  # not ASCII: refused, not a TypeError
    ]
    for change in refused:
        refusal = guard.check(**{**good, **change})
        assert refusal is not None and refusal.status == 403, change
    assert guard.check(**{**good, "cookie_token": None, "query_token": guard.token}) is None
    assert guard.check(**{**good, "origin": None}) is not None, "a websocket must name its origin"
    assert guard.check(**{**good, "origin": None, "websocket": False}) is None, "a page load need not"
    assert guard.token in guard.url and guard.url.startswith("http://127.0.0.1:8765/?token=")
    assert len(guard.token) >= 43 and guard.token != WebGuard("127.0.0.1", 8765).token


def test_on_a_wildcard_address_any_ip_address_at_the_port_is_a_host_but_no_other_name() -> None:
    guard = WebGuard("0.0.0.0", 9000, allowed_hosts=("box.example",))
    assert all(
        guard.host_allowed(host)
        for host in ("127.0.0.1:9000", "192.0.2.7:9000", "[::1]:9000", "box.example:9000")
    )
    assert not any(
        guard.host_allowed(host) for host in ("evil.example:9000", "192.0.2.7:9001", "192.0.2.7", None)
    )
    assert guard.url.startswith("http://box.example:9000/?token=")
    assert not WebGuard("127.0.0.1", 9000).host_allowed("192.0.2.7:9000"), (
        "a loopback server answers its name only"
    )


def test_the_sessions_are_counted_and_released() -> None:
    guard = WebGuard("127.0.0.1", 8765, max_sessions=2)
    assert guard.open_session() is None and guard.open_session() is None
    full = guard.open_session()
    assert full is not None and full.status == 503 and "All 2 sessions are in use" in full.reason
    guard.close_session()
    assert guard.open_session() is None
    with pytest.raises(ValueError):
        WebGuard("127.0.0.1", 8765, max_sessions=0)


def test_the_options_are_named_and_checked(cli: Cli) -> None:
    shown = cli("view", "--help")
    assert "--allow-host" in shown.stdout and "--max-sessions" in shown.stdout
    for args, message in (
        (("--max-sessions", "0"), "--max-sessions 0 must be at least 1"),
        (("--allow-host", "a b"), "--allow-host 'a b' is not a host name or address"),
    ):
        done = cli("view", "--serve", "--port", str(free_port()), *args)
        assert done.returncode == 2 and f"Error: {message}" in done.stderr, done.stderr


# ---- a real server -----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    """A running ``piw view --serve``: its port, the printed address and token, and where its output goes."""

    process: subprocess.Popen[bytes]
    port: int
    url: str
    token: str
    out: Path
    err: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cookie(self) -> dict[str, str]:
        return {"Cookie": f"piw-token-{self.port}={self.token}"}

    @property
    def origin(self) -> dict[str, str]:
        return {"Origin": self.base}

    def output(self) -> str:
        """Everything the server wrote (a session's viewer stderr is copied to the server's stdout)."""
        return self.out.read_text("utf-8", "replace") + self.err.read_text("utf-8", "replace")


@contextmanager
def serving(
    home: Path, folder: Path, *args: str, env: Mapping[str, str | None] | None = None
) -> Iterator[Served]:
    port = free_port()
    environment = {**os.environ, "PIW_HOME": str(home)}
    for key, value in (env or {}).items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    out, err = folder / f"serve-{port}.out", folder / f"serve-{port}.err"
    with out.open("wb") as out_file, err.open("wb") as err_file:
        process = subprocess.Popen(
            [*PIW_COMMAND, "view", "--serve", "--port", str(port), *args],
            env=environment,
            stdout=out_file,
            stderr=err_file,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + STARTUP_S
        while not (found := re.search(r"Serving piw view on (\S+/\?token=(\S+)) ", err.read_text("utf-8"))):
            assert process.poll() is None, out.read_text() + err.read_text()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield Served(process, port, found.group(1), found.group(2), out, err)
    finally:
        process.terminate()
        process.wait(timeout=30)


def bounded(work: Coroutine[Any, Any, T], seconds: float = STEP_S) -> T:
    return asyncio.run(asyncio.wait_for(work, seconds))


async def get(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, Mapping[str, str], str]:
    async with (
        aiohttp.ClientSession() as client,
        client.get(url, headers=dict(headers or {}), allow_redirects=False) as response,
    ):
        return response.status, response.headers, await response.text()


async def handshake(served: Served, headers: Mapping[str, str]) -> int:
    """The status of a websocket handshake at ``/ws``: 101 when a session started (it is closed at once)."""
    async with aiohttp.ClientSession() as client:
        try:
            async with client.ws_connect(f"{served.base}/ws?width=80&height=24", headers=dict(headers)):
                return 101
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status


@pytest.fixture(scope="module")
def served(runs: Runs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the refusal tests, which start no session (``piw.test`` is an allowed extra name)."""
    with serving(
        runs.home("completed"), tmp_path_factory.mktemp("serve"), "--allow-host", "piw.test"
    ) as server:
        yield server


def test_the_printed_address_opens_the_page_and_sets_a_strict_cookie(served: Served) -> None:
    status, headers, _ = bounded(get(served.url))
    assert status == 303 and headers["Location"] == "/", "the token leaves the address bar at once"
    status, headers_kept, _ = bounded(get(f"{served.url}&fontsize=20"))
    assert status == 303 and headers_kept["Location"] == "/?fontsize=20", "other parameters stay"
    status, headers_far, _ = bounded(get(f"{served.base}//evil.example/?token={served.token}"))
    assert status != 303 and "Location" not in headers_far, "the token load never redirects elsewhere"
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"piw-token-{served.port}={served.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, headers, page = bounded(get(f"{served.base}/", served.cookie))
    assert status == 200 and "piw view" in page
    assert f'data-session-websocket-url="ws://127.0.0.1:{served.port}/ws"' in page
    assert headers["Referrer-Policy"] == "no-referrer" and headers["X-Frame-Options"] == "DENY"
    assert served.token not in page
    assert bounded(get(f"{served.base}/static/js/textual.js", served.cookie))[0] == 200
    err = served.err.read_text()
    assert f"Serving piw view on http://127.0.0.1:{served.port}/?token={served.token} (Ctrl-C stops)." in err
    assert err.count(served.token) == 1 and "Warning" not in err, (
        "printed once, in the address; loopback: no warning"
    )
    assert served.token not in served.out.read_text(), "no access log repeats it"


def test_a_request_without_the_right_token_is_refused(served: Served) -> None:
    for url in (f"{served.base}/", f"{served.base}/?token=wrong", f"{served.base}/static/js/textual.js"):
        status, _, text = bounded(get(url))
        assert status == 403 and "needs its token" in text, url
    assert bounded(get(f"{served.base}/", {"Cookie": f"piw-token-{served.port}=wrong"}))[0] == 403
    assert bounded(handshake(served, served.origin)) == 403, "the socket needs it too"
    assert bounded(handshake(served, {**served.origin, "Cookie": "piw-token-1=" + served.token})) == 403


def test_a_request_naming_a_foreign_host_is_refused(served: Served) -> None:
    """DNS rebinding: a foreign name that resolves to 127.0.0.1 reaches the port, but names itself in Host."""
    for host in ("evil.example", f"evil.example:{served.port}", f"127.0.0.1:{served.port + 1}", "localhost"):
        status, _, text = bounded(get(served.url, {"Host": host}))
        assert status == 403 and "answers only to the address it printed" in text, host
        assert bounded(handshake(served, {**served.cookie, "Host": host, "Origin": f"http://{host}"})) == 403
    assert bounded(get(served.url, {"Host": f"piw.test:{served.port}"}))[0] == 303, (
        "a name given with --allow-host"
    )
    status, _, page = bounded(get(f"{served.base}/", {**served.cookie, "Host": f"PIW.test:{served.port}"}))
    assert status == 200 and f"ws://PIW.test:{served.port}/ws" in page, (
        "its socket goes where the page came from"
    )


def test_a_websocket_from_a_foreign_origin_is_refused(served: Served) -> None:
    for origin in ("http://evil.example", f"http://127.0.0.1:{served.port + 1}", "null"):
        assert bounded(handshake(served, {**served.cookie, "Origin": origin})) == 403, origin
    assert bounded(handshake(served, served.cookie)) == 403, "a socket with no Origin at all"
    status, _, text = bounded(get(f"{served.base}/", {**served.cookie, "Origin": "http://evil.example"}))
    assert status == 403 and "another site" in text


# ---- sessions ----------------------------------------------------------------------------------------------------


async def refused_fifth(served: Served) -> tuple[list[int], int, int, str, int]:
    """Four sessions held open; then a fifth handshake, the same as a raw upgrade request, and one after a close."""
    headers = {**served.cookie, **served.origin}
    url = f"{served.base}/ws?width=80&height=24"
    async with aiohttp.ClientSession() as client:
        sockets = [await client.ws_connect(url, headers=headers) for _ in range(4)]
        opened = [101 for _ in sockets]
        try:
            await client.ws_connect(url, headers=headers)
            fifth = 101
        except aiohttp.WSServerHandshakeError as refused:
            fifth = refused.status
        upgrade = {**headers, "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"}
        async with client.get(
            url, headers={**upgrade, "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
        ) as raw:
            raw_status, raw_text = raw.status, await raw.text()
        await sockets.pop().close()
        while True:  # the slot frees once that session's viewer has quit
            try:
                sockets.append(await client.ws_connect(url, headers=headers))
                after_close = 101
                break
            except aiohttp.WSServerHandshakeError as refused:
                assert refused.status == 503
                await asyncio.sleep(0.1)
        for ws in sockets:
            await ws.close()
    return opened, fifth, raw_status, raw_text, after_close


def test_a_fifth_concurrent_session_is_refused(runs: Runs, tmp_path: Path) -> None:
    with serving(runs.home("completed"), tmp_path) as served:
        opened, fifth, raw_status, raw_text, after_close = bounded(refused_fifth(served), 30.0)
    assert opened == [101] * 4
    assert fifth == 503 and raw_status == 503
    assert raw_text == "All 4 sessions are in use: close another tab of this viewer and reload (or restart it " \
        "with a larger --max-sessions).\n"  # fmt: skip
    assert after_close == 101, "closing a session frees its place"


async def session_text(served: Served, keys: list[str]) -> str:
    """What one session's viewer sends: frames until the runs list is drawn, then the answers to ``keys``."""
    received = bytearray()
    async with (
        aiohttp.ClientSession() as client,
        client.ws_connect(
            f"{served.base}/ws?width=100&height=30", headers={**served.cookie, **served.origin}
        ) as ws,
    ):
        while b"views-demo" not in received:
            message = await ws.receive()
            assert message.type == aiohttp.WSMsgType.BINARY, (message, served.output())
            received += message.data
        for key in keys:
            await ws.send_str(json.dumps(["stdin", key]))
        await ws.send_str(json.dumps(["ping", "done"]))  # answered by the server once the keys are relayed
        while True:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.BINARY:
                received += message.data
            elif message.type != aiohttp.WSMsgType.TEXT:
                raise AssertionError(f"the session ended: {message} {served.output()}")
            elif json.loads(message.data) == ["pong", "done"]:
                break
        await asyncio.sleep(1.0)  # the viewer's answer to the last keys
        with contextlib.suppress(asyncio.TimeoutError):
            while (message := await ws.receive(timeout=0.2)).type == aiohttp.WSMsgType.BINARY:
                received += message.data
    return received.decode("utf-8", "replace")


def digest(home: Path) -> dict[str, str]:
    """Every run bundle's files byte for byte, and the rows of every table in ``piw.sqlite`` that can change a run
    (queue, decisions, notifications, idempotency keys): all but ``runs``, the index the runs list reconciles
    with the bundles, as ``piw runs`` does (a cache: ``docs/guarantees.md``)."""
    found = {
        str(path.relative_to(home)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((home / "runs").rglob("*"))
        if path.is_file()
    }
    database = sqlite3.connect(f"file:{home / 'piw.sqlite'}?mode=ro", uri=True)
    try:
        tables = [name for (name,) in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        assert "run_queue" in tables and "human_decisions" in tables
        for table in sorted(set(tables) - {"runs"}):
            rows = sorted(map(repr, database.execute(f'SELECT * FROM "{table}"')))
            found[f"piw.sqlite {table}"] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    finally:
        database.close()
    return found


# Every key the viewer binds (open, panes 1–6, tab, time travel, live, expand, help, filter, back): none can
# change a run.
KEYS = ["\r", "1", "2", "3", "4", "5", "6", "\t", "\r", "\x1b", ",", ".", "[", "]", "l", "x", "?", "?", "f"]


@pytest.mark.parametrize(
    "env",
    [
        {"NO_COLOR": None, "TERM": "xterm-256color"},
        {"NO_COLOR": "1", "TERM": "xterm-256color"},
        {"NO_COLOR": "1", "TERM": "dumb"},
        {"NO_COLOR": None, "TERM": None},
    ],
    ids=["colour", "no-color", "no-color-dumb-term", "no-term"],
)
def test_a_served_session_renders_and_changes_no_run(
    runs: Runs, tmp_path: Path, env: dict[str, str | None]
) -> None:
    """Whatever ``NO_COLOR`` and ``TERM`` the server has (``NO_COLOR`` was an ``AttributeError`` in every session)."""
    home = runs.home("completed")
    before = digest(home)
    with serving(home, tmp_path, env=env) as served:
        text = bounded(session_text(served, KEYS), 30.0)
    assert "views-demo" in text and "completed" in text, "the runs list was drawn"
    assert "Traceback" not in served.output() and "Error" not in served.output(), served.output()
    assert digest(home) == before, "a served session changed nothing in PIW_HOME"
