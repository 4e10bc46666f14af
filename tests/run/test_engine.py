"""The engine through real runs: contexts, actions, timeouts, checkpoints, notify, includes, durability."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from piw.store.trace import FileLayer
from tests.support.cli import Cli
from tests.support.runs import RunWorkflow, WorkflowMaker, trace_lines


def test_node_context(make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path) -> None:
    path = make_workflow(
        "ctx",
        """
        from piw import ActionContext, NodeContext, action, compute, define_workflow, edge

        def look(ctx):
            return {"type": type(ctx).__name__, "run": ctx.run_id, "node": ctx.node_id,
                    "attempt": ctx.attempt_id,
                    "input": ctx.input, "outputs": dict(ctx.outputs), "results": sorted(ctx.results),
                    "now": ctx.now().tzinfo is not None}

        def act(ctx):
            assert isinstance(ctx, ActionContext)
            receipt = ctx.publish_update("demo.step", "k", {"v": 1})
            return {"type": type(ctx).__name__, "receipt": [receipt.type, receipt.key], "node": ctx.node_id}

        workflow = define_workflow(name="ctx", start_at="one",
                                   nodes={"one": compute(look), "two": action(act),
                                   "three": compute(look)}, edges=[edge("one", "two"), edge("two", "three")])
        """,
    )
    state = run_workflow(path, {"q": [1, "é"]})
    one, two, three = (state.outputs[k] for k in ("one", "two", "three"))
    assert one["type"] == "NodeContext" and two["type"] == "ActionContext"
    assert one["run"] == state.run_id and one["node"] == "one" and one["input"] == {"q": [1, "é"]}
    assert one["outputs"] == {} and one["results"] == [] and one["now"] is True
    assert one["attempt"] == state.results["one"].attempt_id
    assert three["outputs"]["one"] == one and three["results"] == ["one", "two"]
    assert two["receipt"] == ["demo.step", "k"]
    (update,) = state.updates.values()
    assert (update.node_id, update.attempt_id, update.data) == (
        "two",
        state.results["two"].attempt_id,
        {"v": 1},
    )
    attempts = {step.attempt_id for step in state.steps}
    assert len(attempts) == 3  # a fresh attempt id for every attempt


def test_non_json_output_fails_the_node(make_workflow: WorkflowMaker, run_workflow: RunWorkflow) -> None:
    path = make_workflow(
        "badout",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="badout", start_at="a", nodes={"a": compute(lambda c: {"s": {1}})})
        """,
    )
    state = run_workflow(path)
    assert state.status == "failed" and "not JSON" in state.error


def test_action_timeout_refuses_late_updates(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, tmp_path: Path
) -> None:
    marker = tmp_path / "late.txt"
    path = make_workflow(
        "late",
        f"""
        import time
        from piw import action, define_workflow

        def slow(ctx):
            time.sleep(0.6)  # ignores the cancel event on purpose
            try:
                ctx.publish_update("demo.step", "late", {{"v": 1}})
                outcome = "accepted"
            except Exception as exc:
                outcome = type(exc).__name__
            open({str(marker)!r}, "w").write(outcome)

        workflow = define_workflow(name="late", start_at="a", nodes={{"a": action(slow, timeout_s=0.2)}})
        """,
    )
    state = run_workflow(path)
    assert state.status == "timed_out" and state.results["a"].outcome == "timed_out"
    assert state.error == "Action a timed out after 0.2s."
    assert state.steps[0].action["actionType"] == "function"
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text() == "AttemptInactive"
    assert state.updates == {}


def test_per_node_timeout_from_a_function(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path
) -> None:
    path = make_workflow(
        "fnto",
        """
        from piw import action, define_workflow
        workflow = define_workflow(name="fnto", start_at="a", nodes={
            "a": action(lambda c: c.sleep(5), timeout_s=lambda c: c.input["limit"])})
        """,
    )
    state = run_workflow(path, {"limit": 0.25})
    assert state.status == "timed_out"
    started = next(e for e in trace_lines(piw_home, state.run_id) if e["type"] == "node_started")
    assert started["payload"] == {"nodeType": "action", "timeoutMs": 250}


