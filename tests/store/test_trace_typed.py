"""Trace lines decoded typed (``piw.store.trace_typed``) fold to the very state the generic reader's events give.

A replay of a long trace decodes its chunks into typed structs and folds the hot pairs by attribute. Here traces of
every event type of ``docs/bundle-format.md`` §6 (generated, with odd payload values, and written by real runs) are
encoded as trace lines and read both ways: the typed decoder must take them (no silent fallback for the writer's own
payloads), and the folds must agree at every split. Lines the typed decoder must refuse (an unknown type, a payload
key it does not list, a line the generic reader refuses) must make it refuse, so the caller reads them generically.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piw.store import foldcache
from piw.store.fold import fold, fold_more
from piw.store.trace import TraceEvent, decode_lines, read_trace
from piw.store.trace_typed import EVENT_TYPES, decode_typed
from tests.support.runs import RunWorkflow, WorkflowMaker

RUN_ID = "20260101T000000000Z-typed-00000001"

_ODD = st.one_of(
    st.none(), st.integers(-3, 300), st.text(max_size=3), st.just({"a": [1, None]}), st.booleans()
)
_STARTED = st.fixed_dictionaries(
    {}, optional={"nodeType": st.one_of(st.sampled_from(["compute", "agent", ""]), _ODD), "statusDetail": _ODD,
                  "timeoutMs": _ODD},
)  # fmt: skip
_TERMINAL = st.fixed_dictionaries(
    {},
    optional={
        "outcome": st.one_of(st.sampled_from(["ok", "failed", "timed_out", "cancelled"]), _ODD),
        "durationMs": st.one_of(st.integers(0, 99), st.floats(0, 9, allow_nan=False), _ODD),
        "output": _ODD,
        "error": _ODD,
        "traceback": st.one_of(st.just([]), st.just([{"file": "w.py", "line": 3}, "junk"]), _ODD),
        "conversation": st.one_of(st.just({"firstEntryId": "e1", "lastEntryId": "e2"}), _ODD),
        "action": st.one_of(st.just({"actionType": "shell", "exitCode": 0}), _ODD),
        "usage": st.one_of(
            st.fixed_dictionaries({"requests": st.just(1), "input": st.integers(0, 5), "output": st.just(1)}),
            st.none(),
        ),
    },
)
_OTHER_PAYLOADS: dict[str, dict[str, Any]] = {
    "run_started": {"workflowName": "typed", "input": {"x": 1}, "maxSteps": 99},
    "run_resumed": {"abandonedAttemptId": "a1"},
    "run_completed": {"status": "completed", "finalOutput": {"ok": True}},
    "run_waiting": {"status": "waiting", "waitingOn": "gate", "finalOutput": None},
    "run_failed": {"status": "failed", "error": "broke"},
    "include_entered": {"mountPath": ["sub"], "workflowName": "c", "invocation": 1, "input": {}},
    "include_exited": {"mountPath": ["sub"], "exit": "done", "output": {"n": 1}},
    "agent_prompt_sent": {"prompt": "p", "completion": "submit"},
    "update_published": {"updateId": "u", "type": "progress", "key": "k", "data": {"n": 1}},
    "usage_recorded": {"requests": 1, "input": 3, "output": 1, "cacheRead": 0, "cacheWrite": 0, "step": "a1"},
    "assistant_completion_recorded": {"assistantEntryId": "e", "textSha256": "0", "conversation": {}},
    "child_step_finished": {"visit": 1, "key": "c", "outcome": "ok"},
    "mcp_tools_listed": {"servers": [{"name": "s", "tools": []}]},
    "process_started": {"pid": 1, "pgid": 1},
    "tool_call_started": {"toolCallId": "t1", "toolName": "x", "effect": "once"},
    "effect_started": {"effect": "once", "idempotencyKey": "k", "actionType": "function"},
    "effect_reconciled": {"found": False},
    "effect_outcome_unknown": {"effect": "once", "idempotencyKey": "k"},
    "effect_resolved": {"resolution": "retry"},
}
_RUN_SCOPED = {name for name in EVENT_TYPES if name.startswith(("run_", "include_", "session_"))}

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("node_started"), st.integers(0, 3), _STARTED),
        st.tuples(st.sampled_from(["node_finished", "node_failed"]), st.integers(0, 3), _TERMINAL),
        st.tuples(st.sampled_from(EVENT_TYPES), st.integers(0, 3), st.just({})),
    ),
    max_size=40,
)


def _lines(ops: list[tuple[str, int, dict[str, Any]]]) -> bytes:
    events: list[TraceEvent] = []
    for kind, attempt, payload in [("run_started", 0, {}), *ops]:
        seq = len(events) + 1
        scoped = kind not in _RUN_SCOPED
        hot = kind in ("node_started", "node_finished", "node_failed")
        body = payload if hot or payload else _OTHER_PAYLOADS.get(kind, {"n": attempt})
        node, att = (f"n{attempt % 2}", f"a{attempt}") if scoped else (None, None)
        at = f"2026-01-01T00:00:{seq // 1000 % 60:02d}.{seq % 1000:03d}Z"
        scope = "agent" if kind in ("agent_prompt_sent", "usage_recorded") else "node" if scoped else "run"
        events.append(TraceEvent(seq, at, scope, kind, RUN_ID, body, node, att))  # type: ignore[arg-type]
    return b"".join(event.encode() for event in events)


def _generic(data: bytes) -> list[TraceEvent]:
    events = decode_lines(data, 1)
    assert events is not None
    return events


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_every_event_type_folds_to_the_same_state_typed_or_not(
    ops: list[tuple[str, int, dict[str, Any]]],
) -> None:
    data = _lines(ops)
    typed = decode_typed(data, 1)
    assert typed is not None  # every type and payload of §6: no fallback
    generic = _generic(data)
    assert [(e.seq, e.type, e.node_id, e.attempt_id, e.at) for e in typed] == [
        (e.seq, e.type, e.node_id, e.attempt_id, e.at) for e in generic
    ]
    assert fold(typed) == fold(generic)
    for split in range(len(typed) + 1):  # and fed in any two batches, mixed with generic events
        assert fold_more(fold(typed[:split]), generic[split:]) == fold(generic)
        assert fold_more(fold(generic[:split]), typed[split:]) == fold(generic)


@pytest.mark.parametrize(
    "line",
    [
        b'{"seq":2,"at":"t","scope":"node","type":"something_new","runId":"r","nodeId":"n","attemptId":"a","payload":{}}',
        b'{"seq":2,"at":"t","scope":"node","type":"node_finished","runId":"r","nodeId":"n","attemptId":"a",'
        b'"payload":{"outcome":"ok","phase":"p"}}',
        b'{"seq":2,"at":"t","scope":"run","type":"node_started","runId":"r","payload":{"nodeType":"compute"}}',
        b'{"seq":2,"at":"t","scope":"node","type":"update_published","runId":"r","payload":{}}',
        b'{"seq":3,"at":"t","scope":"run","type":"run_paused","runId":"r","payload":{}}',
        b'{"seq":2,"at":"t","scope":"run","type":"run_paused","runId":"r","payload":[]}',
        b"",
    ],
    ids=["unknown type", "unknown payload key", "hot type without ids", "attempt scope without ids", "seq gap",
         "payload not an object", "blank line"],
)  # fmt: skip
def test_lines_the_typed_decoder_does_not_know_are_left_to_the_generic_reader(line: bytes) -> None:
    first = _lines([])
    assert decode_typed(first + line + b"\n", 1) is None


def test_a_replay_with_lines_left_to_the_generic_reader_gives_the_full_fold(tmp_path: Path) -> None:
    """Chunks the typed decoder refuses (a payload key it does not list, an unknown type) among typed ones."""
    ops: list[tuple[str, int, dict[str, Any]]] = []
    for index in range(3000):
        ops.append(("node_started", index, {"nodeType": "compute"}))
        payload: dict[str, Any] = {"outcome": "ok", "durationMs": index % 7, "output": {"i": index}}
        if index % 500 == 0:
            payload["phase"] = "later writer"
        ops.append(("node_finished", index, payload))
        if index % 777 == 0:
            ops.append(("something_new", index, {"n": 1}))
    bundle = tmp_path / "runs" / RUN_ID
    bundle.mkdir(parents=True)
    data = _lines(ops)
    assert len(data) > foldcache._TYPED_FROM
    (bundle / "trace.ndjson").write_bytes(data)
    replayed = foldcache.replay(bundle, RUN_ID, write=False)
    assert replayed.state == fold(read_trace(bundle / "trace.ndjson").events)
    assert replayed.state.steps[0].node_type == "compute" and len(replayed.state.steps) == 3000


WORKFLOW = """
from piw import ShellCommand, action, compute, define_workflow, edge, include, notify, shell, switch

