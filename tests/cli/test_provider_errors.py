"""Provider errors with context.

Before, a refused connection ended, after the retries, with ``Connection error: [Errno 111] Connection refused``
(no provider, no URL, nothing to check), and a typo in ``config.toml`` stopped even a workflow with no agent step.
"""

from __future__ import annotations

import importlib
import json
import socket
import textwrap

import pytest

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


def test_a_refused_connection_names_the_provider_its_url_and_what_to_check(
    cli: Cli, make_workflow: WorkflowMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the retries still happen, without their 2 + 4 + 8 s of waiting
    loop = importlib.import_module("piw.agent_steps.loop")  # (``piw.agent`` the attribute is the DSL helper)
    monkeypatch.setattr(loop, "RETRY_DELAYS_S", tuple(0.0 for _ in loop.RETRY_DELAYS_S))
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    (cli.home / "config.toml").write_text(
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
    path = make_workflow("ask", AGENT_FLOW)
    done = cli("run", str(path), env={"COLUMNS": "400"})
    assert done.returncode == 1
    error = next(line for line in done.stdout.splitlines() if line.startswith("error"))
    assert f"cannot reach provider 'local' at {url}" in error
    assert "Connection refused" in error
    assert "Check that the server is running" in error and "base_url in config.toml" in error


def test_a_config_typo_does_not_block_a_workflow_without_agent_steps(cli: Cli) -> None:
    (cli.home / "config.toml").write_text('defualt = "x/y"\n', encoding="utf-8")
    done = cli("run", "hello", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    (warning,) = [line for line in done.stderr.splitlines() if line.startswith("Warning")]
    assert warning.startswith("Warning: Unknown key 'defualt' in ") and "ignored for this run" in warning


def test_a_config_typo_is_an_error_when_a_provider_is_needed(cli: Cli, make_workflow: WorkflowMaker) -> None:
    (cli.home / "config.toml").write_text('defualt = "x/y"\n', encoding="utf-8")
    done = cli("run", str(make_workflow("ask", AGENT_FLOW)))
    assert done.returncode == 2
    assert done.stderr.startswith("Error: Unknown key 'defualt' in ") and "Warning" not in done.stderr
    assert not (cli.home / "runs").exists() or not list((cli.home / "runs").glob("2*"))
