"""Secrets never leave through side doors: provider errors, tool environments, file tools.

Each test first reproduces the leak through the public surface (a real run's files, the CLI's output, what a tool
returns to the model) and then checks it is closed.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from piw.providers.redaction import REDACTED, redact
from piw.providers.scripted import ScriptedProvider
from piw.testing import OpenAIStub, StubReply, openai_stub
from piw.tools import BASH, GREP, LS, READ, ToolContext, allow_env
from piw.tools.environment import BASE_ALLOWED, tool_environment
from tests.support.agent_harness import home, make_executor, one_agent, piw_cli, start, write_stub_config

__all__ = ["home", "openai_stub"]

KEY = "sk-test-0123456789abcdefSECRET"


def _files(root: Path) -> dict[str, str]:
    return {str(p): p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*") if p.is_file()}


# ---- provider errors ----------------------------------------------------------------------------------------


def test_a_provider_error_echoing_the_key_is_redacted_everywhere(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    config = (home / "config.toml").read_text(encoding="utf-8")
    (home / "config.toml").write_text(
        config.replace('api = "openai-completions"', 'api = "openai-completions"\napi_key = "$STUB_KEY"'),
        encoding="utf-8",
    )
    openai_stub.respond = lambda body: StubReply.http_error(
        401, message=f"Incorrect API key provided: {KEY}."
    )
    flow = one_agent(tmp_path, "agent(prompt='Classify.')")
    env = {"STUB_KEY": KEY}
    ran = piw_cli(home, "run", str(flow), env=env)
    assert ran.returncode != 0
    assert openai_stub.request_headers[0]["authorization"] == f"Bearer {KEY}"  # it really was sent
    (run_id,) = [p.name for p in (home / "runs").iterdir() if not p.name.startswith(".")]
    shown = piw_cli(home, "inspect", run_id, "--json", env=env)
    listed = piw_cli(home, "runs", "--json", env=env)
    for output in (ran.stdout, ran.stderr, shown.stdout, shown.stderr, listed.stdout, listed.stderr):
        assert KEY not in output
    files = _files(home / "runs")
    assert files and not [path for path, text in files.items() if KEY in text]
    trace = (home / "runs" / run_id / "trace.ndjson").read_text(encoding="utf-8")
    failed = [json.loads(line) for line in trace.splitlines() if '"node_failed"' in line]
    assert failed[0]["payload"]["error"] == f"HTTP 401: Incorrect API key provided: {REDACTED}."
    assert REDACTED in ran.stdout + ran.stderr


def test_redaction_replaces_every_configured_secret_longest_first() -> None:
    assert (
        redact("a sk-123456 and sk-1234567 x", ["sk-123456", "sk-1234567"])
        == f"a {REDACTED} and {REDACTED} x"
    )
    assert redact("pi piw", ["pi"]) == "pi piw"  # too short to be a secret: never garble errors for nothing


# ---- the bash tool's environment ---------------------------------------------------------------------------


def run_bash(command: str, cwd: Path, **ctx: Any) -> str:
    context = ToolContext(cwd=cwd, timeout_s=20, cancel=threading.Event(), **ctx)
    return BASH.execute("c1", {"command": command}, context).content


def test_bash_starts_with_a_minimal_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("PIW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIW_TEST_TOOL_VAR", "visible")
    seen = run_bash("env", tmp_path)
    assert KEY not in seen and "PIW_HOME" not in seen and "PIW_TEST_TOOL_VAR" not in seen
    assert "PATH=" in seen  # ordinary commands still work
    names = {line.split("=", 1)[0] for line in seen.splitlines() if "=" in line}
    assert names - {"PWD", "SHLVL", "_", "OLDPWD"} <= set(BASE_ALLOWED)
    assert (
        run_bash("echo ${PIW_TEST_TOOL_VAR:-unset}", tmp_path, env_allow=("PIW_TEST_TOOL_VAR",)) == "visible"
    )


def test_authors_extend_the_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIW_TEST_AUTHOR_VAR", "yes")
    assert "PIW_TEST_AUTHOR_VAR" not in tool_environment()
    allow_env("PIW_TEST_AUTHOR_VAR")
    assert tool_environment()["PIW_TEST_AUTHOR_VAR"] == "yes"
    with pytest.raises(Exception, match="not an environment variable name"):
        allow_env("NOT-A-NAME")


def test_tool_env_in_config_reaches_the_bash_tool(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from piw.config.settings import ProviderError, parse_config

    assert parse_config({"agent": {"tool_env": ["GH_TOKEN"]}}).agent.tool_env == ["GH_TOKEN"]
    with pytest.raises(ProviderError, match="not an environment variable name"):
        parse_config({"agent": {"tool_env": ["$X"]}})


# ---- file tools refuse PIW_HOME and the config file --------------------------------------------------------


@pytest.fixture
def workdir_with_home(tmp_path: Path) -> tuple[Path, ToolContext]:
    work = tmp_path / "work"
    piw_home = work / ".piw-home"
    (piw_home / "runs" / "r1").mkdir(parents=True)
    (piw_home / "config.toml").write_text(f'[providers.x]\napi_key = "{KEY}"\n', encoding="utf-8")
    (piw_home / "runs" / "r1" / "trace.ndjson").write_text(f'{{"note": "{KEY}"}}\n', encoding="utf-8")
    (work / "notes.txt").write_text("hello\n", encoding="utf-8")
    (work / "link.toml").symlink_to(piw_home / "config.toml")
    protected = (piw_home, piw_home / "config.toml")
    return work, ToolContext(cwd=work, timeout_s=10, cancel=threading.Event(), protected=protected)


@pytest.mark.parametrize("path", [".piw-home/config.toml", ".piw-home/runs/r1/trace.ndjson", "link.toml"])
def test_read_refuses_piw_home_under_the_working_directory(
    workdir_with_home: tuple[Path, ToolContext], path: str
) -> None:
    _, ctx = workdir_with_home
    result = READ.execute("c", {"path": path}, ctx)
    assert result.is_error and "piw's own data" in result.content and KEY not in result.content
    assert not READ.execute("c", {"path": "notes.txt"}, ctx).is_error


def test_walks_skip_piw_home(workdir_with_home: tuple[Path, ToolContext]) -> None:
    _, ctx = workdir_with_home
    listing = LS.execute("c", {"path": "."}, ctx).content
    assert "notes.txt" in listing and ".piw-home" not in listing  # a symlink is named, never followed
    found = GREP.execute("c", {"pattern": "SECRET"}, ctx)
    assert KEY not in found.content


def test_an_agent_step_cannot_read_the_config_through_its_tools(home: Path, tmp_path: Path) -> None:
    """End to end: PIW_HOME under the working directory, the model asks ``read`` for the config file."""
    (home / "config.toml").write_text(f'[providers.x]\napi_key = "{KEY}"\n', encoding="utf-8")
    node = "agent(prompt='Look.', expected_output=assistant_message(), tools=('read',))"
    provider = ScriptedProvider(
        [{"tool": "read", "arguments": {"path": "home/config.toml"}}, "Nothing to see."]
    )
    executor = make_executor(provider)
    executor.settings.cwd = tmp_path  # PIW_HOME is tmp_path/home: inside the working directory
    run = start(home, one_agent(tmp_path / "flows", node), executor=executor)
    (result,) = run.tool_results()
    assert result["isError"] and "piw's own data" in result["content"]
    assert KEY not in json.dumps(provider.requests[-1].model_dump(mode="json"))
    assert os.environ.get("PIW_HOME") == str(home)
