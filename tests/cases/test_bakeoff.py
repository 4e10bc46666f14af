"""``piw test --live``: the recorded cases against two loopback providers, one good and one that sends bad JSON."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piw.testing import OpenAIStub, StubReply, replies_responder
from tests.support.cases import EXAMPLES, recorded_triage
from tests.support.cli import Cli


@pytest.fixture
def stubs(cli: Cli) -> Iterator[tuple[OpenAIStub, OpenAIStub]]:
    """``good`` answers as the triage example's replies; ``bad`` calls the workflow tool with broken JSON."""
    with OpenAIStub() as good, OpenAIStub() as bad:
        script = json.loads((EXAMPLES / "triage.replies.json").read_text())
        good.respond = lambda body: replies_responder(script)(body)  # the same replies for every run

        def broken(body: dict[str, Any]) -> StubReply:
            return StubReply.tool("workflow", {}, arguments_text='{"action": "submit", "output": {"route": ')

        bad.respond = broken
        (cli.home / "config.toml").write_text(
            "".join(
                f'[providers.{name}]\nbase_url = "{stub.base_url}"\n'
                f'models = [{{ id = "stub-model", cost = {{ input = 1.0, output = 2.0 }} }}]\n'
                for name, stub in (("good", good), ("bad", bad))
            )
            + "[agent]\nmax_turns = 4\n",
            encoding="utf-8",
        )
        yield good, bad


def _row(stdout: str, label: str) -> list[str]:
    line = next(line for line in stdout.splitlines() if line.startswith(label))
    return line.split()


def test_a_bake_off_prints_a_table_with_each_providers_pass_count(
    cli: Cli, stubs: tuple[OpenAIStub, OpenAIStub]
) -> None:
    good, bad = stubs
    recorded_triage(cli)

    done = cli("test", "--live", "--provider", "good", "--provider", "bad", "--repeat", "2")

    assert done.returncode == 1, done.stdout + done.stderr  # a provider failed cases
    header = _row(done.stdout, "provider/model")
    assert header[:4] == ["provider/model", "passed", "first-try", "valid"]
    good_row, bad_row = _row(done.stdout, "good/stub-model"), _row(done.stdout, "bad/stub-model")
    assert good_row[1:4] == ["2/2", "2/2", "4"]  # passed, first-try valid structured steps, requests
    assert bad_row[1:3] == ["0/2", "0/2"]
    assert good.request_count == 4 and bad.request_count == int(bad_row[3])
    assert good_row[5].startswith("$") and good_row[7] == "ms"  # cost, then p50 "N ms"
    assert (
        "FAIL   bug on bad/stub-model" in done.stdout
        and "status: expected completed, got failed" in done.stdout
    )
    assert "Confidence: few runs per provider" in done.stdout


def test_a_bake_off_stops_when_its_budget_is_spent(cli: Cli, stubs: tuple[OpenAIStub, OpenAIStub]) -> None:
    good, bad = stubs
    recorded_triage(cli)

    done = cli(
        "test",
        "--live",
        "--provider",
        "good",
        "--provider",
        "bad",
        "--repeat",
        "3",
        "--budget",
        "requests=3",
        "--json",
    )

    report = json.loads(done.stdout)
    assert report["stopped"] == "the bake-off's budget is spent"
    assert sum(row["requests"] for row in report["providers"]) <= 3
    assert good.request_count <= 3 and bad.request_count == 0


def test_a_bake_off_needs_a_known_provider(cli: Cli, tmp_path: Path) -> None:
    recorded_triage(cli)
    done = cli("test", "--live", "--provider", "nowhere")
    assert done.returncode == 2 and "Unknown provider 'nowhere'" in done.stderr


def test_a_scripted_provider_answers_every_repeat_of_a_bake_off(cli: Cli) -> None:
    """Each run gets a provider of its own, as each ``piw run`` does: a replies script starts again."""
    recorded_triage(cli)
    shutil.copy(EXAMPLES / "triage.replies.json", cli.home / "triage.replies.json")
    (cli.home / "config.toml").write_text(
        '[providers.recorded]\napi = "scripted"\nscript = "triage.replies.json"\n'
    )

    done = cli("test", "--live", "--provider", "recorded", "--repeat", "2")

    assert done.returncode == 0, done.stdout + done.stderr
    assert _row(done.stdout, "recorded/scripted")[1:3] == ["2/2", "2/2"]
