"""Run state: the ``RunState`` value the fold produces, its steps and records.

``piw.store.fold`` is the only code that builds a ``RunState`` from events; this module only defines the value.
Its ``state.json`` wire shape is :mod:`piw.store.state_json` (``docs/bundle-format.md`` §7).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, cast, overload

import msgspec

RUN_STATUSES = ("running", "waiting", "completed", "failed", "timed_out", "cancelled", "unknown")
"""``unknown``: an ``effect="once"`` action was interrupted and the run is parked until ``piw resolve`` (not final)."""
TERMINAL_STATUSES = frozenset({"waiting", "completed", "failed", "timed_out", "cancelled"})


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

    def __init__(
        self,
        items: list[StepRecord],
        load: Callable[[], list[StepRecord]] | None = None,
        lazy: int = 0,
        peek: Callable[[int], StepRecord] | None = None,
    ) -> None:
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
    mcp_tools: tuple[dict[str, Any], ...] | None = None
    """The MCP tools the attempt's first visit listed (``mcp_tools_listed``): a resume offers these again."""
    children: tuple[dict[str, Any], ...] = ()
    assistant_completion: dict[str, Any] | None = None
    process_group: dict[str, Any] | None = None
    """The shell command's group (``process_started``): a resume stops it before the node reruns."""
    effect: dict[str, Any] | None = None
    """A ``once``/``reconcile`` effect this attempt started (``effect_started``), and what reconciling it found
    (``effect_reconciled``): a resume never reruns it blindly (``docs/effects.md``)."""


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
    schedule: dict[str, Any] | None = None
    """``{name, fireAt}`` of the schedule fire that started this run (``run_started.schedule``, docs/schedules.md)."""
    carried_step_count: int = 0
    human_decision: dict[str, Any] | None = None
    workflow_source: dict[str, Any] = field(default_factory=dict)
    workflow_sources: tuple[dict[str, Any], ...] | None = None
    definition_digest: str = ""
    started_at: str | None = None
    updated_at: str | None = None
    finished_at: str | None = None
    status: str = "running"
    unresolved: dict[str, Any] | None = None
    """The interrupted ``once`` effect a person must resolve (``effect_outcome_unknown``), while ``status`` is
    ``unknown``: node, attempt, idempotency key and when it started."""
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
