"""Checkpoints and human decisions: answering, deciding, continuations, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from piw import DefinitionError, choice, human_decision, text_input, timeout_after
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

GATE = """
from piw import choice, compute, define_workflow, edge, human_decision, include, switch, text_input, timeout_after

def request(ctx):
    return {
        "title": "Approve the recommended plan?",
        "subject": ctx.input["task"][:200],
        "summary": "A plan is ready for review.",
        "blocks": [
            {"kind": "fields", "items": [{"label": "Revision", "value": str(ctx.input["revision"])}]},
            {"kind": "section", "title": "Plan", "blocks": [{"kind": "preformatted", "text": "step 1"}]},
        ],
    }

approval = define_workflow(
    name="approval",
    start_at="approve",
    nodes={
        "approve": human_decision(
            lambda ctx: ctx.input.get("audience", "reviewers"),
            [
                choice("continue", "Continue with this plan"),
                choice("stop", "Stop here"),
                choice("replan", "Replan", inputs=[
                    text_input("instructions", prompt="What should change in the plan?", max_length=4000),
                ]),
            ],
            request,
            on_timeout=lambda ctx: timeout_after(10, "continue"),
        ),
        "continued": compute(lambda ctx: {"decision": "continue", "answer": ctx.outputs["approve"],
                                          "task": ctx.input["task"]}),
        "stopped": compute(lambda ctx: {"decision": "stop", "answer": ctx.outputs["approve"]}),
        "replanned": compute(lambda ctx: {"decision": "replan", "answer": ctx.outputs["approve"]}),
    },
    edges=[switch("approve", on="$.choice",
                  cases={"continue": "continued", "stop": "stopped", "replan": "replanned"})],
    exits={"continue": {"from_": "continued"}, "stop": {"from_": "stopped"}, "replan": {"from_": "replanned"}},
)

