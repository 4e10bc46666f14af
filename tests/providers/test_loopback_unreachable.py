"""An unreachable provider on this machine fails at once, not after 14 s of retries (issue 26, "confusing").

A refused connection is transient in general (a remote server restarting), so the agent loop retried it three times
after 2 + 4 + 8 s. On a loopback address nothing accepts the connection a few seconds later either: the run sat for
14 s before saying the server is not running. Now a loopback provider that cannot be connected to — the port is
closed, or nothing accepts within the loopback connect timeout — fails on the first attempt, and says why.

The assertions are on what happened (one request recorded, no retried responses, no retry lines) and on generous
wall-clock bounds far below the old 14 s.
"""

from __future__ import annotations

import json
import socket
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from piw.config.settings import PiwConfig
from piw.providers.failures import final_on_loopback
from piw.providers.openai_compat import OpenAICompatProvider
from piw.providers.selection import select_provider
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

AGENT_FLOW = """
from piw import agent, assistant_message, define_workflow
workflow = define_workflow(name="ask", start_at="step",
                           nodes={"step": agent(prompt="Hi.", expected_output=assistant_message())})
"""


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A loopback port that listens but accepts nothing: its backlog is full, so a new connect hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)
    try:
        yield port
    finally:
        filler.close()
        server.close()


def _configure(home: Path, url: str) -> None:
    (home / "config.toml").write_text(
        textwrap.dedent(
            f"""
            default = "local/m"
            [providers.local]
            api = "openai-completions"
            base_url = "{url}"
            models = ["m"]
            """
        ),
        encoding="utf-8",
    )


def _assistant_entries(home: Path) -> list[dict[str, object]]:
    (run,) = [p for p in (home / "runs").iterdir() if not p.name.startswith(".")]
    lines = (run / "session" / "entries.ndjson").read_text(encoding="utf-8").splitlines()
    messages = [json.loads(line)["entry"]["message"] for line in lines]
    return [m for m in messages if m.get("role") == "assistant"]


def test_a_closed_loopback_port_fails_on_the_first_attempt(cli: Cli, make_workflow: WorkflowMaker) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    _configure(cli.home, url)
    began = time.monotonic()
    done = cli("run", str(make_workflow("ask", AGENT_FLOW)), env={"COLUMNS": "400"})
    took = time.monotonic() - began
    assert done.returncode == 1
    assert "↻ retry" not in done.stdout  # no "retry 1/3 in 2s" line
    (entry,) = _assistant_entries(cli.home)  # one response, the failure; no retried ones before it
    assert entry["stopReason"] == "error" and not entry.get("retried")
    error = str(entry["errorMessage"])
    assert f"cannot reach provider 'local' at {url}" in error and "Connection refused" in error
    assert "Not retried: nothing on this machine accepted the connection." in error
    assert took < 10  # was 14 s of back-off alone


def test_a_loopback_port_that_accepts_nothing_times_out_quickly_and_once(
    cli: Cli, make_workflow: WorkflowMaker, full_backlog: int
) -> None:
    _configure(cli.home, f"http://127.0.0.1:{full_backlog}/v1")
    began = time.monotonic()
    done = cli("run", str(make_workflow("ask", AGENT_FLOW)), env={"COLUMNS": "400"})
    took = time.monotonic() - began
    assert done.returncode == 1
    (entry,) = _assistant_entries(cli.home)
    assert not entry.get(
        "retried"
    ) and "Not retried: nothing on this machine accepted the connection." in str(entry["errorMessage"])
    assert "timed out" in str(entry["errorMessage"])
    assert took < 10  # 2 s to connect, once; was 10 s to connect, four times, plus 14 s of back-off


def _timeout_for(url: str) -> float | None:
    config = PiwConfig.model_validate({"providers": {"p": {"base_url": url, "models": ["m"]}}})
    provider = OpenAICompatProvider(select_provider(config, "p"))
    return provider.timeout.connect


def test_the_connect_timeout_is_short_on_loopback_only() -> None:
    assert _timeout_for("http://127.0.0.1:8080/v1") == 2.0
    assert _timeout_for("http://localhost:11434/v1") == 2.0
    assert _timeout_for("https://api.example.com/v1") == 10.0


def test_only_a_connection_never_made_on_loopback_is_final() -> None:
    """A remote refusal stays transient (a server restarting), and so does a loopback read timeout or reset."""
    refused = ConnectionRefusedError(111, "Connection refused")
    wrapped = RuntimeError("Connection error.")
    wrapped.__cause__ = refused
    assert final_on_loopback("http://127.0.0.1:9/v1", wrapped)
    assert final_on_loopback("http://localhost:9/v1", refused)
    assert not final_on_loopback("https://api.example.com/v1", wrapped)
    assert not final_on_loopback(
        "http://127.0.0.1:9/v1", ConnectionResetError(104, "Connection reset by peer")
    )
    assert not final_on_loopback("http://127.0.0.1:9/v1", TimeoutError("read timed out"))
