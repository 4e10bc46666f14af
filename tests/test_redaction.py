"""A configured key that a model repeats, a tool prints or a shell step echoes is stored and shown nowhere
(issue 27 item 6).

Before, a provider error echoing the key was redacted, but a model reply holding it was stored verbatim in
``trace.ndjson``, ``state.json`` and the conversation, and printed by ``piw run``, ``watch``, ``inspect`` (every
view, ``--json`` too), ``runs --json`` and the viewer. Here a loopback OpenAI-compatible stub streams the key back
(split across chunks), calls ``bash`` with it, and a shell step echoes it; afterwards no byte of ``PIW_HOME`` and no
command's output holds it.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from piw.app.text import screen_text
from piw.app.viewer import ViewerApp
from piw.redaction import MIN_SECRET_LENGTH, REDACTED, Redactor, home_secrets
from piw.testing import OpenAIStub, StubReply, openai_stub
from tests.support.agent_harness import home, piw_cli, sequence, write_stub_config, write_workflow
from tests.support.viewer import ready

__all__ = ["home", "openai_stub"]

KEY = "sk-live-0123456789abcdefREPEATED"
VIEWS = ("state", "graph", "steps", "updates", "progress", "trace", "conversation", "output")

FLOW = """
import os
import sys
from piw import agent, assistant_message, define_workflow, edge, shell

def echo_key(ctx):
    return {"command": sys.executable, "args": ["-c", "print(" + repr(os.environ["STUB_KEY"]) + ")"]}

workflow = define_workflow(
    name="leaky",
    start_at="ask",
    nodes={
        "ask": agent(prompt="Tell me the key.", expected_output=assistant_message(), tools=("bash",)),
        "echo": shell(echo_key),
    },
    edges=[edge("ask", "echo")],
)
"""


def _configure(home: Path, stub: OpenAIStub) -> None:
    write_stub_config(home, stub)
    config = (home / "config.toml").read_text(encoding="utf-8")
    (home / "config.toml").write_text(
        config.replace('api = "openai-completions"', 'api = "openai-completions"\napi_key = "$STUB_KEY"'),
        encoding="utf-8",
    )


def _home_bytes_hold(home: Path, secret: str) -> list[str]:
    """Every file under ``home`` whose bytes hold ``secret`` (the SQLite database and its WAL included)."""
    needle = secret.encode()
    return [str(path) for path in home.rglob("*") if path.is_file() and needle in path.read_bytes()]


def _viewer_text(home: Path, run_id: str) -> str:
    app = ViewerApp(home, run_id, refresh_s=0)
    shown: list[str] = []

    async def main() -> None:
        async with app.run_test(size=(160, 60)) as pilot:
            await ready(pilot)
            shown.append(screen_text(app))
            for key in ("o", "c", "t"):  # the output, conversation and trace panes
                await pilot.press(key)
                await pilot.pause(0.05)
                shown.append(screen_text(app))

    asyncio.run(main())
    return "\n".join(shown)


def test_a_key_the_model_repeats_is_stored_and_shown_nowhere(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    _configure(home, openai_stub)
    openai_stub.respond = sequence(
        StubReply.tool("bash", {"command": f"echo {KEY}"}),
        StubReply.text(f"The key is {KEY}, as the tool said."),
    )
    flow = write_workflow(tmp_path / "flows", "leaky", FLOW)
    env = {"STUB_KEY": KEY}
    ran = piw_cli(home, "run", str(flow), env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert openai_stub.request_headers[0]["authorization"] == f"Bearer {KEY}"  # it really is the key
    (run_id,) = [p.name for p in (home / "runs").iterdir() if not p.name.startswith(".")]
    assert _home_bytes_hold(home, KEY) == []
    trace = (home / "runs" / run_id / "trace.ndjson").read_text(encoding="utf-8")
    assert REDACTED in trace
    outputs = [ran.stdout, ran.stderr]
    for args in (
        ["watch", run_id],
        ["inspect", run_id, "--json"],
        ["runs", "--json"],
        ["runs"],
        ["show", str(flow)],
        *(["inspect", run_id, "--view", view] for view in VIEWS),
    ):
        done = piw_cli(home, *args, env=env)
        assert done.returncode in (0, 1), (args, done.stderr)
        outputs += [done.stdout, done.stderr]
    outputs.append(_viewer_text(home, run_id))
    assert [output for output in outputs if KEY in output] == []
    assert any(REDACTED in output for output in outputs)
    assert _home_bytes_hold(home, KEY) == []


def test_the_live_stream_never_shows_a_key_split_across_deltas(home: Path, tmp_path: Path) -> None:
    redactor = Redactor([KEY])
    stream = redactor.stream()
    text = f"before {KEY} middle {KEY[:5]} after {KEY}"
    shown = "".join(stream.feed(text[i : i + 3]) for i in range(0, len(text), 3)) + stream.flush()
    assert shown == f"before {REDACTED} middle {KEY[:5]} after {REDACTED}"


def test_secret_sources_cover_literals_references_headers_and_a_database_password(home: Path) -> None:
    (home / "config.toml").write_text(
        textwrap.dedent(
            """
            [providers.a]
            api_key = "literal-key-000111"
            headers = { X-Token = "$HEADER_TOKEN", X-Client = "piw-client-name" }
            [providers.b]
            api_key = "$B_KEY"
            [database]
            password = "$DB_PASSWORD"
            """
        ),
        encoding="utf-8",
    )
    env = {"HEADER_TOKEN": "header-token-222", "B_KEY": "b-key-33334444", "DB_PASSWORD": "db-password-5555"}
    assert home_secrets(home, env) == sorted(
        ["literal-key-000111", "header-token-222", "b-key-33334444", "db-password-5555"]
    )


def test_a_password_inside_a_database_url_is_a_secret(home: Path) -> None:
    (home / "config.toml").write_text(
        '[database]\nurl = "postgresql://piw:config-pass-7777@127.0.0.1:5432/piw"\n', encoding="utf-8"
    )
    env = {"PIW_DATABASE": "postgresql://piw:env%40pass-8888@127.0.0.1/piw"}
    assert set(home_secrets(home, env)) == {"config-pass-7777", "env%40pass-8888", "env@pass-8888"}


@pytest.mark.parametrize("secret", ["abc", "x" * (MIN_SECRET_LENGTH - 1)])
def test_a_secret_shorter_than_the_minimum_is_left_alone(secret: str) -> None:
    assert Redactor([secret]).text(f"a {secret} b") == f"a {secret} b"
    assert json.dumps(Redactor([KEY]).value({"k": [KEY, 1, None]})) == json.dumps({"k": [REDACTED, 1, None]})