workflow = define_workflow(
    name="gate",
    start_at="prep",
    max_steps=MAX_STEPS,
    nodes={
        "prep": compute(lambda ctx: {"round": ctx.outputs.get("prep", {"round": 0})["round"] + 1}),
        "ready": compute(lambda ctx: {"approval": ctx.outputs["approval"], "prep": ctx.outputs["prep"],
                                      "big": ctx.outputs["prep"]["round"]}),
        "again": compute(lambda ctx: {"again": True}),
        "halt": compute(lambda ctx: {"halted": ctx.outputs["approval"]}),
    },
    includes={"approval": include(approval, input=lambda ctx: {"task": "ship it " + "x" * 5000,
                                                                "revision": ctx.outputs["prep"]["round"]})},
    edges=[
        edge("prep", "approval"),
        switch("approval", on="$exit", cases={"continue": "ready", "stop": "halt", "replan": "again"}),
        edge("again", "prep"),
    ],
)
"""


@pytest.fixture
def gate(make_workflow: WorkflowMaker) -> Path:
    return make_workflow("gate", GATE.replace("MAX_STEPS", "100"))


def start_waiting(cli: Cli, path: Path) -> dict[str, Any]:
    done = cli("run", str(path), "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["status"] == "waiting"
    return result


def run_ids(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "runs").iterdir() if not p.name.startswith("."))


def inspect(cli: Cli, run_id: str) -> dict[str, Any]:
    done = cli("inspect", run_id, "--json")
    assert done.returncode == 0, done.stderr
    state: dict[str, Any] = json.loads(done.stdout)
    return state


def test_a_run_waiting_for_a_decision_records_the_request_and_says_how_to_answer(
    cli: Cli, gate: Path
) -> None:
    done = cli("run", str(gate))
    assert done.returncode == 0, done.stderr
    (run_id,) = run_ids(cli.home)
    out = done.stdout
    assert "Waiting for a decision at approval › approve (for reviewers):" in out
    assert "Approve the recommended plan?" in out
    assert "replan    Replan — needs text instructions (What should change in the plan?)" in out
    assert f"Decide with: piw decide {run_id} continue\n" in out
    assert f"or: piw decide {run_id} replan --text '…'\n" in out
    assert "Without an answer it continues with continue at " in out
    state = inspect(cli, run_id)
    opened = state["finalOutput"]
    assert state["waitingOn"] == "approval/approve"
    assert opened["kind"] == "human_decision" and opened["audience"] == "reviewers"
    assert opened["decisionId"].startswith("dec_") and opened["requestSha256"].startswith("sha256:")
    assert [c["id"] for c in opened["choices"]] == ["continue", "stop", "replan"]
    assert opened["choices"][2]["inputs"] == [
        {"name": "instructions", "prompt": "What should change in the plan?", "minLength": 1,
         "maxLength": 4000, "required": True}
    ]  # fmt: skip
    assert opened["onTimeout"]["afterMinutes"] == 10 and opened["onTimeout"]["choice"] == "continue"
    assert opened["request"]["blocks"][1] == {
        "kind": "section", "title": "Plan", "blocks": [{"kind": "preformatted", "text": "step 1"}]
    }  # fmt: skip


@pytest.mark.parametrize(
    ("args", "exit_name", "answer"),
    [
        (["continue"], "continue", {"choice": "continue", "provenance": "human"}),
        (["stop"], "stop", {"choice": "stop", "provenance": "human"}),
        (
            ["replan", "--text", "use a queue"],
            "replan",
            {"choice": "replan", "provenance": "human", "instructions": "use a queue"},
        ),
    ],
)
def test_decide_continues_in_a_new_run_along_the_chosen_edge(
    cli: Cli, gate: Path, args: list[str], exit_name: str, answer: dict[str, Any]
) -> None:
    parent = start_waiting(cli, gate)["runId"]
    parent_trace = (cli.home / "runs" / parent / "trace.ndjson").read_bytes()
    done = cli("decide", parent, *args, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    child = result["runId"]
    assert child != parent and result["adopted"] is False
    assert (
        result["continuedFrom"]["runId"] == parent and result["continuedFrom"]["nodeId"] == "approval/approve"
    )
    receipt = result["continuedFrom"]["humanDecision"]
    assert (
        receipt["choice"] == exit_name and receipt["provenance"] == "human" and "@" in receipt["answeredBy"]
    )
    assert receipt["requestSha256"] == inspect(cli, parent)["finalOutput"]["requestSha256"]
    if exit_name == "continue":
        assert result["status"] == "completed"
        assert result["finalOutput"]["approval"]["answer"] == answer
        assert result["finalOutput"]["approval"]["task"].startswith(
            "ship it x"
        )  # the include's input, carried
    elif exit_name == "stop":
        assert result["finalOutput"] == {"halted": {"decision": "stop", "answer": answer}}
    else:
        assert result["status"] == "waiting"  # replanned: round 2 opens the gate again, in the continuation
    assert (cli.home / "runs" / parent / "trace.ndjson").read_bytes() == parent_trace  # the parent is final
    events = trace_lines(cli.home, child)
    started = events[0]["payload"]
    assert started["continuedFrom"] == {
        "runId": parent,
        "nodeId": "approval/approve",
        "humanDecision": receipt,
    }
    assert started["carried"]["outputs"]["approval/approve"] == answer
    assert [s["nodeId"] for s in started["carried"]["steps"]] == ["prep", "approval/approve"]
    state = inspect(cli, child)
    assert state["parentRunId"] == parent and state["carriedStepCount"] == 2
    assert state["humanDecision"] == receipt


def test_a_replan_loop_continues_across_a_chain_of_continuations(cli: Cli, gate: Path) -> None:
    first = start_waiting(cli, gate)["runId"]
    second = cli.json("decide", first, "replan", "--text", "again please")
    assert second["status"] == "waiting"
    second_state = inspect(cli, second["runId"])
    assert second_state["finalOutput"]["decisionId"] != inspect(cli, first)["finalOutput"]["decisionId"]
    assert second_state["carriedStepCount"] == 2 and len(second_state["steps"]) == 6
    third = cli.json("decide", second["runId"], "continue")
    assert third["status"] == "completed"
    assert third["finalOutput"]["prep"] == {"round": 2}
    assert third["finalOutput"]["approval"]["answer"] == {"choice": "continue", "provenance": "human"}
    third_state = inspect(cli, third["runId"])
    assert third_state["carriedStepCount"] == 6
    assert [s["nodeId"] for s in third_state["steps"]][-3:] == [
        "approval/approve",
        "approval/continued",
        "ready",
    ]


def test_steps_carried_count_against_max_steps(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow("gate", GATE.replace("MAX_STEPS", "5"))
    first = start_waiting(cli, path)["runId"]
    second = cli.json(
        "decide", first, "replan", "--text", "again"
    )  # prep, gate carried; replanned, again, prep
    assert second["status"] == "failed"
    assert second["error"].startswith("Run stopped before approval/approve: it reached max_steps (5).")


def test_bad_answers_exit_2_and_change_nothing(cli: Cli, gate: Path) -> None:
    parent = start_waiting(cli, gate)["runId"]
    cases = [
        (
            ["decide", parent, "maybe"],
            "'maybe' is not a choice of this decision; choose one of: continue, stop, replan.",
        ),
        (["decide", parent, "replan"], "Choice 'replan' needs non-blank text for 'instructions'"),
        (
            ["decide", parent, "replan", "--text", "  \n "],
            "Choice 'replan' needs non-blank text for 'instructions'",
        ),
        (["decide", parent, "stop", "--text", "why"], "Choice 'stop' takes no text; drop --text."),
        (["decide", parent, "replan", "--text", "x" * 4001], "it must have 1 to 4,000."),
        (["answer", parent, '{"choice": "continue", "provenance": "timeout"}'], "cannot set 'provenance'"),
        (["answer", parent, "{not json"], "The answer is not valid JSON"),
        (["decide", parent, "continue", "--request-sha256", "sha256:" + "0" * 64], "look at it again"),
    ]
    for args, message in cases:
        done = cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
        assert message in done.stderr, done.stderr
    assert run_ids(cli.home) == [parent]


def test_the_first_answer_wins_an_identical_repeat_adopts_it_a_different_one_is_refused(
    cli: Cli, gate: Path
) -> None:
    parent = start_waiting(cli, gate)["runId"]
    first = cli.json("decide", parent, "stop")
    repeat = cli.json("decide", parent, "stop")
    assert repeat["runId"] == first["runId"] and repeat["adopted"] is True and repeat["status"] == "completed"
    assert run_ids(cli.home) == sorted([parent, first["runId"]])
    before = (cli.home / "runs" / first["runId"] / "trace.ndjson").read_bytes()
    other = cli("decide", parent, "continue")
    assert other.returncode == 2
    assert other.stderr == (
        f"Error: Decision approval/approve of run {parent} was already resolved (stop, human); its continuation "
        f"is run {first['runId']}.\n"
    )
    assert run_ids(cli.home) == sorted([parent, first["runId"]])
    assert (cli.home / "runs" / first["runId"] / "trace.ndjson").read_bytes() == before  # nothing re-ran


CHECKPOINT = """
from pydantic import BaseModel
from piw import checkpoint, compute, define_workflow, edge

