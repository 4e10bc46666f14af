"""The fold: the one path from trace events to ``RunState``; its laws, and ``state.json`` as a cache of it."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from piw.store.bundle import Bundle, load_state
from piw.store.fold import RunState, fold, fold_more, state_from_json, state_to_json
from piw.store.state import StepList, StepRecord, count_steps
from piw.store.state_json import decode_state
from piw.store.trace import TraceEvent, read_trace
from tests.support.runs import RunWorkflow, WorkflowMaker

WORKFLOW = """
from piw import ShellCommand, action, compute, define_workflow, edge, include, notify, shell, switch

child = define_workflow(name="child", start_at="c",
                        nodes={"c": compute(lambda c: {"in": c.input, "seen": list(c.outputs)})})

def act(ctx):
    ctx.publish_update("build.step", "one", {"n": 1})
    ctx.publish_update("build.step", "two", {"n": 2})
    ctx.publish_update("build.step", "one", {"n": 3})
    return {"done": True}

workflow = define_workflow(
    name="folded",
    start_at="count",
    max_steps=50,
    nodes={
        "count": compute(lambda c: {"n": c.outputs.get("count", {"n": 0})["n"] + 1, 1: ("tuple", "kept")}),
        "again": compute(lambda c: {"again": c.outputs["count"]["n"] < 3}),
        "broken": compute(lambda c: 1 / 0),
        "act": action(act),
        "cmd": shell(ShellCommand(command="printf", args=["%s", "x" * 5000])),
        "tell": notify("done"),
        "last": compute(lambda c: {"keys": sorted(c.outputs), "first": c.outputs["count"]}),
    },
    includes={"sub": include(child, input=lambda c: {"count": c.outputs["count"]["n"]})},
    edges=[
        edge("count", "again"),
        switch("again", on="$.again", cases={"true": "count", "false": "broken"}),
        switch("broken", on="$result.outcome", cases={"failed": "act", "ok": "act"}),
        edge("act", "cmd"), edge("cmd", "tell"), edge("tell", "sub"), edge("sub", "last"),
    ],
)
"""


@pytest.fixture
def finished(make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path) -> tuple[Any, Path]:
    state = run_workflow(make_workflow("folded", WORKFLOW))
    assert state.status == "completed", state.error
    return state, piw_home / "runs" / state.run_id


def events_of(bundle: Path) -> list[TraceEvent]:
    return read_trace(bundle / "trace.ndjson").events


def test_state_json_is_the_fold_of_the_trace(finished: tuple[Any, Path]) -> None:
    state, bundle = finished
    events = events_of(bundle)
    on_disk = json.loads((bundle / "state.json").read_text(encoding="utf-8"))
    assert state_to_json(fold(events)) == on_disk
    assert fold(events) == state  # the engine's live state is exactly the replay of its trace
    assert on_disk["traceSeq"] == len(events) and on_disk["status"] == "completed"


def test_live_state_sees_what_a_replay_sees(finished: tuple[Any, Path]) -> None:
    state, _ = finished
    # JSON has string keys and lists; the live run folded the line as written, not the Python value returned.
    assert state.outputs["count"] == {"n": 3, "1": ["tuple", "kept"]}
    assert state.final_output["first"] == {"n": 3, "1": ["tuple", "kept"]}
    assert state.final_output["keys"] == ["act", "again", "cmd", "count", "sub", "tell"]


def test_fold_law_at_every_split(finished: tuple[Any, Path]) -> None:
    _, bundle = finished
    events = events_of(bundle)
    whole = fold(events)
    for split in range(len(events) + 1):
        assert fold_more(fold(events[:split]), events[split:]) == whole, split
    # one event at a time, as the engine does
    state = RunState()
    for event in events:
        state = fold_more(state, [event])
    assert state == whole


def test_fold_is_pure(finished: tuple[Any, Path]) -> None:
    _, bundle = finished
    events = events_of(bundle)
    for split in range(len(events)):
        prefix = fold(events[:split])
        snapshot = state_to_json(prefix)
        fold_more(prefix, events[split : split + 1])
        fold_more(prefix, events[split:])
        assert state_to_json(prefix) == snapshot, split  # the input state is never changed


def test_states_folded_from_one_parent_stay_independent(finished: tuple[Any, Path]) -> None:
    """Successive states share their step storage; branching from an older state must not see a newer branch."""
    _, bundle = finished
    events = events_of(bundle)
    whole = fold(events)
    for split in range(len(events)):
        parent = fold(events[:split])
        longer = fold_more(parent, events[split:])
        shorter = fold_more(parent, events[split : split + 1])
        assert shorter == fold(events[: split + 1]), split
        assert longer == whole, split
        assert list(parent.steps) == list(fold(events[:split]).steps), split


def test_projection_details(finished: tuple[Any, Path]) -> None:
    state, _ = finished
    data = state_to_json(state)
    assert [s["nodeId"] for s in data["steps"]].count("count") == 3  # every attempt is a step
    assert data["results"]["count"]["attemptId"] == data["steps"][4]["attemptId"]  # latest attempt wins
    assert data["results"]["broken"]["outcome"] == "failed" and "output" not in data["results"]["broken"]
    assert "broken" not in data["outputs"]  # a failed attempt removes the output
    assert data["outputs"]["sub"] == {"in": {"count": 3}, "seen": []}  # include_exited sets the mount output
    assert [(u["key"], u["data"]) for u in data["updates"]] == [("two", {"n": 2}), ("one", {"n": 3})]
    assert all(step["prompt"] is None for step in data["steps"])  # nullable: always present
    assert data["outputs"]["cmd"]["stdout"]["$artifact"]["bytes"] == 5000  # large strings live in artifacts
    for key in ("currentNode", "currentAttemptId", "paused", "waitingOn", "error"):
        assert key not in data
    assert state_from_json(data) == state


@pytest.mark.parametrize("lazy", [False, True])
def test_state_json_bytes_decode_to_the_same_state_typed_or_not(
    finished: tuple[Any, Path], lazy: bool
) -> None:
    """``decode_state`` (the readers' fast path: steps decoded by msgspec straight into records, or, for the
    viewer, one by one as they are read) gives exactly ``state_from_json`` of the parsed document, also when a
    hand-edited ``state.json`` leaves out fields the lenient reading defaults, or carries an empty
    ``traceback``; a document ``state_from_json`` refuses is refused at once, never when a step is read."""
    state, _ = finished
    data = state_to_json(state)

    def decoded(document: dict[str, Any]) -> RunState:
        got = decode_state(json.dumps(document).encode(), lazy_steps=lazy)
        expected = state_from_json(document)
        assert [got.steps[i] for i in range(len(got.steps))] == list(expected.steps)  # by index, then whole
        assert got == expected
        return got

    assert decoded(data) == state
    decoded({**data, "steps": []})
    sparse = dict(data["steps"][0])
    for key in ("nodeType", "outcome", "finishedAt", "prompt", "output"):
        sparse.pop(key, None)
    decoded({**data, "steps": [sparse, *data["steps"][1:]]})
    decoded({**data, "steps": [{**data["steps"][0], "traceback": []}, *data["steps"][1:]]})
    with pytest.raises(TypeError):
        decode_state(json.dumps({**data, "steps": [{**sparse, "children": 5}]}).encode(), lazy_steps=lazy)
    with pytest.raises(ValueError):
        decode_state(json.dumps({**data, "schema": "other"}).encode(), lazy_steps=lazy)
    with pytest.raises(ValueError):
        decode_state(b"{not json", lazy_steps=lazy)


def test_a_page_of_a_long_run_decodes_only_that_page() -> None:
    """The viewer's first screen of a long run reads one page of steps: with ``lazy_steps`` the records of the
    other steps are not built (traced memory far below the eager decode's), and folding on from that state
    (a live run's tail) gives the same state as from the eager one."""
    steps = [
        StepRecord(attempt_id=f"a{i}", node_id=f"n{i % 5}", node_type="compute", outcome="ok",
                   finished_at="2026-01-01T00:00:01.000Z", duration_ms=i % 7, prompt=None, output={"text": "x" * 1000})
        for i in range(4_000)
    ]  # fmt: skip
    state = RunState(run_id="r", trace_seq=8_000, steps=StepList(steps), node_stats=count_steps(steps))
    data = json.dumps(state_to_json(state)).encode()

    def page_peak(lazy: bool) -> tuple[int, RunState]:
        tracemalloc.start()
        try:
            decoded = decode_state(data, lazy_steps=lazy)
            page = decoded.steps[0:40]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert list(page) == steps[:40]
        return peak, decoded

    lazy_peak, lazy_state = page_peak(True)
    eager_peak, eager_state = page_peak(False)
    assert lazy_peak * 3 < eager_peak, (lazy_peak, eager_peak)
    assert lazy_state.node_stats == eager_state.node_stats == state.node_stats
    more = StepRecord(attempt_id="b", node_id="n0", node_type="compute", outcome="ok", finished_at="", prompt=None,
                      output=None)  # fmt: skip
    assert lazy_state.steps.extended([more]) == eager_state.steps.extended([more]) == [*steps, more]


def test_failed_attempt_then_ok_attempt(finished: tuple[Any, Path]) -> None:
    """A later ok attempt brings the output back; a later failed one removes it (latest attempt wins)."""
    _, bundle = finished
    events = events_of(bundle)
    base = fold(events)
    run_id = base.run_id

    def ev(seq: int, kind: str, payload: dict[str, Any], attempt: str) -> TraceEvent:
        return TraceEvent(seq, "2026-01-01T00:00:00.000Z", "node", kind, run_id, payload, "count", attempt)

    n = len(events)
    failed = fold_more(
        base,
        [
            ev(n + 1, "node_started", {"nodeType": "compute"}, "x1"),
            ev(n + 2, "node_failed", {"outcome": "failed", "error": "E"}, "x1"),
        ],
    )
    assert "count" not in failed.outputs and failed.results["count"].error == "E"
    ok = fold_more(
        failed,
        [
            ev(n + 3, "node_started", {"nodeType": "compute"}, "x2"),
            ev(n + 4, "node_finished", {"outcome": "ok", "output": 5}, "x2"),
        ],
    )
    assert ok.outputs["count"] == 5 and len(ok.steps) == len(base.steps) + 2


def test_current_attempt_and_usage() -> None:
    def ev(
        seq: int, scope: str, kind: str, payload: dict[str, Any], attempt: str | None = None
    ) -> TraceEvent:
        node = "n" if attempt else None
        return TraceEvent(seq, f"2026-01-01T00:00:0{seq}.000Z", scope, kind, "r", payload, node, attempt)

    usage = {"requests": 1, "input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "cost": 0.5}
    events = [
        ev(1, "run", "run_started", {"workflowName": "w", "input": {"a": 1}, "maxSteps": 4}),
        ev(
            2, "node", "node_started", {"nodeType": "agent", "statusDetail": "thinking", "timeoutMs": 5}, "a1"
        ),
        ev(3, "agent", "agent_prompt_sent", {"prompt": "P1", "completion": "submit"}, "a1"),
        ev(4, "agent", "agent_prompt_sent", {"prompt": "P2", "completion": "submit"}, "a1"),
    ]
    running = fold(events)
    data = state_to_json(running)
    assert (data["currentNode"], data["currentAttemptId"], data["statusDetail"]) == ("n", "a1", "thinking")
    assert data["currentNodeStartedAt"] == "2026-01-01T00:00:02.000Z" and data["status"] == "running"
    done = fold_more(
        running,
        [
            ev(5, "node", "node_finished", {"outcome": "ok", "output": 1, "usage": usage}, "a1"),
            ev(6, "node", "node_started", {"nodeType": "agent"}, "a2"),
            ev(7, "node", "node_finished", {"outcome": "ok", "output": 2, "usage": usage}, "a2"),
            ev(8, "run", "run_completed", {"status": "completed", "finalOutput": 2}),
        ],
    )
    assert done.steps[0].prompt == "P1" and done.steps[1].prompt is None  # first prompt of the attempt
    assert done.usage == {
        "requests": 2,
        "input": 20,
        "output": 10,
        "cacheRead": 0,
        "cacheWrite": 0,
        "cost": 1.0,
    }
    assert done.current is None and done.finished_at == "2026-01-01T00:00:08.000Z"
    interrupted = fold_more(running, [ev(5, "run", "run_interrupted", {"error": "boom"})])
    assert interrupted.status == "failed" and interrupted.error == "boom"


def _write_state(bundle: Path, data: Any) -> None:
    (bundle / "state.json").write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize("case", ["deleted", "garbage", "other-run", "ahead", "stale", "fresh"])
def test_load_state_tolerates_any_state_json(case: str, finished: tuple[Any, Path]) -> None:
    state, path = finished
    events = events_of(path)
    bundle = Bundle(state.run_id, path)
    if case == "deleted":
        (path / "state.json").unlink()
    elif case == "garbage":
        _write_state(path, "{not json")
    elif case == "other-run":
        _write_state(path, {**state_to_json(state), "runId": "someone-else"})
    elif case == "ahead":
        _write_state(path, {**state_to_json(state), "traceSeq": len(events) + 5})
    elif case == "stale":
        _write_state(path, state_to_json(fold(events[:5])))
    assert load_state(bundle) == fold(events)