def test_checkpoint_ends_the_run_waiting(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path
) -> None:
    path = make_workflow(
        "wait",
        """
        from piw import checkpoint, compute, define_workflow, edge, human_decision
        workflow = define_workflow(name="wait", start_at="a", nodes={
            "a": compute(1), "ask": checkpoint(lambda c: {"question": "go on?", "a": c.outputs["a"]}),
            "after": compute(2)}, edges=[edge("a", "ask"), edge("ask", "after")])
        """,
    )
    state = run_workflow(path)
    assert (state.status, state.waiting_on, state.final_output) == (
        "waiting",
        "ask",
        {"question": "go on?", "a": 1},
    )
    events = trace_lines(piw_home, state.run_id)
    assert events[-1]["type"] == "run_waiting"
    assert events[-1]["payload"] == {
        "status": "waiting",
        "waitingOn": "ask",
        "finalOutput": state.final_output,
    }
    assert "after" not in state.outputs
    gate = make_workflow(
        "gate",
        """
        from piw import define_workflow, human_decision
        workflow = define_workflow(name="gate", start_at="g", nodes={
            "g": human_decision("ops", ["ship", "hold"], lambda c: "Ship it?")})
        """,
    )
    gated = run_workflow(gate)
    assert gated.status == "waiting"
    opened = dict(gated.final_output)
    assert opened.pop("decisionId").startswith("dec_") and opened.pop("requestSha256").startswith("sha256:")
    assert opened.pop("openedAt").endswith("Z")
    assert opened == {
        "kind": "human_decision",
        "audience": "ops",
        "request": {"title": "Ship it?", "blocks": []},
        "choices": [{"id": "ship", "label": "ship"}, {"id": "hold", "label": "hold"}],
    }


def test_notify_is_recorded_once_per_execution(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path
) -> None:
    path = make_workflow(
        "tell",
        """
        from piw import compute, define_workflow, edge, notify, switch
        workflow = define_workflow(name="tell", start_at="n", nodes={
            "n": compute(lambda c: {"i": c.outputs.get("n", {"i": 0})["i"] + 1}),
            "say": notify(lambda c: f"round {c.outputs['n']['i']}", kind="final")},
            edges=[edge("n", "say"), switch("say", on="$result.outcome", cases={"ok": "n"})], max_steps=4)
        """,
    )
    state = run_workflow(path)
    assert state.status == "failed" and "max_steps" in state.error  # two loops of (n, say)
    events = trace_lines(piw_home, state.run_id)
    queued = [e["payload"] for e in events if e["type"] == "notification_queued"]
    assert [q["notificationIndex"] for q in queued] == [1, 2] and len(
        {q["notificationId"] for q in queued}
    ) == 2
    origin = events[0]["payload"]["originSession"]["id"]
    assert all(q["kind"] == "final" and q["targetSessionId"] == origin for q in queued)
    session = (piw_home / "runs" / state.run_id / "session" / "entries.ndjson").read_text().splitlines()
    entries = [json.loads(line)["entry"]["message"] for line in session]
    assert [m["content"] for m in entries] == ["round 1", "round 2"]
    assert entries[0]["customType"] == "pi-workflows-notification"
    assert entries[0]["details"]["notificationId"] == queued[0]["notificationId"]
    finished = [e for e in events if e["type"] == "node_finished" and e["nodeId"] == "say"]
    assert finished[0]["payload"]["output"] == {
        "notificationId": queued[0]["notificationId"],
        "targetSessionId": origin,
    }


