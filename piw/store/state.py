"""Run state: the ``RunState`` value the fold produces, and its ``state.json`` wire shape.

``piw.store.replay`` is the only code that builds a ``RunState`` from events; this module only defines the value and
converts it to and from the cached ``state.json`` (``persistence.md`` §4).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, cast, overload

import msgspec

from piw.wire import RUN_STATE_SCHEMA

RUN_STATUSES = ("running", "waiting", "completed", "failed", "timed_out", "cancelled")
TERMINAL_STATUSES = frozenset(RUN_STATUSES[1:])


class StepRecord(msgspec.Struct, frozen=True, gc=False, kw_only=True, rename="camel", omit_defaults=True):
    """One finished attempt (``steps[]``); the latest per node is also its ``results`` entry.

    A ``msgspec.Struct`` rather than a dataclass: a long run holds one per step, and a struct is built several
    times faster and is smaller. Its fields are declared in wire order, camelCase when encoded, and defaults
    are omitted, so ``msgspec`` encodes a step straight to its ``steps[]`` shape (``prompt`` and ``output``
    have no default, so they are always written, ``null`` included; an absent ``startedAt`` is left out).
    """

    attempt_id: str
    node_id: str
    node_type: str
    outcome: str
    started_at: str | None = None
    finished_at: str
    duration_ms: int | None = None
    prompt: str | None
    output: Any
    error: str | None = None
    action: dict[str, Any] | None = None
    conversation: dict[str, Any] | None = None
    assistant_completion: dict[str, Any] | None = None
    children: tuple[dict[str, Any], ...] = ()
    usage: dict[str, Any] | None = None
    traceback: tuple[dict[str, Any], ...] | None = None
    """A failure's frames in the workflow files, outermost first (``node_failed.traceback``)."""


class _SharedSteps:
    """The list successive ``StepList`` views share, optionally with a prefix that is loaded on first use.

    A state restored from a fold checkpoint knows how many steps came before it but decodes them only when
    something reads a step (``len`` never does), so a view that shows counts never pays for a long run's steps.
    """

    __slots__ = ("_list", "_load", "_peek", "lazy")

    def __init__(self, items: list[StepRecord], load: Callable[[], list[StepRecord]] | None = None,
                 lazy: int = 0, peek: Callable[[int], StepRecord] | None = None) -> None:  # fmt: skip
        self._list = items
        self._load = load
        self._peek = peek
        """Reads one step of the lazy prefix without loading the others (a pager reads a page of a long run)."""
        self.lazy = lazy
        """How many steps ``load`` will put in front of ``_list``."""

    @property
    def total(self) -> int:
        return self.lazy + len(self._list)

    @property
    def items(self) -> list[StepRecord]:
        if self._load is not None:
            load, self._load, self._peek = self._load, None, None
            loaded = load()
            if len(loaded) != self.lazy:
                raise ValueError(f"expected {self.lazy} steps from the fold checkpoint, got {len(loaded)}")
            self._list[:0] = loaded
            self.lazy = 0
        return self._list

    def get(self, index: int) -> StepRecord:
        """Step ``index`` (``0 <= index < total``), loading the lazy prefix only when it cannot be peeked into."""
        peek = self._peek  # (once: a load on another thread clears it)
        if peek is not None:
            return peek(index) if index < self.lazy else self._list[index - self.lazy]
        return self.items[index]

    def extend(self, steps: list[StepRecord]) -> None:
        self._list.extend(steps)  # after the lazy prefix, which stays unloaded


