"""``state.json``: the ``RunState``'s wire shape (``docs/bundle-format.md`` §7), written and read back.

The value itself is :mod:`piw.store.state`; only the fold builds one from events. This module turns a state into
its camelCase document (also ``piw inspect --json``) and back: :func:`state_to_json` / :func:`state_from_json` on
plain objects, and the fast paths a long run needs, :func:`iter_state_json` (the steps encoded straight from their
records, in pieces) and :func:`decode_state` (the steps decoded straight into records, lazily when asked).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import orjson

from piw.store.state import (
    CurrentAttempt,
    RunState,
    StepList,
    StepRecord,
    UpdateRecord,
    count_steps,
)
from piw.wire import RUN_STATE_SCHEMA


def _drop_none(data: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None or key in keep}


def step_to_json(step: StepRecord) -> dict[str, Any]:
    """A ``steps[]`` entry in its camelCase wire shape (``prompt`` is nullable, so always present)."""
    data: dict[str, Any] = msgspec.to_builtins(step)
    if "children" in data:
        data["children"] = list(data["children"])
    if "traceback" in data:
        data["traceback"] = list(data["traceback"])
    return data


_RESULT_KEYS = (
    "attemptId",
    "nodeId",
    "nodeType",
    "outcome",
    "startedAt",
    "finishedAt",
    "durationMs",
    "output",
    "error",
)


def result_to_json(step: StepRecord) -> dict[str, Any]:
    """A ``results[nodeId]`` entry: the latest attempt of that node (``output`` only when it was ``ok``)."""
    data = step_to_json(step)
    result = {key: data[key] for key in _RESULT_KEYS if data.get(key) is not None}
    if step.outcome != "ok":
        result.pop("output", None)
    return result


def update_to_json(record: UpdateRecord) -> dict[str, Any]:
    return {
        "updateId": record.update_id,
        "seq": record.seq,
        "at": record.at,
        "runId": record.run_id,
        "nodeId": record.node_id,
        "attemptId": record.attempt_id,
        "type": record.type,
        "key": record.key,
        "data": record.data,
    }


def state_to_json(state: RunState, *, steps: bool = True) -> dict[str, Any]:
    """The ``state.json`` object (also ``piw inspect --json``); ``steps=False`` leaves ``steps`` empty for a
    streaming encoder that writes them itself (:func:`iter_state_json`)."""
    current = state.current
    data: dict[str, Any] = {
        "schema": RUN_STATE_SCHEMA,
        "traceSeq": state.trace_seq,
        "runId": state.run_id,
        "workflowName": state.workflow_name,
        "runTitle": state.run_title,
        "parentRunId": state.parent_run_id,
        "forkedFrom": state.forked_from,
        "schedule": state.schedule,
        "carriedStepCount": state.carried_step_count or None,
        "humanDecision": state.human_decision,
        "workflowSource": state.workflow_source,
        "workflowSources": list(state.workflow_sources) if state.workflow_sources else None,
        "definitionDigest": state.definition_digest,
        "startedAt": state.started_at,
        "updatedAt": state.updated_at,
        "finishedAt": state.finished_at,
        "status": state.status,
        "input": state.input,
        "maxSteps": state.max_steps,
        "originSession": state.origin_session,
        "outputs": dict(state.outputs),
        "results": {node: result_to_json(step) for node, step in state.results.items()},
        "steps": [step_to_json(step) for step in state.steps] if steps else [],
        "usage": state.usage,
        "budget": state.budget,
        "spent": state.spent,
        "spentByNode": dict(state.spent_by_node) or None,
        "spentSteps": sorted(state.spent_steps) or None,
        "updates": [update_to_json(record) for record in state.sorted_updates()],
        "currentNode": current.node_id if current else None,
        "currentAttemptId": current.attempt_id if current else None,
        "currentNodeStartedAt": current.started_at if current else None,
        "statusDetail": current.status_detail if current else None,
        "currentAttempt": _current_to_json(current) if current else None,
        "mounts": dict(state.mounts) or None,
        "paused": True if state.paused else None,
        "unresolvedEffect": state.unresolved,
        "waitingOn": state.waiting_on,
        "finalOutput": state.final_output,
        "error": state.error,
    }
    return _drop_none(data, keep=("input",))


def _current_to_json(current: CurrentAttempt) -> dict[str, Any]:
    return _drop_none(
        {
            "nodeType": current.node_type,
            "timeoutMs": current.timeout_ms,
            "prompt": current.prompt,
            "mcpTools": list(current.mcp_tools) if current.mcp_tools is not None else None,
            "children": list(current.children) or None,
            "assistantCompletion": current.assistant_completion,
            "processGroup": current.process_group,
            "effect": current.effect,
        }
    )


def step_from_json(raw: dict[str, Any]) -> StepRecord:
    return StepRecord(
        attempt_id=raw["attemptId"],
        node_id=raw["nodeId"],
        node_type=raw.get("nodeType", ""),
        outcome=raw.get("outcome", "ok"),
        started_at=raw.get("startedAt"),
        finished_at=raw.get("finishedAt", ""),
        duration_ms=raw.get("durationMs"),
        prompt=raw.get("prompt"),
        output=raw.get("output"),
        error=raw.get("error"),
        action=raw.get("action"),
        conversation=raw.get("conversation"),
        assistant_completion=raw.get("assistantCompletion"),
        children=tuple(raw.get("children") or ()),
        usage=raw.get("usage"),
        traceback=tuple(raw["traceback"]) if raw.get("traceback") else None,
    )


def state_from_json(data: dict[str, Any]) -> RunState:
    """Rebuild ``RunState`` from ``state.json``; raises ``KeyError``/``TypeError``/``ValueError`` when malformed."""
    if data.get("schema") != RUN_STATE_SCHEMA:
        raise ValueError("not a run-state document")
    return _state_of(data, StepList(step_from_json(raw) for raw in data.get("steps", [])))


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_TYPED_STEPS = msgspec.json.Decoder(list[StepRecord])
_TYPED_STEP = msgspec.json.Decoder(StepRecord)


class _StepHead(msgspec.Struct, rename="camel", gc=False):
    """What every step must have for its decoding to be put off (``lazy_steps``): with these, reading the
    rest later cannot fail (``step_from_json`` takes any other value), and ``node_stats`` need nothing else."""

    attempt_id: str
    node_id: str
    duration_ms: Any = None
    children: list[Any] | None = None
    traceback: list[Any] | None = None


_STEP_HEADS = msgspec.json.Decoder(list[_StepHead])


def decode_state(data: bytes, *, lazy_steps: bool = False) -> RunState:
    """``state.json``'s bytes into ``RunState``: the value of ``state_from_json(msgspec.json.decode(data))``,
    several times faster for a long run.

    The steps are decoded by msgspec straight into ``StepRecord``\\ s (0.6 s for 500,000 steps, against 4 s to
    build a dict per step and copy it into a record), and no dict tree of them is ever held. The top-level
    values other than ``steps`` are decoded as ``state_from_json`` reads them. Raises what it raises (and
    ``msgspec.DecodeError``, a ``ValueError``, for bytes that are not JSON).

    ``lazy_steps`` (the viewer) puts off building the records: a step read by index is decoded alone, all of
    them when something iterates them, so a first screen that shows one page of a long run pays for that page,
    the steps' heads (``node_stats``, and a check that the rest can be read later) and nothing else.
    """
    top = _TOP.decode(data)
    head: dict[str, Any] = {key: msgspec.json.decode(raw) for key, raw in top.items() if key != "steps"}
    if head.get("schema") != RUN_STATE_SCHEMA:
        raise ValueError("not a run-state document")
    raw_steps = top.get("steps")
    if raw_steps is None:
        return _state_of(head, StepList())
    if lazy_steps:
        try:
            heads = _STEP_HEADS.decode(raw_steps)
        except msgspec.ValidationError:
            pass  # something unusual in a step: decode them all now, as state_from_json would
        else:
            raws = _RAWS.decode(raw_steps)
            steps = StepList.lazy(
                len(raws), lambda: _decode_steps(raw_steps), lambda i: _decode_step(raws[i])
            )
            return _state_of(head, steps, count_steps(heads))
    return _state_of(head, StepList(_decode_steps(raw_steps)))


def _decode_step(raw: msgspec.Raw) -> StepRecord:
    """One step as :func:`_decode_steps` gives it, whichever way it decodes the others."""
    try:
        step = _TYPED_STEP.decode(raw)
    except msgspec.ValidationError:
        return step_from_json(msgspec.json.decode(raw))
    return _mended(step)


def _mended(step: StepRecord) -> StepRecord:
    """An empty ``traceback`` read as ``step_from_json`` reads it (``None``): the one value both decoders accept
    but read differently."""
    return msgspec.structs.replace(step, traceback=None) if step.traceback == () else step


def _decode_steps(raw: msgspec.Raw) -> list[StepRecord]:
    """``[step_from_json(item) for item in steps]``, typed when every step has the full wire shape.

    The typed decoder is stricter than :func:`step_from_json`, which gives a missing field its default and takes
    any JSON value: a list it refuses goes through ``step_from_json`` instead, one step's dict at a time. The one
    value both accept but read differently, an empty ``traceback`` (``None`` to ``step_from_json``), is mended.
    """
    try:
        steps = _TYPED_STEPS.decode(raw)
    except msgspec.ValidationError:
        return [step_from_json(msgspec.json.decode(item)) for item in _RAWS.decode(raw)]
    if any(step.traceback == () for step in steps):
        steps = [_mended(step) for step in steps]
    return steps


def _latest_attempts(steps: StepList, wanted: set[str]) -> dict[str, StepRecord]:
    """The last step of each attempt id in ``wanted``: ``results`` names the latest attempts, which are at the
    end of the steps, so the search runs backwards and stops when all are found (not a map of 500,000 ids)."""
    found: dict[str, StepRecord] = {}
    for index in range(len(steps) - 1, -1, -1):
        if len(found) == len(wanted):
            break
        step = steps[index]
        if step.attempt_id in wanted and step.attempt_id not in found:
            found[step.attempt_id] = step
    return found


def _state_of(
    data: dict[str, Any], steps: StepList, node_stats: dict[str, tuple[int, float]] | None = None
) -> RunState:
    """The rest of ``state_from_json``, from the document without its steps and the steps already decoded
    (``node_stats`` when they were counted without the records)."""
    by_attempt = _latest_attempts(steps, {raw["attemptId"] for raw in data.get("results", {}).values()})
    results: dict[str, StepRecord] = {}
    for node_id, raw in data.get("results", {}).items():
        results[node_id] = by_attempt.get(raw["attemptId"]) or step_from_json(raw)
    updates: dict[tuple[str, str], UpdateRecord] = {}
    for raw in data.get("updates", []):
        record = UpdateRecord(
            update_id=raw["updateId"],
            seq=raw["seq"],
            at=raw["at"],
            run_id=raw["runId"],
            node_id=raw["nodeId"],
            attempt_id=raw["attemptId"],
            type=raw["type"],
            key=raw["key"],
            data=raw["data"],
        )
        updates[(record.type, record.key)] = record
    current = None
    if data.get("currentNode"):
        detail = data.get("currentAttempt") or {}
        current = CurrentAttempt(
            node_id=data["currentNode"],
            attempt_id=data["currentAttemptId"],
            node_type=detail.get("nodeType", ""),
            started_at=data.get("currentNodeStartedAt", ""),
            status_detail=data.get("statusDetail"),
            timeout_ms=detail.get("timeoutMs"),
            prompt=detail.get("prompt"),
            mcp_tools=tuple(detail["mcpTools"]) if isinstance(detail.get("mcpTools"), list) else None,
            children=tuple(detail.get("children") or ()),
            assistant_completion=detail.get("assistantCompletion"),
            process_group=detail.get("processGroup"),
            effect=detail.get("effect"),
        )
    sources = data.get("workflowSources")
    return RunState(
        run_id=data["runId"],
        trace_seq=int(data["traceSeq"]),
        workflow_name=data.get("workflowName", ""),
        run_title=data.get("runTitle"),
        parent_run_id=data.get("parentRunId"),
        forked_from=data.get("forkedFrom"),
        schedule=data.get("schedule"),
        carried_step_count=data.get("carriedStepCount", 0),
        human_decision=data.get("humanDecision"),
        workflow_source=data.get("workflowSource", {}),
        workflow_sources=tuple(sources) if sources else None,
        definition_digest=data.get("definitionDigest", ""),
        started_at=data.get("startedAt"),
        updated_at=data.get("updatedAt"),
        finished_at=data.get("finishedAt"),
        status=data.get("status", "running"),
        unresolved=data.get("unresolvedEffect"),
        input=data.get("input"),
        max_steps=data.get("maxSteps", 100),
        origin_session=data.get("originSession"),
        outputs=dict(data.get("outputs", {})),
        results=results,
        steps=steps,
        node_stats=count_steps(steps) if node_stats is None else node_stats,
        usage=data.get("usage"),
        budget=data.get("budget"),
        spent=data.get("spent"),
        spent_by_node=dict(data.get("spentByNode") or {}),
        spent_steps=frozenset(data.get("spentSteps") or ()),
        updates=updates,
        current=current,
        mounts=dict(data.get("mounts") or {}),
        paused=bool(data.get("paused", False)),
        waiting_on=data.get("waitingOn"),
        final_output=data.get("finalOutput"),
        error=data.get("error"),
    )


_STEP_BATCH = 2048
_STEPS_ENCODER = msgspec.json.Encoder()


def iter_state_json(state: RunState, extra: Mapping[str, Any] | None = None) -> Iterator[bytes]:
    """``state_to_json(state)`` (plus ``extra`` keys at the end) as compact JSON, in pieces: the steps are encoded
    by msgspec straight from the records, a batch at a time, so a long run's state is never built as one big
    object or one big string."""
    head = {**state_to_json(state, steps=False), **(extra or {})}
    yield b"{"
    first = True
    for key, value in head.items():
        yield (b"" if first else b",") + orjson.dumps(key) + b":"
        first = False
        if key != "steps":
            yield orjson.dumps(value)
            continue
        yield b"["
        for index, batch in enumerate(state.steps.batches(_STEP_BATCH)):
            encoded = _STEPS_ENCODER.encode(batch)
            yield (b"," if index else b"") + encoded[1:-1]
        yield b"]"
    yield b"}"