def test_include_events_and_scoped_context(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path
) -> None:
    path = make_workflow(
        "mount",
        """
        from piw import compute, define_workflow, edge, include
        child = define_workflow(name="child", start_at="first", nodes={
            "first": compute(lambda c: {"input": c.input, "outputs": sorted(c.outputs), "node": c.node_id}),
            "second": compute(lambda c: {"first": c.outputs["first"]["input"],
                                         "results": sorted(c.results)})},
            edges=[edge("first", "second")])
        workflow = define_workflow(name="parent", start_at="first", nodes={
            "first": compute(lambda c: {"top": True}),
            "after": compute(lambda c: {"child": c.outputs["ready_summary"], "keys": sorted(c.outputs)})},
            includes={"ready_summary": include(child, input=lambda c: {"from_parent": c.outputs["first"]})},
            edges=[edge("first", "ready_summary"), edge("ready_summary", "after")])
        """,
    )
    state = run_workflow(path)
    assert state.status == "completed", state.error
    assert [s.node_id for s in state.steps] == [
        "first",
        "ready_summary/first",
        "ready_summary/second",
        "after",
    ]
    inner = state.outputs["ready_summary/first"]
    # inside the mount: the include's input, only this invocation's nodes by local id; ids are mount paths
    assert inner == {"input": {"from_parent": {"top": True}}, "outputs": [], "node": "ready_summary/first"}
    assert state.outputs["ready_summary/second"] == {
        "first": {"from_parent": {"top": True}},
        "results": ["first"],
    }
    assert state.final_output == {
        "child": {"first": {"from_parent": {"top": True}}, "results": ["first"]},
        "keys": ["first", "ready_summary"],
    }
    events = [
        (e["type"], e["payload"])
        for e in trace_lines(piw_home, state.run_id)
        if e["type"].startswith("include")
    ]
    assert events == [
        (
            "include_entered",
            {
                "mountPath": ["ready_summary"],
                "workflowName": "child",
                "invocation": 1,
                "input": {"from_parent": {"top": True}},
            },
        ),
        (
            "include_exited",
            {
                "mountPath": ["ready_summary"],
                "workflowName": "child",
                "invocation": 1,
                "exit": "done",
                "output": state.outputs["ready_summary"],
            },
        ),
    ]


# ---- durability --------------------------------------------------------------------------------------------

DURABLE = """
import sys
from piw import ShellCommand, action, checkpoint, compute, define_workflow, edge, notify, shell

def mark(name):
    sys.modules["piw_test_recorder"].ops.append(("effect", name, b""))

def act(ctx):
    ctx.publish_update("demo.step", "k", {"v": 1})
    mark("after-receipt")
    return 1

def effect(ctx):
    mark("action")
    return 2

workflow = define_workflow(
    name="durable", start_at="c1",
    nodes={
        "c1": compute(1), "c2": compute(2), "c3": compute(3),
        "a1": action(effect),
        "c4": compute(4),
        "a2": action(act),
        "sh": shell(ShellCommand(command="true")),
        "n": notify("hello"),
        "c5": compute(5),
        "wait": checkpoint(),
    },
    edges=[edge("c1", "c2"), edge("c2", "c3"), edge("c3", "a1"), edge("a1", "c4"), edge("c4", "a2"),
           edge("a2", "sh"), edge("sh", "n"), edge("n", "c5"), edge("c5", "wait")],
)
"""