class Answer(BaseModel):
    ok: bool
    note: str = ""

workflow = define_workflow(
    name="ask",
    start_at="a",
    nodes={
        "a": compute(lambda ctx: {"a": 1}),
        "ask": checkpoint(lambda ctx: {"question": "go on?", "a": ctx.outputs["a"]}, answer=Answer),
        "after": compute(lambda ctx: {"answer": ctx.outputs["ask"], "a": ctx.outputs["a"], "input": ctx.input}),
    },
    edges=[edge("a", "ask"), edge("ask", "after")],
)
"""


def test_piw_answer_continues_a_checkpoint_with_its_answer_model(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow("ask", CHECKPOINT)
    done = cli("run", str(path), "--input", '{"who": "ada"}')
    assert done.returncode == 0
    (parent,) = run_ids(cli.home)
    assert f"Answer with: piw answer {parent} '{{\"ok\": true}}'" in done.stdout
    bad = cli("answer", parent, '{"ok": "perhaps"}')
    assert bad.returncode == 2 and bad.stderr.startswith(
        "Error: The answer does not fit checkpoint ask: ok: "
    )
    decided = cli("decide", parent, "yes")
    assert decided.returncode == 2
    assert decided.stderr.endswith(f"Answer it with: piw answer {parent} '{{\"ok\": true}}'\n")
    assert run_ids(cli.home) == [parent]
    result = cli.json("answer", parent, '{"ok": true}')
    assert result["status"] == "completed"
    assert result["finalOutput"] == {
        "answer": {"ok": True, "note": ""},
        "a": {"a": 1},
        "input": {"who": "ada"},
    }
    assert cli.json("answer", parent, '{"ok": true}')["runId"] == result["runId"]
    other = cli("answer", parent, '{"ok": false}')
    assert other.returncode == 2
    assert other.stderr == (
        f"Error: Run {parent} was already answered differently; its continuation is run {result['runId']}.\n"
    )


def test_only_a_waiting_run_can_be_answered(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "done", "from piw import compute, define_workflow\nworkflow = define_workflow(name='done', start_at='a', "
        "nodes={'a': compute(1)})\n"
    )  # fmt: skip
    assert cli("run", str(path)).returncode == 0
    (run_id,) = run_ids(cli.home)
    done = cli("answer", run_id, "{}")
    assert (
        done.returncode == 2
        and done.stderr == f"Error: Run {run_id} is not waiting for an answer (completed).\n"
    )


def test_a_continuation_killed_before_its_first_step_resumes_along_the_answered_edge(
    cli: Cli, gate: Path
) -> None:
    parent = start_waiting(cli, gate)["runId"]
    killed = cli.process("decide", parent, "stop", env={"PIW_TEST_KILL_AFTER_APPEND": "1"})
    assert killed.returncode == -9
    child = next(run for run in run_ids(cli.home) if run != parent)
    resumed = cli.json("decide", parent, "stop")  # the identical repeat adopts and finishes the continuation
    assert resumed["runId"] == child and resumed["status"] == "completed"
    assert resumed["finalOutput"]["halted"]["answer"] == {"choice": "stop", "provenance": "human"}
    types = [e["type"] for e in trace_lines(cli.home, child)]
    assert types[:2] == ["run_started", "run_resumed"] and types.count("run_started") == 1


def test_human_decision_definitions_are_checked_when_the_file_loads() -> None:
    replan = choice("replan", "Replan", inputs=[text_input("instructions", prompt="What should change?")])
    cases = [
        (lambda: choice("no spaces"), "choice id"),
        (lambda: choice("ok", ""), "label"),
        (lambda: text_input("choice", prompt="x"), "reserved"),
        (lambda: text_input("t", prompt="x", min_length=5, max_length=4), "min_length <= max_length"),
        (lambda: human_decision("ops", ["a", "a"], "ok?"), "unique ids"),
        (lambda: human_decision("ops", ["a"], "ok?", on_timeout=timeout_after(5, "b")), "not one of"),
        (lambda: human_decision("ops", [replan], "ok?", on_timeout={"after_minutes": 5, "choice": "replan"}),
         "required text inputs"),
        (lambda: human_decision("ops", ["a"], "ok?", on_timeout={"minutes": 5, "choice": "a"}), "after_minutes"),
        (lambda: human_decision("ops", ["a"], {"title": ""}), "title"),
        (lambda: timeout_after(0, "a"), "> 0"),
    ]  # fmt: skip
    for make, fragment in cases:
        with pytest.raises(DefinitionError) as caught:
            make()
        assert fragment in str(caught.value), (fragment, str(caught.value))
    gate = human_decision("ops", ["yes", "no"], "Ship it?", on_timeout={"after_s": 120, "choice": "no"})
    assert gate.human_decision is not None
    assert gate.human_decision.snapshot() == {
        "choices": [{"id": "yes", "label": "yes"}, {"id": "no", "label": "no"}],
        "audience": "ops",
        "onTimeout": {"afterMinutes": 2, "choice": "no"},
    }


def test_inspect_shows_an_open_decision_and_then_who_answered_it(cli: Cli, gate: Path) -> None:
    parent = start_waiting(cli, gate)["runId"]
    state = inspect(cli, parent)
    decision = state["decision"]
    assert decision["kind"] == "human_decision" and decision["status"] == "open"
    assert (
        decision["nodeId"] == "approval/approve"
        and decision["decisionId"] == state["finalOutput"]["decisionId"]
    )
    assert decision["commands"][0] == f"piw decide {parent} continue"
    shown = cli("inspect", parent)
    assert shown.returncode == 0 and "Waiting for a decision at approval › approve" in shown.stdout
    assert f"Decide with: piw decide {parent} continue" in shown.stdout
    child = cli.json("decide", parent, "stop")["runId"]
    decided = inspect(cli, parent)["decision"]
    assert decided["status"] == "resolved" and decided["provenance"] == "human"
    assert (
        decided["answer"] == {"choice": "stop", "provenance": "human"}
        and decided["continuationRunId"] == child
    )
    assert "@" in decided["answeredBy"]
    shown = cli("inspect", parent)
    assert f"Answered stop (human, by {decided['answeredBy']}); continued as run {child}" in shown.stdout
    assert "Decide with:" not in shown.stdout


def _run_in_the_past(path: Path, home: Path, minutes: float) -> str:
    """Start ``path`` with an engine clock ``minutes`` in the past, so its gate's deadline is that much older."""
    from datetime import UTC, datetime, timedelta

    from piw.run.runner import ForegroundOptions, start_run

    then = datetime.now(UTC) - timedelta(minutes=minutes)
    state = start_run(str(path), home, {}, None, ForegroundOptions(clock=lambda: then))
    assert state.status == "waiting"
    return str(state.run_id)


