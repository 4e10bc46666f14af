"""The ``script`` node: an orchestration script in ordinary Python, durable leaf by leaf
(``docs/dynamic-workflows.md``).

``script(main)`` is an action whose body is ``main(flow)``. Each ``flow.agent(...)`` is one leaf: a ``ctx.run_agent``
child step under a **structural key** (phase, the function that called it, item index, stage, or an explicit
``key=``) so that the same leaf has the same key every time the script runs. A leaf whose key already has a
committed ``ok`` result in this node visit returns it without a model request (``docs/design/agent-steps.md`` §10);
plain Python between leaves simply runs again. There is no determinism sandbox: ``piw validate`` runs a script twice
and compares its keys (``piw.run.script_check``).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from piw.errors import DefinitionError, NodeFailure, UpdateRejected
from piw.workflow.script_progress import Fan, PhaseBoard, PhaseCount

if TYPE_CHECKING:
    from piw.workflow.context import ActionContext
    from piw.workflow.definition import ActionNode

MAX_KEY = 128
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_HERE = __file__


class AgentLimit(NodeFailure):
    """A script would start more leaves than its ``max_agents`` (counted over the run and all its resumes)."""


class LeafFailed(NodeFailure):
    """A leaf agent step ended without an output (its outcome and error are in the message)."""


def segment(name: str) -> str:
    """A key segment: ``[A-Za-z0-9._-]``, starting with a letter or digit (``<lambda>`` is ``lambda``)."""
    cleaned = _UNSAFE.sub("_", name).strip("._-") or "x"
    return cleaned if cleaned[0].isalnum() else "x" + cleaned


def full_key(path: Sequence[str]) -> str:
    """The leaf key for a scope path; one over 128 characters keeps its head and ends in a digest of the rest."""
    key = "/".join(path)
    if len(key) <= MAX_KEY:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{key[: MAX_KEY - 18]}~{digest}".replace("~", "-")


@dataclass
class Scope:
    """Where a call happens: the key path so far and how often each name was used here (in call order)."""

    path: tuple[str, ...]
    phase: str
    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def name(self, base: str) -> str:
        """``base`` the first time it is used in this scope, ``base:2`` the second time, …"""
        with self.lock:
            n = self.counts.get(base, 0) + 1
            self.counts[base] = n
        return base if n == 1 else f"{base}:{n}"

    def child(self, *parts: str, phase: str | None = None) -> Scope:
        return Scope((*self.path, *parts), self.phase if phase is None else phase)


def caller_name() -> tuple[str, str]:
    """The function that called into the flow (outside this module), and its ``file:line`` for reports."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == _HERE:
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "main", "?"
    return segment(frame.f_code.co_name), f"{frame.f_code.co_filename}:{frame.f_lineno}"


LeafCall = Callable[[str, str, Any, tuple[str, ...], str], Any]
"""How a flow asks one leaf: ``(key, prompt, expected_output, tools, phase) -> output``."""


