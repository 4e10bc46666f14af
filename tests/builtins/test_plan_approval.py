"""plan-approval built-in (builtins.md §5): the protected gate, its modes, its request, and who may answer it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.builtin_harness import BUILTINS, no_runs

PLAN = {"summary": "Stream the export.", "steps": [{"title": "Batch", "detail": "Page by key."}]}


def digest(value: Any) -> str:
    canonical = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def approval_input(**extra: Any) -> dict[str, Any]:
    return {"task": "Fix the nightly export.", "plan": PLAN, "planDigest": digest(PLAN), **extra}


def run_ids(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "runs").iterdir() if not p.name.startswith("."))


def start(cli: Any, **extra: Any) -> dict[str, Any]:
    done = cli("run", "plan-approval", "--input", json.dumps(approval_input(**extra)), "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def inspect(cli: Any, run_id: str) -> dict[str, Any]:
    state: dict[str, Any] = cli.json("inspect", run_id)
    return state


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["continue"], {"decision": "continue", "provenance": "human"}),
        (["stop"], {"decision": "stop", "provenance": "human"}),
        (
            ["replan", "--text", "use a queue"],
            {"decision": "replan", "provenance": "human", "instructions": "use a queue"},
        ),
    ],
)
def test_a_person_decides_and_the_continuation_leaves_through_that_exit(
    cli: Any, args: list[str], expected: dict[str, Any]
) -> None:
    waiting = start(cli)
    assert waiting["status"] == "waiting"
    done = cli.json("decide", waiting["runId"], *args)
    assert done["status"] == "completed"
    assert done["finalOutput"] == {**expected, "planDigest": digest(PLAN)}
    assert done["continuedFrom"]["nodeId"] == "approve_auto"
    assert done["continuedFrom"]["humanDecision"]["provenance"] == "human"


def test_the_request_shows_title_subject_summary_fields_task_and_plan(cli: Any) -> None:
    waiting = start(cli, summary={"text": "We recommend streaming."}, revision=3,
                    approval={"mode": "auto", "timeoutMinutes": 25, "audience": "release managers"})  # fmt: skip
    opened = inspect(cli, waiting["runId"])["finalOutput"]
    assert opened["kind"] == "human_decision" and opened["audience"] == "release managers"
    request = opened["request"]
    assert request["title"] == "Approve the recommended plan?"
    assert request["subject"] == "Fix the nightly export."
    assert request["summary"] == "We recommend streaming."
    fields, task, plan = request["blocks"]
    assert fields == {"kind": "fields", "items": [
        {"label": "Plan digest", "value": digest(PLAN)},
        {"label": "Revision", "value": "3"},
        {"label": "Mode", "value": "auto"},
        {"label": "Timeout", "value": "Continues automatically after 25 minutes without an answer"},
    ]}  # fmt: skip
    assert task == {"kind": "section", "title": "Task", "text": "Fix the nightly export.", "blocks": []}
    assert plan["title"] == "Plan" and plan["blocks"] == [
        {"kind": "preformatted", "text": json.dumps(PLAN, indent=2, ensure_ascii=False)}
    ]
    assert [c["id"] for c in opened["choices"]] == ["continue", "stop", "replan"]
    assert [c["label"] for c in opened["choices"]] == ["Continue with this plan", "Stop here", "Replan"]
    assert opened["choices"][2]["inputs"] == [{"name": "instructions", "prompt": "What should change in the plan?",
                                               "minLength": 1, "maxLength": 4000, "required": True}]  # fmt: skip
    assert opened["onTimeout"]["afterMinutes"] == 25 and opened["onTimeout"]["choice"] == "continue"


def test_defaults_a_ten_minute_auto_gate_and_the_default_summary(cli: Any) -> None:
    opened = inspect(cli, start(cli)["runId"])["finalOutput"]
    assert opened["onTimeout"]["afterMinutes"] == 10
    assert opened["audience"] == "the person who approves this plan"
    assert opened["request"]["summary"] == "A plan is ready for review."
    assert opened["request"]["blocks"][0]["items"][1] == {"label": "Revision", "value": "—"}


def test_replan_with_blank_instructions_is_refused_and_the_decision_stays_open(
    cli: Any, piw_home: Path
) -> None:
    run_id = start(cli)["runId"]
    for text in ("", "   "):
        done = cli("decide", run_id, "replan", "--text", text)
        assert done.returncode == 2 and "instructions" in done.stderr
    assert cli("decide", run_id, "replan").returncode == 2
    assert run_ids(piw_home) == [run_id]  # no continuation
    assert inspect(cli, run_id)["status"] == "waiting"


def test_required_mode_opens_a_gate_without_a_deadline(cli: Any) -> None:
    waiting = start(cli, approval={"mode": "required"})
    state = inspect(cli, waiting["runId"])
    assert state["waitingOn"] == "approve_required"
    assert "onTimeout" not in state["finalOutput"]
    assert [f["label"] for f in state["finalOutput"]["request"]["blocks"][0]["items"]] == ["Plan digest", "Revision",
                                                                                          "Mode"]  # fmt: skip


def test_skip_opens_no_gate_and_continues_with_provenance_skip(cli: Any) -> None:
    done = start(cli, approval={"mode": "skip"})
    assert done["status"] == "completed"
    assert done["finalOutput"] == {"decision": "continue", "provenance": "skip", "planDigest": digest(PLAN)}
    steps = [s["nodeId"] for s in inspect(cli, done["runId"])["steps"]]
    assert steps == ["route_policy", "continued"]


def test_the_first_answer_wins_a_repeat_adopts_it_and_a_different_one_is_refused(
    cli: Any, piw_home: Path
) -> None:
    run_id = start(cli)["runId"]
    first = cli.json("decide", run_id, "stop")
    again = cli.json("decide", run_id, "stop")
    assert again["adopted"] is True and again["runId"] == first["runId"]
    other = cli("decide", run_id, "continue")
    assert other.returncode == 2 and "already" in other.stderr.lower()
    assert len(run_ids(piw_home)) == 2


def test_a_model_cannot_answer_the_gate(cli: Any, piw_home: Path, tmp_path: Path) -> None:
    # A parent whose agent step tries to answer through the workflow tool before plan-approval opens: the tool
    # has no such action; the gate opens and waits for a person.
    parent = tmp_path / "asker.workflow.py"
    parent.write_text(
        "from piw import agent, define_workflow, edge, include\n"
        f"APPROVAL = {json.dumps(approval_input())!r}\n"
        "import json\n"
        "workflow = define_workflow(name='asker', start_at='model',\n"
        "    nodes={'model': agent(prompt='Approve the plan for me.')},\n"
        "    includes={'approval': include('plan-approval', input=json.loads(APPROVAL))},\n"
        "    edges=[edge('model', 'approval')])\n",
        encoding="utf-8",
    )
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"model": [
        {"tool": "workflow", "arguments": {"action": "decide", "choice": "continue"}},
        {"tool": "workflow", "arguments": {"action": "answer", "answer": {"choice": "continue"}}},
        {"submit": {"asked": True}},
    ]}), encoding="utf-8")  # fmt: skip
    done = cli("run", str(parent), "--provider", "scripted", "--script", str(replies), "--json")
    assert json.loads(done.stdout)["status"] == "waiting"
    (run_id,) = run_ids(piw_home)
    state = inspect(cli, run_id)
    assert state["waitingOn"] == "approval/approve_auto"
    entries = (
        (piw_home / "runs" / run_id / "session" / "entries.ndjson").read_text(encoding="utf-8").splitlines()
    )
    errors = [json.loads(e)["entry"]["message"]["content"] for e in entries
              if json.loads(e)["entry"]["message"]["role"] == "toolResult"][:2]  # fmt: skip
    assert len(errors) == 2 and all(
        e.startswith("Invalid workflow tool call: action must be") for e in errors
    )


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"planDigest": "sha256:" + "0" * 64}, "does not match the plan, whose digest is " + digest(PLAN)),
        ({"planDigest": "md5:abc"}, "planDigest must be 'sha256:' followed by 64 lower-case hex digits"),
        ({"approval": {"mode": "required", "timeoutMinutes": 5}}, "timeoutMinutes applies only to mode 'auto'"),
        ({"approval": {"mode": "auto", "timeoutMinutes": 1441}}, "approval.timeoutMinutes: Input should be less than"),
        ({"approval": {"mode": "never"}}, "approval.mode: Input should be 'auto', 'required' or 'skip'"),
        ({"approval": {"mode": "auto", "audience": "a" * 201}}, "approval.audience: String should have at most 200"),
        ({"summary": {"text": ""}}, "summary.text: String should have at least 1 character"),
        ({"summary": {"text": "x" * 10_001}}, "summary.text: String should have at most 10000 characters"),
        ({"revision": 1001}, "revision: Input should be less than or equal to 1000"),
        ({"task": "t" * 8_001}, "task: String should have at most 8000 characters"),
        ({"task": " "}, "task must not be blank"),
        ({"plan": {"big": "p" * 50_000}}, "plan must be at most 50000 characters of canonical JSON"),
        ({"surprise": True}, "surprise: Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_bad_input_is_rejected_before_a_run_exists(
    cli: Any, piw_home: Path, extra: dict[str, Any], needle: str
) -> None:
    payload = approval_input(**extra)
    if "plan" in extra and "planDigest" not in extra:
        payload["planDigest"] = digest(extra["plan"])
    done = cli("run", "plan-approval", "--input", json.dumps(payload))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: Invalid input for plan-approval: ") and needle in line
    assert no_runs(piw_home)


def test_the_shipped_example_waits_for_a_decision(cli: Any) -> None:
    done = cli("run", "plan-approval", "--input", f"@{BUILTINS / 'plan-approval.input.json'}", "--json")
    assert json.loads(done.stdout)["status"] == "waiting"


def test_cancel_while_waiting_cancels_the_row_and_leaves_the_bundle_final(cli: Any, piw_home: Path) -> None:
    from piw.store.db.run_database import open_run_database

    run_id = start(cli)["runId"]
    trace = (piw_home / "runs" / run_id / "trace.ndjson").read_bytes()
    done = cli("cancel", run_id)
    assert done.returncode == 0, done.stderr
    assert "cancelled (its bundle is unchanged)" in done.stdout
    row = open_run_database(piw_home).queue.get(run_id)
    assert row is not None and row.status == "cancelled"
    assert (piw_home / "runs" / run_id / "trace.ndjson").read_bytes() == trace
    assert inspect(cli, run_id)["status"] == "waiting"


def test_a_cancelled_waiting_decision_starts_no_continuation(cli: Any, piw_home: Path) -> None:
    run_id = start(cli)["runId"]
    assert cli("cancel", run_id).returncode == 0
    refused = cli("decide", run_id, "continue")
    assert refused.returncode == 2
    assert refused.stderr.endswith("was cancelled while waiting at approve_auto; it will not continue.\n")
    assert run_ids(piw_home) == [run_id]
    from piw.store.db.run_database import open_run_database

    (decision,) = open_run_database(piw_home).decisions.decisions_of(run_id)
    assert (decision.status, decision.provenance) == ("cancelled", "cancel")