def test_the_sweeper_answers_a_due_decision_with_its_timeout_choice(cli: Cli, gate: Path) -> None:
    from piw.run.runner import ForegroundOptions, continue_run
    from piw.run.sweeper import sweep_timeouts
    from piw.store.db.run_database import open_run_database

    fresh = start_waiting(cli, gate)["runId"]
    parent = _run_in_the_past(gate, cli.home, minutes=12)  # no piw process ran from +4 to +12 minutes
    database = open_run_database(cli.home)
    expires = database.decisions.decisions_of(parent)[0].expires_at
    (made,) = sweep_timeouts(cli.home, database)  # the fresh run's deadline is 10 minutes away: left open
    assert made.spec.parent_run_id == parent and made.provenance == "timeout"
    assert made.spec.answer == {"choice": "continue", "provenance": "timeout"}
    assert made.spec.human_decision is not None and made.spec.human_decision["answeredBy"].startswith("piw (")
    row = database.decisions.decisions_of(parent)[0]
    assert (row.status, row.provenance, row.expires_at) == (
        "resolved",
        "timeout",
        expires,
    )  # deadline unmoved
    assert database.decisions.decisions_of(fresh)[0].status == "open"
    continuation = database.decisions.continuation_of(parent)
    assert continuation is not None and continuation.status == "queued"
    assert sweep_timeouts(cli.home, database) == []
    late = cli("decide", parent, "stop")  # a person after the timeout answered it
    assert late.returncode == 2 and "was already resolved (continue, timeout)" in late.stderr
    state = continue_run(made.spec, cli.home, ForegroundOptions())
    assert state.status == "completed"
    assert state.final_output["approval"]["answer"] == {"choice": "continue", "provenance": "timeout"}
    assert database.queue.get(state.run_id).status == "done"  # type: ignore[union-attr]