class Flow:
    """What ``main(flow)`` gets: ``input``, ``outputs``, ``agent``, ``parallel``, ``pipeline``, ``phase``, ``log``."""

    def __init__(
        self,
        input: Any,
        outputs: Any,
        ask: LeafCall,
        *,
        max_concurrency: int = 16,
        max_agents: int = 1000,
        committed: frozenset[str] = frozenset(),
        asked_before: int = 0,
        fan_out: Callable[[int], int] | None = None,
        report: Callable[[str, str, dict[str, Any]], None] | None = None,
        now: Callable[[], str] | None = None,
    ) -> None:
        self.input = input
        self.outputs = outputs
        self.max_concurrency = max_concurrency
        self.max_agents = max_agents
        self._ask = ask
        self._committed = committed
        self._committed_scopes = {
            key.rsplit("/", n)[0] for key in committed for n in range(1, key.count("/") + 1)
        }
        """Every scope path that holds a committed leaf (a fan-out counts only items with none)."""
        self._asked = asked_before
        """Leaves that asked a model in earlier attempts of this visit, plus those started by this one."""
        self._fan_out = fan_out
        self._report = report
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._scope: contextvars.ContextVar[Scope] = contextvars.ContextVar("piw_script_scope")
        self._root = Scope((), "main")
        self._used: set[str] = set()
        self._fan_var: contextvars.ContextVar[Fan | None] = contextvars.ContextVar(
            "piw_script_fan", default=None
        )
        self.board = PhaseBoard(self._phase_report if report is not None else None, now)
        """Per-phase counters, published as ``script.phase`` updates (``piw.workflow.script_progress``)."""
        self._lines = 0
        self.leaves: list[dict[str, Any]] = []
        """Every leaf this run of ``main`` reached: key, phase, call site, prompt digest (for ``piw validate``)."""

    # ---- scopes -------------------------------------------------------------------------------------------

    def _current(self) -> Scope:
        return self._scope.get(self._root)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Name a phase: its leaves' keys start with it, and progress is shown per phase."""
        if not isinstance(name, str) or not name.strip():
            raise DefinitionError("flow.phase(name) needs a non-empty name")
        scope = self._current()
        token = self._scope.set(scope.child(scope.name(segment(name)), phase=name))
        self.board.enter(name, segment(name))
        try:
            yield
        finally:
            self._scope.reset(token)
            self.board.exit(name)

    # ---- leaves -------------------------------------------------------------------------------------------

    def agent(
        self,
        prompt: str,
        *,
        expected_output: Any = None,
        tools: Sequence[str] = (),
        key: str | None = None,
    ) -> Any:
        """One agent step (submit completion, as a ``ctx.run_agent`` child); returns its output."""
        scope = self._current()
        site_name, site = caller_name()
        last = segment(key) if key is not None else scope.name(site_name)
        leaf_key = full_key((*scope.path, last))
        with self._lock:
            if leaf_key in self._used:
                raise DefinitionError(f"flow.agent key {leaf_key!r} is used twice in this run of the script")
            self._used.add(leaf_key)
            self.leaves.append(
                {
                    "key": leaf_key,
                    "phase": scope.phase,
                    "site": site,
                    "prompt": hashlib.sha256(str(prompt).encode()).hexdigest()[:16],
                }
            )
            fresh = leaf_key not in self._committed
            if fresh:
                if self._asked >= self.max_agents:
                    raise AgentLimit(
                        f"max_agents={self.max_agents} reached: leaf {leaf_key} would be agent "
                        f"{self._asked + 1} of this run."
                    )
                self._asked += 1
        phase = scope.phase
        self.board.reached(phase, segment(phase), self._fan_var.get())
        if not fresh:
            output = self._ask(leaf_key, prompt, expected_output, tuple(tools), phase)
            self.board.leaf(phase, done=1)
            return output
        with self._slots:
            self.board.leaf(phase, running=1)
            try:
                return self._ask(leaf_key, prompt, expected_output, tuple(tools), phase)
            finally:
                self.board.leaf(phase, running=-1, done=1)

    # ---- fan-out ------------------------------------------------------------------------------------------

    def parallel(self, items: Sequence[Any], fn: Callable[[Any], Any]) -> list[Any]:
        """``fn(item)`` for each item, at most ``max_concurrency`` at once; results in item order."""
        return self._fan(list(items), (fn,))

    def pipeline(self, items: Sequence[Any], *stages: Callable[[Any], Any]) -> list[Any]:
        """Each item flows through ``stages`` in order, entering the next stage as soon as it leaves one."""
        if not stages:
            raise DefinitionError("flow.pipeline(items, *stages) needs at least one stage")
        return self._fan(list(items), stages)

    def _fan(self, items: list[Any], stages: Sequence[Callable[[Any], Any]]) -> list[Any]:
        scope = self._current()
        names = [segment(getattr(stage, "__name__", "stage")) for stage in stages]
        base = scope.name("-".join(names) if len(names) > 1 else names[0])
        item_scopes = [scope.child(f"{base}.{index}") for index in range(len(items))]
        self._check_fan_out(item_scopes, len(stages))

        def run_item(index: int) -> Any:
            value = items[index]
            for number, (stage, name) in enumerate(zip(stages, names, strict=True), start=1):
                stage_scope = (
                    item_scopes[index] if len(stages) == 1 else item_scopes[index].child(f"{number}-{name}")
                )
                token = self._scope.set(stage_scope)
                try:
                    value = stage(value)
                finally:
                    self._scope.reset(token)
            return value

        if not items:
            return []
        fan = self.board.announce(scope.phase, segment(scope.phase), len(items) * len(stages))
        token = self._fan_var.set(fan)
        try:
            return _run_all(len(items), run_item, min(self.max_concurrency, len(items)))
        finally:
            self._fan_var.reset(token)
            self.board.settle(fan)

    def _check_fan_out(self, item_scopes: list[Scope], stages: int) -> None:
        """Stop before the first request when the new items (at least one leaf per stage) would cross
        ``max_agents``, or the budget's fan-out gate (``ctx.start_fan_out``) refuses them."""
        new = sum(1 for s in item_scopes if "/".join(s.path) not in self._committed_scopes) * stages
        if new == 0:
            return
        with self._lock:
            if self._asked + new > self.max_agents:
                raise AgentLimit(
                    f"max_agents={self.max_agents}: a fan-out of {new} new leaves after {self._asked} "
                    "would cross it; nothing of it was started."
                )
        if self._fan_out is not None:
            self._fan_out(new)

    # ---- log and progress ---------------------------------------------------------------------------------

    def log(self, text: str) -> None:
        """A durable line in the run log (an update ``script.log``, shown in the viewer and ``piw inspect``)."""
        with self._lock:
            self._lines += 1
            number = self._lines
        self._publish("script.log", f"line-{number}", {"text": str(text), "phase": self._current().phase})

    def _phase_report(self, key: str, data: dict[str, Any]) -> bool:
        return self._publish("script.phase", key, data)

    def _publish(self, type_: str, key: str, data: dict[str, Any]) -> bool:
        """``False`` when the run's update rate limit refused it (a log line is then dropped; a phase frame is
        written again later by the board)."""
        if self._report is None:
            return True
        try:
            self._report(type_, key, data)
        except UpdateRejected:
            return False
        return True

    @property
    def phases(self) -> dict[str, PhaseCount]:
        return dict(self.board.phases)