child = define_workflow(name="child", start_at="c", nodes={"c": compute(lambda c: {"in": c.input})})

def act(ctx):
    ctx.publish_update("build.step", "one", {"n": 1})
    return {"done": True}

workflow = define_workflow(
    name="typed-real",
    start_at="count",
    max_steps=50,
    nodes={
        "count": compute(lambda c: {"n": c.outputs.get("count", {"n": 0})["n"] + 1}),
        "again": compute(lambda c: {"again": c.outputs["count"]["n"] < 3}),
        "broken": compute(lambda c: 1 / 0),
        "act": action(act),
        "cmd": shell(ShellCommand(command="printf", args=["%s", "x"])),
        "tell": notify("done"),
        "last": compute(lambda c: sorted(c.outputs)),
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


def test_a_real_runs_trace_is_decoded_typed_and_folds_to_its_state(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path, tmp_path: Path
) -> None:
    """Compute, failing, action, shell, notify and include steps, updates: every payload the writer produces is one
    the typed decoder takes, and a replay of it long enough to go typed gives the generic fold."""
    state = run_workflow(make_workflow("typed-real", WORKFLOW))
    assert state.status == "completed", state.error
    data = (piw_home / "runs" / state.run_id / "trace.ndjson").read_bytes()
    typed = decode_typed(data, 1)
    assert typed is not None
    generic = _generic(data)
    assert fold(typed) == fold(generic) == state
    # the same lines, repeated (seq renumbered) until a replay reads them typed
    copies = foldcache._TYPED_FROM // len(data) + 2
    lines = data.splitlines(keepends=True)
    events = [TraceEvent(**{**_fields(e), "seq": i + 1}) for i, e in enumerate(generic * copies)]
    assert len(events) == len(lines) * copies
    bundle = tmp_path / "runs" / state.run_id
    shutil.copytree(piw_home / "runs" / state.run_id, bundle)
    (bundle / "trace.ndjson").write_bytes(b"".join(event.encode() for event in events))
    assert foldcache.replay(bundle, state.run_id, write=False).state == fold(events)


def _fields(event: TraceEvent) -> dict[str, Any]:
    return {name: getattr(event, name) for name in event.__struct_fields__}