class Recorder(FileLayer):
    """Records writes and fsyncs by the path behind each file descriptor; effects add markers."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str, bytes]] = []

    def fsync(self, fd: int) -> None:
        self.ops.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), b""))

    def write_all(self, fd: int, data: bytes) -> None:
        self.ops.append(("write", os.readlink(f"/proc/self/fd/{fd}"), data))
        super().write_all(fd, data)


@pytest.fixture
def durable_run(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, monkeypatch: pytest.MonkeyPatch
) -> Any:
    path = make_workflow("durable", DURABLE)

    def run(durability: str) -> tuple[Any, list[tuple[str, str, Any]]]:
        files = Recorder()
        monkeypatch.setitem(sys.modules, "piw_test_recorder", files)
        state = run_workflow(path, durability=durability, files=files)
        assert state.status == "waiting", state.error
        ops: list[tuple[str, str, Any]] = []
        for op, where, data in files.ops:
            if op == "write" and where.endswith("trace.ndjson"):
                ops.append(("trace", "write", json.loads(data)))
            elif op == "fsync" and where.endswith("trace.ndjson"):
                ops.append(("trace", "fsync", None))
            elif where.endswith("entries.ndjson"):
                ops.append(("session", op, None))
            elif op == "effect":
                ops.append(("effect", where, None))
        return state, ops

    return run


def _label(event: dict[str, Any]) -> str:
    return f"{event['type']}:{event.get('nodeId', '')}"


def test_always_fsyncs_every_line(durable_run: Any) -> None:
    _, ops = durable_run("always")
    trace = [op for op in ops if op[0] == "trace"]
    writes = [op for op in trace if op[1] == "write"]
    assert len(writes) == 25
    for index, op in enumerate(trace):
        if op[1] == "write":
            assert trace[index + 1][1] == "fsync", _label(op[2])
    assert [op[1] for op in ops if op[0] == "session"] == ["write", "fsync"]


def test_flush_never_fsyncs(durable_run: Any) -> None:
    _, ops = durable_run("flush")
    assert [op for op in ops if op[1] == "fsync"] == []
    assert len([op for op in ops if op[0] == "trace"]) == 25


def test_effects_fsyncs_exactly_at_effect_boundaries(durable_run: Any) -> None:
    _, ops = durable_run("effects")
    # A readable sequence: trace writes by label, "SYNC" for a trace fsync, effects and session ops.
    seq: list[str] = []
    for kind, op, data in ops:
        if kind == "trace":
            seq.append(_label(data) if op == "write" else "SYNC")
        elif kind == "session":
            seq.append(f"session-{op}")
        else:
            seq.append(f"effect:{op}")
    assert seq == [
        "run_started:",
        "SYNC",  # run-scoped
        "node_started:c1",
        "node_finished:c1",
        "node_started:c2",
        "node_finished:c2",  # a compute-only stretch:
        "node_started:c3",
        "node_finished:c3",  # no fsync at all
        "node_started:a1",
        "effect:action",
        "node_finished:a1",
        "SYNC",  # started rides along with the terminal
        "node_started:c4",
        "node_finished:c4",
        "node_started:a2",
        "update_published:a2",
        "SYNC",
        "effect:after-receipt",  # a receipt waits for its fsync
        "node_finished:a2",
        "SYNC",
        "node_started:sh",
        "process_started:sh",
        "SYNC",  # the command's process group is durable before the command starts
        "node_finished:sh",
        "SYNC",
        "node_started:n",
        "session-write",
        "session-fsync",
        "notification_queued:n",
        "SYNC",
        "node_finished:n",
        "SYNC",
        "node_started:c5",
        "node_finished:c5",
        "node_started:wait",
        "node_finished:wait",
        "SYNC",  # a checkpoint is an effect boundary too
        "run_waiting:",
        "SYNC",
    ]


def test_env_durability_wins(cli: Cli, piw_home: Path) -> None:
    done = cli("run", "hello", "--json", env={"PIW_DURABILITY": "sometimes"})
    assert done.returncode == 2 and done.stderr.startswith("Error: Unknown durability 'sometimes'")
    assert cli("run", "hello", "--json", env={"PIW_DURABILITY": "flush"}).returncode == 0


@pytest.mark.parametrize("value", ["lambda c: 1 / 0", "lambda c: 'soon'", "lambda c: -1"])
def test_a_failing_timeout_function_fails_the_node(
    value: str, make_workflow: WorkflowMaker, run_workflow: RunWorkflow
) -> None:
    path = make_workflow(
        "badto",
        f"""
        from piw import action, compute, define_workflow, switch
        workflow = define_workflow(name="badto", start_at="a", nodes={{
            "a": action(lambda c: "ran", timeout_s={value}),
            "b": compute(lambda c: c.results["a"]["error"])}},
            edges=[switch("a", on="$result.outcome", cases={{"failed": "b"}})])
        """,
    )
    state = run_workflow(path)
    assert state.status == "completed" and state.final_output.startswith("timeout_s of a failed: ")