def _run_all(count: int, run_item: Callable[[int], Any], workers: int) -> list[Any]:
    """``run_item(i)`` for every index on ``workers`` threads, results in index order; every item runs, and the
    first failing item's error (by index) is raised once all have ended.

    Each worker takes the next index from a shared counter rather than one future per item: a rerun over 1,000
    committed leaves spent most of its time creating futures and their locks (``bench/bench_script.py``).
    """
    results: list[Any] = [None] * count
    errors: dict[int, BaseException] = {}
    indexes = iter(range(count))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                index = next(indexes, None)
            if index is None:
                return
            try:
                results[index] = run_item(index)
            except BaseException as exc:  # re-raised below, in the caller's thread
                errors[index] = exc

    with ThreadPoolExecutor(workers, thread_name_prefix="piw-script") as pool:
        for future in [pool.submit(contextvars.copy_context().run, work) for _ in range(workers)]:
            future.result()
    if errors:
        raise errors[min(errors)]
    return results


@dataclass(frozen=True)
class ScriptMain:
    """The ``run`` of a script node: builds the flow over ``ctx.run_agent`` and calls ``main(flow)``."""

    main: Callable[[Flow], Any]
    max_concurrency: int
    max_agents: int

    def __call__(self, ctx: ActionContext) -> Any:
        runner = getattr(ctx.agent_runner, "runner", None)
        book = runner() if runner is not None else None
        committed = frozenset(getattr(book, "earlier_ok", {}) or {})
        asked = int(getattr(book, "earlier_asked", 0) or 0)

        def ask(key: str, prompt: str, expected: Any, tools: tuple[str, ...], phase: str) -> Any:
            result = ctx.run_agent(prompt, key=key, expected_output=expected, tools=tools, phase=phase)
            if not result.ok:
                raise LeafFailed(f"Leaf {key} {result.outcome}: {result.error}")
            return result.output

        def report(type_: str, key: str, data: dict[str, Any]) -> None:
            ctx.publish_update(type_, key, data)

        flow = Flow(
            ctx.input,
            ctx.outputs,
            ask,
            max_concurrency=self.max_concurrency,
            max_agents=self.max_agents,
            committed=committed,
            asked_before=asked,
            fan_out=ctx.start_fan_out,
            report=report,
            now=lambda: ctx.now().isoformat(),
        )
        try:
            output = self.main(flow)
            flow.board.finish()
            return output
        finally:
            flow.board.close()


def script(
    main: Callable[[Flow], Any],
    *,
    max_concurrency: int = 16,
    max_agents: int = 1000,
    timeout_s: float | None = None,
) -> ActionNode:
    """A node whose body is ordinary Python: ``main(flow)`` returns its output (``docs/dynamic-workflows.md``)."""
    from piw.workflow.definition import ActionNode

    if not callable(main):
        raise DefinitionError("script(main) needs a function of the flow")
    for name, value in (("max_concurrency", max_concurrency), ("max_agents", max_agents)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DefinitionError(f"script {name} must be a whole number of 1 or more, got {value!r}")
    return ActionNode(
        ScriptMain(main, max_concurrency, max_agents), None, timeout_s, None, "script", fan_out=max_agents
    )
