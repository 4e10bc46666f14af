"""The fold's fast path gives exactly the state its handlers give.

``fold_more``'s loop (``_fold_into``) folds a ``node_started`` followed by the terminal event of the same attempt
itself, and hands every other event to its handler in ``_HANDLERS``; ``_Folder.node_terminal`` is what a terminal
event means. Here generated traces, including the orders a real writer never produces (a terminal event without its
start, two starts in a row, a terminal event of another attempt, a resume that abandons the attempt, unknown
event types, odd payload values), are folded both ways at every split, and the states must be equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from piw.store.fold import _HANDLERS, RunState, _Folder, fold_more
from piw.store.trace import TraceEvent

RUN_ID = "20260101T000000000Z-fast-00000001"

_TERMINAL_BODIES = st.fixed_dictionaries(
    {},
    optional={
        "outcome": st.sampled_from(["ok", "failed", "timeout", 3]),
        "durationMs": st.one_of(
            st.integers(0, 99), st.floats(0, 9, allow_nan=False), st.just("slow"), st.none()
        ),
        "output": st.one_of(st.none(), st.integers(), st.dictionaries(st.sampled_from("ab"), st.integers())),
        "error": st.text(max_size=3),
        "usage": st.fixed_dictionaries(
            {"requests": st.just(1), "input": st.integers(0, 5), "output": st.just(1)}
        ),
        "traceback": st.one_of(st.just([]), st.just([{"file": "w.py", "line": 3}, "junk"]), st.just("x")),
        "action": st.just({"kind": "shell"}),
    },
)

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 3), st.sampled_from(["compute", "agent", 7])),
        st.tuples(st.sampled_from(["node_finished", "node_failed"]), st.integers(0, 3), _TERMINAL_BODIES),
        st.tuples(
            st.sampled_from(["prompt", "child", "process", "resume_abandon", "pause", "other"]),
            st.integers(0, 3),
        ),
        st.tuples(st.just("update"), st.integers(0, 3)),
        st.tuples(st.just("include"), st.integers(0, 3)),
    ),
    max_size=30,
)


def _events(ops: list[tuple[Any, ...]]) -> list[TraceEvent]:
    events: list[TraceEvent] = []

    def add(kind: str, payload: dict[str, Any], attempt: int | None = None, scope: str = "node") -> None:
        seq = len(events) + 1
        node, att = (f"n{attempt % 2}", f"a{attempt}") if attempt is not None else (None, None)
        at = f"2026-01-01T00:00:{seq:02d}.000Z"
        events.append(TraceEvent(seq, at, scope, kind, RUN_ID, payload, node, att))  # type: ignore[arg-type]

    add("run_started", {"workflowName": "fast", "input": {}}, scope="run")
    for op in ops:
        kind, attempt = op[0], op[1]
        if kind == "start":
            add("node_started", {"nodeType": op[2], "statusDetail": "d", "timeoutMs": 5}, attempt)
        elif kind in ("node_finished", "node_failed"):
            add(kind, dict(op[2]), attempt)
        elif kind == "prompt":
            add("agent_prompt_sent", {"prompt": f"p{attempt}"}, attempt, scope="agent")
        elif kind == "child":
            add("child_step_finished", {"key": f"c{attempt}", "outcome": "ok"}, attempt)
        elif kind == "process":
            add("process_started", {"pid": attempt}, attempt)
        elif kind == "resume_abandon":
            add("run_resumed", {"abandonedAttemptId": f"a{attempt}"}, scope="run")
        elif kind == "pause":
            add("run_paused", {}, scope="run")
        elif kind == "other":
            add("something_new", {"n": attempt}, attempt)
        elif kind == "update":
            payload = {"updateId": f"u{attempt}", "type": "progress", "key": "k", "data": {"n": attempt}}
            add("update_published", payload, attempt)
        else:
            add("include_entered", {"mountPath": ["sub"], "invocation": attempt}, scope="run")
    return events


def _by_handlers(state: RunState, events: Iterable[TraceEvent]) -> RunState:
    """The fold with every event given to its handler: the definition the fast path must agree with."""
    folder = _Folder(state)
    last: TraceEvent | None = None
    for last in events:
        handler = _HANDLERS.get(last.type)
        if handler is not None:
            handler(folder, last)
    return folder.result(last)


@settings(deadline=None)
@given(_OPS)
def test_the_fast_path_folds_every_trace_as_the_handlers_do(ops: list[tuple[Any, ...]]) -> None:
    events = _events(ops)
    whole = fold_more(RunState(), events)
    assert whole == _by_handlers(RunState(), events)
    assert (
        fold_more(RunState(), iter(events)) == whole
    )  # (a stream, not a list: folded with the collector paused)
    for split in range(1, len(events)):
        head, tail = events[:split], events[split:]
        expected = _by_handlers(_by_handlers(RunState(), head), tail)
        assert fold_more(fold_more(RunState(), head), tail) == expected
        assert fold_more(_by_handlers(RunState(), head), tail) == expected
    assert len(whole.steps) == sum(event.type in ("node_finished", "node_failed") for event in events)


def test_a_pair_folded_fast_is_the_step_the_handler_builds() -> None:
    """A concrete case, so a failure here reads plainly: start, finish with usage, then a failed attempt."""
    events = _events(
        [
            ("start", 0, "compute"),
            (
                "node_finished",
                0,
                {"outcome": "ok", "durationMs": 4, "output": {"a": 1}, "usage": {"input": 2}},
            ),
            ("start", 1, "agent"),
            ("node_failed", 1, {"error": "broke", "traceback": [{"file": "w.py", "line": 3}]}),
        ]
    )
    state = fold_more(RunState(), events)
    assert state == _by_handlers(RunState(), events)
    ok, failed = state.steps
    assert (ok.node_type, ok.outcome, ok.duration_ms, ok.output, ok.started_at) == (
        "compute", "ok", 4, {"a": 1}, "2026-01-01T00:00:02.000Z",
    )  # fmt: skip
    assert (failed.outcome, failed.error, failed.traceback) == (
        "failed",
        "broke",
        ({"file": "w.py", "line": 3},),
    )
    assert state.outputs == {"n0": {"a": 1}} and state.node_stats == {"n0": (1, 4.0), "n1": (1, 0.0)}
    assert state.usage == {"input": 2}