class StepList(Sequence[StepRecord]):
    """The steps of a ``RunState``: an immutable view of the first ``size`` records of a list successive states share.

    ``fold_more`` appends a finished step in place when its input state views the whole list (the usual case: the
    engine folds each event into the newest state), so a live run's fold costs O(1) per step instead of copying
    every earlier step; an older state that is folded again sees a shorter view and copies its prefix first.
    """

    __slots__ = ("_shared", "_size")

    def __init__(self, items: Iterable[StepRecord] = ()) -> None:
        self._shared = _SharedSteps(list(items))
        self._size = self._shared.total

    @classmethod
    def _view(cls, shared: _SharedSteps, size: int) -> StepList:
        view = cls.__new__(cls)
        view._shared, view._size = shared, size
        return view

    @classmethod
    def lazy(
        cls, count: int, load: Callable[[], list[StepRecord]], peek: Callable[[int], StepRecord] | None = None
    ) -> StepList:
        """``count`` steps that ``load`` returns when one of them is first read (fold checkpoints); with ``peek``
        (``peek(i) == load()[i]``), reading a step by index reads only that one, and only iterating loads."""
        return cls._view(_SharedSteps([], load, count, peek), count)

    def extended(self, steps: list[StepRecord]) -> StepList:
        """A new view with ``steps`` at the end; this view is unchanged."""
        if not steps:
            return self
        shared = self._shared
        if shared.total == self._size:
            shared.extend(steps)
            return StepList._view(shared, self._size + len(steps))
        items = [*shared.items[: self._size], *steps]
        return StepList._view(_SharedSteps(items), len(items))

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> StepRecord: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[StepRecord, ...]: ...
    def __getitem__(self, index: int | slice) -> StepRecord | tuple[StepRecord, ...]:
        shared = self._shared
        if isinstance(index, slice):
            return tuple(shared.get(i) for i in range(*index.indices(self._size)))
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError("step index out of range")
        return shared.get(index)

    def __iter__(self) -> Iterator[StepRecord]:
        items = self._shared.items
        return itertools.islice(items, self._size)  # stops at this view's end if the shared list grows

    def after(self, start: int) -> list[StepRecord]:
        """The steps from index ``start`` on, without loading a lazy prefix that ends at or before ``start``."""
        shared = self._shared
        if start >= shared.lazy:
            return shared._list[start - shared.lazy : self._size - shared.lazy]
        return shared.items[start : self._size]

    def batches(self, size: int = 4096) -> Iterator[list[StepRecord]]:
        """The steps in lists of at most ``size`` (slices of the shared list, for encoders)."""
        items = self._shared.items
        for start in range(0, self._size, size):
            yield items[start : min(start + size, self._size)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StepList({list(self)!r})"


class UpdateRecord(msgspec.Struct, frozen=True, gc=False):
    """The latest ``update_published`` for one ``(type, key)`` pair."""

    update_id: str
    seq: int
    at: str
    run_id: str
    node_id: str
    attempt_id: str
    type: str
    key: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CurrentAttempt:
    """The attempt in progress: started, not yet finished or abandoned."""

    node_id: str
    attempt_id: str
    node_type: str
    started_at: str
    status_detail: str | None = None
    timeout_ms: int | None = None
    prompt: str | None = None
    children: tuple[dict[str, Any], ...] = ()
    assistant_completion: dict[str, Any] | None = None
    process_group: dict[str, Any] | None = None
    """The shell command's group (``process_started``): a resume stops it before the node reruns."""


@dataclass(frozen=True, slots=True)
class RunState:
    """The projection of a run's trace (``state.json``, ``pi-workflows.run-state.v1``)."""

    run_id: str = ""
    trace_seq: int = 0
    workflow_name: str = ""
    run_title: str | None = None
    parent_run_id: str | None = None
    forked_from: dict[str, Any] | None = None
    """``{runId, seq}`` of the run this one was forked from (``piw fork``)."""
    carried_step_count: int = 0
    human_decision: dict[str, Any] | None = None
    workflow_source: dict[str, Any] = field(default_factory=dict)
    workflow_sources: tuple[dict[str, Any], ...] | None = None
    definition_digest: str = ""
    started_at: str | None = None
    updated_at: str | None = None
    finished_at: str | None = None
    status: str = "running"
    input: Any = None
    max_steps: int = 100
    origin_session: dict[str, Any] | None = None
    outputs: Mapping[str, Any] = field(default_factory=dict)
    results: Mapping[str, StepRecord] = field(default_factory=dict)
    steps: StepList = field(default_factory=StepList)
    node_stats: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    """Per node: ``(finished attempts, their summed durationMs)``, kept by the fold so a graph card never
    rescans the steps (derived, not part of ``state.json``)."""
    usage: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None
    """The run's limits (``run_started.budget``: ``costUsd``, ``tokens``, ``modelRequests``, ``agentSteps``)."""
    spent: dict[str, Any] | None = None
    """Every model request this run made (``usage_recorded``), plus what a continuation carried: the ledger."""
    spent_by_node: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    spent_steps: frozenset[str] = frozenset()
    """Agent steps (attempt ids, child attempt ids) that made a request: ``spent.agentSteps`` counts them."""
    updates: Mapping[tuple[str, str], UpdateRecord] = field(default_factory=dict)
    current: CurrentAttempt | None = None
    mounts: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    paused: bool = False
    waiting_on: str | None = None
    final_output: Any = None
    error: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def steps_taken(self) -> int:
        """Attempts counted against ``maxSteps``: this trace's terminal node events plus carried ones."""
        return len(self.steps)

    def sorted_updates(self) -> list[UpdateRecord]:
        return sorted(self.updates.values(), key=lambda record: record.seq)


_STATE_FIELDS = tuple(f.name for f in fields(RunState))
_STATE_SETTERS = {name: getattr(RunState, name).__set__ for name in _STATE_FIELDS}


def _copy_function() -> Callable[[RunState], RunState]:
    """A function that copies every slot of a ``RunState`` in straight-line code, generated once from its fields
    (as ``dataclasses`` generates ``__init__``): a loop over the 34 slots cost twice as much per event."""
    namespace: dict[str, Any] = {"new_object": object.__new__, "RunState": RunState}
    lines = ["def copy_state(state):", "    new = new_object(RunState)"]
    for index, name in enumerate(_STATE_FIELDS):
        namespace[f"set_{index}"] = _STATE_SETTERS[name]
        lines.append(f"    set_{index}(new, state.{name})")
    lines.append("    return new")
    exec("\n".join(lines), namespace)  # (text built above from RunState's own field names)
    copy: Callable[[RunState], RunState] = namespace["copy_state"]
    return copy


_copy_state = _copy_function()


def evolve(state: RunState, changes: Mapping[str, Any]) -> RunState:
    """``dataclasses.replace`` for the fold's hot path: a copy of ``state`` with ``changes`` applied.

    The engine folds every event into a new state, and ``replace`` (keyword arguments through the frozen
    ``__init__``) was the largest cost of a step after printing; copying the slots with their descriptors is
    about four times faster (2.9 us against 12 us) and gives an equal value.
    """
    new = _copy_state(state)
    for name, value in changes.items():
        _STATE_SETTERS[name](new, value)
    return new


def add_step_stat(stats: dict[str, tuple[int, float]], step: StepRecord) -> None:
    """Count one finished attempt into ``node_stats`` (a duration that is not a number counts as 0)."""
    attempts, total = stats.get(step.node_id, (0, 0.0))
    duration: Any = step.duration_ms
    stats[step.node_id] = (attempts + 1, total + duration if type(duration) in (int, float) else total)


class _Timed(Protocol):
    @property
    def node_id(self) -> str: ...
    @property
    def duration_ms(self) -> object: ...


def count_steps(steps: Iterable[_Timed]) -> dict[str, tuple[int, float]]:
    """``node_stats`` of ``steps``: :func:`add_step_stat` of each, inlined (a state.json of 500,000 steps is
    counted on every open; the call per step was half the time)."""
    stats: dict[str, tuple[int, float]] = {}
    get = stats.get
    for step in steps:
        node, duration = step.node_id, cast(Any, step.duration_ms)
        attempts, total = get(node, (0, 0.0))
        stats[node] = (attempts + 1, total + duration if type(duration) in (int, float) else total)
    return stats


def add_usage(total: dict[str, Any] | None, part: dict[str, Any] | None) -> dict[str, Any] | None:
    """Sum two usage objects; ``cost`` stays only when both sides know it."""
    if part is None:
        return total
    if total is None:
        return dict(part)
    summed = {key: total.get(key, 0) + part.get(key, 0) for key in ("requests", "input", "output")}
    summed["cacheRead"] = total.get("cacheRead", 0) + part.get("cacheRead", 0)
    summed["cacheWrite"] = total.get("cacheWrite", 0) + part.get("cacheWrite", 0)
    if "cost" in total and "cost" in part:
        summed["cost"] = total["cost"] + part["cost"]
    return summed


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
            "children": list(current.children) or None,
            "assistantCompletion": current.assistant_completion,
            "processGroup": current.process_group,
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
            raw["updateId"], raw["seq"], raw["at"], raw["runId"], raw["nodeId"], raw["attemptId"],
            raw["type"], raw["key"], raw["data"],
        )  # fmt: skip
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
            children=tuple(detail.get("children") or ()),
            assistant_completion=detail.get("assistantCompletion"),
            process_group=detail.get("processGroup"),
        )
    sources = data.get("workflowSources")
    return RunState(
        run_id=data["runId"],
        trace_seq=int(data["traceSeq"]),
        workflow_name=data.get("workflowName", ""),
        run_title=data.get("runTitle"),
        parent_run_id=data.get("parentRunId"),
        forked_from=data.get("forkedFrom"),
        carried_step_count=data.get("carriedStepCount", 0),
        human_decision=data.get("humanDecision"),
        workflow_source=data.get("workflowSource", {}),
        workflow_sources=tuple(sources) if sources else None,
        definition_digest=data.get("definitionDigest", ""),
        started_at=data.get("startedAt"),
        updated_at=data.get("updatedAt"),
        finished_at=data.get("finishedAt"),
        status=data.get("status", "running"),
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
    import orjson

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
