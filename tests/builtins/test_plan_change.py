"""plan-change built-in (builtins.md §6): autoplan, then approval, with bounded replanning, through the CLI.

Each `piw run` / `piw decide` gets its own scripted replies; autoplan's nodes are mounted under `design/`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builtins.test_autoplan import PLAN, SUMMARY, blocked_selection, proposal, script
from tests.support.builtin_harness import BUILTINS, no_runs

TASK = "Nightly exports time out for the largest accounts."


def replies(tmp_path: Path, name: str, **overrides: list[Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({f"design/{k}": v for k, v in script(**overrides).items()}), encoding="utf-8")
    return str(path)


def run_plan_change(cli: Any, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    overrides = extra.pop("overrides", {})
    done = cli("run", "plan-change", "--input", json.dumps({"task": TASK, **extra}), "--provider", "scripted",
               "--script", replies(tmp_path, "first", **overrides), "--json")  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def decide(
    cli: Any, tmp_path: Path, run_id: str, *args: str, name: str = "next", **overrides: list[Any]
) -> Any:
    if (
        args[0] == "replan"
    ):  # autoplan now has the reviewed plan as previousPlan, so the proposal must judge it (P3)
        ruled_out = {"status": "rejected", "reason": "The reviewer asked for changes."}
        overrides.setdefault("propose", [{"submit": proposal(previous=ruled_out)}])
    return cli.json("decide", run_id, *args, "--provider", "scripted", "--script",
                    replies(tmp_path, name, **overrides))  # fmt: skip


def trace(home: Path, run_id: str) -> list[dict[str, Any]]:
    lines = (home / "runs" / run_id / "trace.ndjson").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def summaries(home: Path, run_id: str) -> list[str]:
    path = home / "runs" / run_id / "session" / "entries.ndjson"
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        message = json.loads(line)["entry"]["message"]
        blocks = message.get("content") if message["role"] == "assistant" else None
        if blocks and not any(b.get("type") == "toolCall" for b in blocks):
            found.append("".join(b.get("text", "") for b in blocks))
    return found


def entered(home: Path, run_id: str, mount: str) -> list[Any]:
    return [e["payload"]["input"] for e in trace(home, run_id)
            if e["type"] == "include_entered" and e["payload"]["mountPath"] == mount.split("/")]  # fmt: skip


def test_continue_shows_the_summary_before_the_gate_and_ends_ready(
    cli: Any, piw_home: Path, tmp_path: Path
) -> None:
    waiting = run_plan_change(cli, tmp_path)
    assert waiting["status"] == "waiting"
    events = trace(piw_home, waiting["runId"])
    types = [(e["type"], e.get("nodeId")) for e in events]
    recorded = types.index(("assistant_completion_recorded", "design/ready_summary/summarize"))
    assert recorded < types.index(("run_waiting", None))
    assert summaries(piw_home, waiting["runId"]) == [SUMMARY]
    state = cli.json("inspect", waiting["runId"])
    assert state["waitingOn"] == "approval/approve_auto" and state["finalOutput"]["kind"] == "human_decision"
    assert state["finalOutput"]["request"]["summary"] == SUMMARY
    assert entered(piw_home, waiting["runId"], "design")[0]["approvalPending"] is True
    done = decide(cli, tmp_path, waiting["runId"], "continue")
    assert done["status"] == "completed"
    out = done["finalOutput"]
    assert out["plan"] == PLAN and out["approval"] == {"decision": "continue", "provenance": "human"}
    assert out["replans"] == 0 and out["autoplan"]["status"] == "ready"
    assert out["planDigest"] == out["autoplan"]["planDigest"]


def test_stop_ends_blocked_by_the_reviewer(cli: Any, tmp_path: Path) -> None:
    waiting = run_plan_change(cli, tmp_path, approval={"mode": "required"})
    assert cli.json("inspect", waiting["runId"])["waitingOn"] == "approval/approve_required"
    out = decide(cli, tmp_path, waiting["runId"], "stop")["finalOutput"]
    assert out["cause"] == "stopped" and out["replans"] == 0 and out["autoplan"]["status"] == "ready"


def test_replan_once_then_continue(cli: Any, piw_home: Path, tmp_path: Path) -> None:
    first = run_plan_change(cli, tmp_path, newEvidence="It failed at 4 hours.")
    second_summary = "We now recommend a queue.\n- Queue the rows.\nThis is the plan selected for approval."
    second_plan = {**PLAN, "summary": "Queue the export."}
    again_replies = {"plan": [{"submit": second_plan}], "ready_summary/summarize": [{"text": second_summary}]}
    second = decide(cli, tmp_path, first["runId"], "replan", "--text", "use a queue", **again_replies)
    assert second["status"] == "waiting"
    assert summaries(piw_home, first["runId"]) == [SUMMARY]
    assert summaries(piw_home, second["runId"]) == [second_summary]  # exactly one new summary
    (again,) = entered(piw_home, second["runId"], "design")
    assert again["previousPlan"] == PLAN
    assert again["newEvidence"] == (
        "Reviewer instructions for the new plan:\nuse a queue\n\nEarlier evidence:\nIt failed at 4 hours."
    )
    (approval,) = entered(piw_home, second["runId"], "approval")
    assert approval["revision"] == 2 and approval["plan"] == second_plan
    done = decide(cli, tmp_path, second["runId"], "continue", name="last")
    out = done["finalOutput"]
    assert done["status"] == "completed" and out["replans"] == 1 and out["plan"] == second_plan
    assert out["autoplan"]["previousPlanDigest"] == first_digest(piw_home, first["runId"])


def first_digest(home: Path, run_id: str) -> str:
    return str(next(e["payload"]["input"]["planDigest"] for e in trace(home, run_id)
                    if e["type"] == "include_entered" and e["payload"]["mountPath"] == ["approval"]))  # fmt: skip


def test_skip_opens_no_gate_and_plans_without_approval_pending(
    cli: Any, piw_home: Path, tmp_path: Path
) -> None:
    done = run_plan_change(cli, tmp_path, approval={"mode": "skip"})
    assert done["status"] == "completed"
    assert done["finalOutput"]["approval"] == {"decision": "continue", "provenance": "skip"}
    assert entered(piw_home, done["runId"], "design")[0]["approvalPending"] is False
    summary_input = entered(piw_home, done["runId"], "design/ready_summary")
    assert summary_input[0]["mustInclude"][-1] == "The status: this is the recommended plan"


def test_max_replans_zero_refuses_a_replan_without_planning_again(
    cli: Any, piw_home: Path, tmp_path: Path
) -> None:
    waiting = run_plan_change(cli, tmp_path, maxReplans=0)
    done = decide(cli, tmp_path, waiting["runId"], "replan", "--text", "try again")
    assert done["status"] == "completed"
    out = done["finalOutput"]
    assert out["cause"] == "replan_limit" and out["replans"] == 0
    assert out["reason"] == "The plan was sent back for replanning 1 times; the limit is 0."
    assert entered(piw_home, done["runId"], "design") == []  # no second autoplan


def test_a_blocked_autoplan_opens_no_gate(cli: Any, piw_home: Path, tmp_path: Path) -> None:
    done = run_plan_change(cli, tmp_path, overrides={"choose": [{"submit": blocked_selection()}]})
    assert done["status"] == "completed"
    out = done["finalOutput"]
    assert out["cause"] == "design" and out["reason"] == "Every plan needs a database upgrade we cannot do."
    assert out["autoplan"]["status"] == "blocked"
    assert entered(piw_home, done["runId"], "approval") == []


def test_ten_replans_then_continue_stays_within_max_steps(cli: Any, tmp_path: Path) -> None:
    current = run_plan_change(cli, tmp_path, maxReplans=10, approval={"mode": "required"})
    for round_ in range(10):
        current = decide(
            cli, tmp_path, current["runId"], "replan", "--text", f"round {round_}", name=f"r{round_}"
        )
        assert current["status"] == "waiting", current
    done = decide(cli, tmp_path, current["runId"], "continue", name="final")
    assert done["status"] == "completed" and done["finalOutput"]["replans"] == 10
    state = cli.json("inspect", done["runId"])
    assert state["carriedStepCount"] + len(state["steps"]) - state["carriedStepCount"] <= 160
    assert len(state["steps"]) <= 160 and state["maxSteps"] == 160


def test_a_task_over_the_approval_limit_fails_at_that_include(cli: Any, tmp_path: Path) -> None:
    done = run_plan_change(cli, tmp_path, task="t" * 8_001)
    assert done["status"] == "failed"
    assert done["error"].startswith(
        "Include approval could not start: Invalid input for plan-approval: task:"
    )


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"task": "t" * 20_001}, "task: String should have at most 20000 characters"),
        ({"task": "  "}, "task must not be blank"),
        ({"newEvidence": "e" * 12_001}, "newEvidence: String should have at most 12000 characters"),
        ({"maxReplans": 11}, "maxReplans: Input should be less than or equal to 10"),
        ({"maxReplans": -1}, "maxReplans: Input should be greater than or equal to 0"),
        (
            {"approval": {"mode": "required", "timeoutMinutes": 3}},
            "timeoutMinutes applies only to mode 'auto'",
        ),
        ({"constraints": ["c"] * 33}, "constraints: List should have at most 32 items"),
        ({"scope": "s" * 4_001}, "scope: String should have at most 4000 characters"),
        ({"other": 1}, "other: Extra inputs are not permitted"),
    ],
)
def test_bad_input_is_rejected_before_a_run_exists(
    cli: Any, piw_home: Path, extra: dict[str, Any], needle: str
) -> None:
    done = cli("run", "plan-change", "--input", json.dumps({"task": TASK, **extra}), "--provider", "scripted")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: Invalid input for plan-change: ") and needle in line
    assert no_runs(piw_home)


def test_the_shipped_example_runs_offline_to_the_gate(cli: Any) -> None:
    done = cli("run", "plan-change", "--input", f"@{BUILTINS / 'plan-change.input.json'}", "--provider",
               "scripted", "--json")  # fmt: skip
    result = json.loads(done.stdout)
    assert result["status"] == "waiting"
    final = cli.json("decide", result["runId"], "continue", "--provider", "scripted")
    assert final["status"] == "completed" and final["finalOutput"]["approval"]["provenance"] == "human"