def test_a_person_deciding_after_the_deadline_meets_the_declared_timeout(cli: Cli, gate: Path) -> None:
    parent = _run_in_the_past(gate, cli.home, minutes=11)
    adopted = cli.json("decide", parent, "continue")  # the sweep runs first; the same choice adopts it
    assert adopted["adopted"] is True and adopted["status"] == "completed"
    assert adopted["continuedFrom"]["humanDecision"]["provenance"] == "timeout"


def test_a_person_who_answers_first_beats_the_sweeper(cli: Cli, gate: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from piw.run.sweeper import sweep_timeouts
    from piw.store.db.run_database import open_run_database

    parent = start_waiting(cli, gate)["runId"]
    assert cli.json("decide", parent, "stop")["status"] == "completed"
    later = int((datetime.now(UTC) + timedelta(minutes=30)).timestamp() * 1000)
    database = open_run_database(cli.home, clock=lambda: later)
    assert database.decisions.due_decisions() == [] and sweep_timeouts(cli.home, database) == []
    assert database.decisions.decisions_of(parent)[0].provenance == "human"


WINNER_THAT_HAS_NOT_CLAIMED = """
import sys, time
from pathlib import Path
from piw.run.answers import claim_decision, now_text, read_wait, record_answer
from piw.store.db.run_database import open_run_database

home, parent = Path(sys.argv[1]), sys.argv[2]
wait, state = read_wait(home, parent)
claim = claim_decision(wait, "stop", {}, now_iso=now_text())
receipt, _ = record_answer(home, open_run_database(home), claim, state, foreground=True)
print(receipt.continuation_run_id, flush=True)
time.sleep(60)  # between recording its answer and claiming the continuation, as piw decide is for an instant
"""


def test_a_repeat_leaves_the_continuation_to_the_live_process_whose_answer_won(cli: Cli, gate: Path) -> None:
    parent = start_waiting(cli, gate)["runId"]
    winner = subprocess.Popen(
        [sys.executable, "-c", WINNER_THAT_HAS_NOT_CLAIMED, str(cli.home), parent],
        stdout=subprocess.PIPE,
        text=True,
        env=cli.environment(),
    )
    try:
        assert winner.stdout is not None
        continuation = winner.stdout.readline().strip()
        assert continuation, "the winner recorded no answer"
        repeat = cli("decide", parent, "stop", "--json")
        assert repeat.returncode == 0, repeat.stderr
        reported = json.loads(repeat.stdout)
        assert (reported["runId"], reported["status"], reported["adopted"]) == (continuation, "running", True)
        # the repeat ran nothing: the continuation is the winner's to run
        assert run_ids(cli.home) == [parent]
        said = cli("decide", parent, "stop")
        assert said.returncode == 0, said.stderr
        assert f"its continuation run {continuation} is running in another piw process" in " ".join(
            said.stdout.split()
        )
    finally:
        winner.kill()
        winner.wait()
    # The winner died before it claimed its continuation: a repeat now runs it here, at once.
    taken = cli.json("decide", parent, "stop")
    assert (taken["runId"], taken["status"], taken["adopted"]) == (continuation, "completed", True)
    assert taken["finalOutput"]["halted"]["decision"] == "stop"


def test_concurrent_piw_decide_processes_start_one_continuation(cli: Cli, gate: Path) -> None:
    parent = start_waiting(cli, gate)["runId"]
    racers = [
        cli.popen("decide", parent, choice, "--json") for choice in ("stop", "continue", "stop", "continue")
    ]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    results = [(racer.returncode, out) for racer, (out, _) in zip(racers, outputs, strict=True)]
    errors = [err for _, err in outputs]
    won = [json.loads(out) for code, out in results if code == 0 and not json.loads(out)["adopted"]]
    assert len(won) == 1, (results, errors)
    children = [run for run in run_ids(cli.home) if run != parent]
    assert children == [won[0]["runId"]]
    winner = won[0]["continuedFrom"]["humanDecision"]["choice"]
    for (code, out), picked in zip(results, ("stop", "continue", "stop", "continue"), strict=True):
        if picked == winner:
            assert code == 0, errors  # the same choice adopts the winner
            assert json.loads(out)["runId"] == won[0]["runId"]
        else:
            assert code == 2, errors  # DecisionResolved
