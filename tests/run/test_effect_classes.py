"""Effect classes (``docs/effects.md``): an interrupted ``once`` effect is never rerun blindly, a ``reconcile``
effect is checked exactly once, and ``piw resolve`` answers an unknown outcome.

Each run is a real ``piw`` subprocess killed with SIGKILL while its action runs; the action counts its effects in
a file, which is what a user would check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Cli
from tests.support.effects import count, effect_flow, effect_input, killed_mid_action
from tests.support.runs import WorkflowMaker, trace_lines


def _types(home: Path, run_id: str) -> list[str]:
    return [event["type"] for event in trace_lines(home, run_id)]


def test_once_killed_mid_action_parks_outcome_unknown_and_resolve_done_never_reruns(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    raw = effect_input(tmp_path)
    run_id = killed_mid_action(cli, effect_flow(make_workflow, '"once"'), raw)
    Path(raw["release"]).write_text("")  # a rerun would now finish: it must not happen

    resumed = cli("resume", run_id)
    assert resumed.returncode == 1, resumed.stderr
    assert "outcome" in resumed.stdout.lower() and f"piw resolve {run_id}" in resumed.stdout
    assert count(raw["counter"]) == 1
    unknown = [e for e in trace_lines(cli.home, run_id) if e["type"] == "effect_outcome_unknown"]
    assert len(unknown) == 1 and unknown[0]["nodeId"] == "send"
    assert unknown[0]["payload"]["effect"] == "once" and unknown[0]["payload"]["effectStartedAt"]

    listed = cli.json("runs", "--status", "unknown")
    assert [row["runId"] for row in listed] == [run_id] and listed[0]["status"] == "unknown"
    state = cli.json("inspect", run_id)
    assert state["status"] == "unknown" and state["unresolvedEffect"]["nodeId"] == "send"
    card = cli("inspect", run_id)
    assert "outcome unknown" in card.stdout and "send" in card.stdout

    again = cli("resume", run_id)  # a plain resume is refused: nothing changes
    assert again.returncode == 2 and "piw resolve" in again.stderr
    assert _types(cli.home, run_id)[-1] == "effect_outcome_unknown"

    done = cli("resolve", run_id, "done", "--output", '{"sent": true, "id": "m-1"}', "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["status"] == "completed"
    assert payload["finalOutput"] == {"after": {"sent": True, "id": "m-1"}}
    assert count(raw["counter"]) == 1  # the effect ran once
    types = _types(cli.home, run_id)
    assert types.count("node_started") == 3 and "effect_resolved" in types


def test_resolve_retry_reruns_with_the_same_idempotency_key(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    raw = effect_input(tmp_path)
    run_id = killed_mid_action(cli, effect_flow(make_workflow, '"once"'), raw)
    Path(raw["release"]).write_text("")
    assert cli("resume", run_id).returncode == 1
    done = cli("resolve", run_id, "retry", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert count(raw["counter"]) == 2
    keys = Path(raw["keys"]).read_text().split()
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0].startswith("piw-")


def test_resolve_skip_goes_on_with_a_null_output(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    raw = effect_input(tmp_path)
    run_id = killed_mid_action(cli, effect_flow(make_workflow, '"once"'), raw)
    assert cli("resume", run_id).returncode == 1
    done = cli("resolve", run_id, "skip", "--json")
    assert json.loads(done.stdout)["finalOutput"] == {"after": None}
    assert count(raw["counter"]) == 1


@pytest.mark.parametrize("missing", [False, True])
def test_reconcile_calls_check_exactly_once(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path, missing: bool
) -> None:
    raw = effect_input(tmp_path)
    if missing:
        Path(raw["missing"]).write_text("")  # the check finds nothing: the node runs again
    run_id = killed_mid_action(cli, effect_flow(make_workflow, '"reconcile", check=check'), raw)
    Path(raw["release"]).write_text("")
    done = cli("resume", run_id, "--json")
    assert done.returncode == 0, done.stderr
    payload: dict[str, Any] = json.loads(done.stdout)
    assert count(raw["checks"]) == 1
    reconciled = [e for e in trace_lines(cli.home, run_id) if e["type"] == "effect_reconciled"]
    assert len(reconciled) == 1 and reconciled[0]["payload"]["found"] is not missing
    if missing:
        assert payload["finalOutput"] == {"after": {"sent": True}} and count(raw["counter"]) == 2
    else:
        assert payload["finalOutput"] == {"after": {"sent": True, "found": "by check"}}
        assert count(raw["counter"]) == 1


def test_retry_is_the_default_and_idempotent_keeps_meaning_retry(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    raw = effect_input(tmp_path)
    run_id = killed_mid_action(cli, effect_flow(make_workflow, '"idempotent"'), raw)
    Path(raw["release"]).write_text("")
    done = cli("resume", run_id, "--json")
    assert json.loads(done.stdout)["status"] == "completed"
    assert count(raw["counter"]) == 2
    assert "effect_started" not in _types(cli.home, run_id)


def test_resolve_refuses_a_run_whose_outcome_is_known(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    raw = effect_input(tmp_path)
    Path(raw["release"]).write_text("")
    done = cli("run", str(effect_flow(make_workflow, '"once"')), "--input", json.dumps(raw), "--json")
    run_id = json.loads(done.stdout)["runId"]
    before = (cli.home / "runs" / run_id / "trace.ndjson").read_bytes()
    refused = cli("resolve", run_id, "done")
    assert refused.returncode == 2
    assert "no unresolved effect" in refused.stderr and refused.stderr.count("\n") == 1
    assert (cli.home / "runs" / run_id / "trace.ndjson").read_bytes() == before
