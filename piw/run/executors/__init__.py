"""Executors: one per node type, each turning an attempt into a ``NodeOutcome``.

The engine owns the trace; an executor only runs the node and reports what happened (some also append
attempt-scoped events through the writer, e.g. updates and notifications).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from piw.errors import OutputInvalid
from piw.wire import is_plain
from piw.workflow.user_code import WorkflowCodeExit, call_user, describe_base_exception

if TYPE_CHECKING:
    from piw.run.budget import BudgetGate
    from piw.store.session import SessionLog
    from piw.store.writer import RunWriter
    from piw.updates.publishing import UpdatePublisher
    from piw.workflow.context import NodeContext
    from piw.workflow.graph import GraphNode


@dataclass(frozen=True)
class NodeOutcome:
    """How one attempt ended, in the terms of ``node_finished``/``node_failed``."""

    outcome: str
    output: Any = None
    error: str | None = None
    action: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    conversation: dict[str, Any] | None = None
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    """The workflow code's exception behind a failure: the engine records its workflow-file frames."""

    @classmethod
    def ok(cls, output: Any, **extra: Any) -> NodeOutcome:
        return cls("ok", output, **extra)

    @classmethod
    def failed(cls, error: str, outcome: str = "failed", **extra: Any) -> NodeOutcome:
        return cls(outcome, None, error, **extra)


@dataclass
class Attempt:
    """Everything an executor needs for one attempt of one node."""

    gnode: GraphNode
    attempt_id: str
    ctx: NodeContext
    writer: RunWriter
    session: SessionLog
    timeout_s: float | None
    cancel: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)
    origin_session_id: str | None = None
    active: bool = True
    timed_out: bool = False
    reattached: bool = False
    budget: BudgetGate | None = None
    """The run's budget gate (shared by every attempt and ``run_agent`` child: one ledger per run)."""
    publisher: UpdatePublisher | None = None
    """The run's update publisher (shared by every attempt, so one rate limit covers the run)."""
    """Resumed under its original attempt id (an agent whose step prompt is already in the conversation)."""
    usage: dict[str, Any] | None = None
    """Model usage of ``ctx.run_agent`` children, summed into the action's terminal event."""
    _usage_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _children: Any = field(default=None, repr=False)

    def child_runner(self, make: Callable[[Attempt], Any]) -> Any:
        """The attempt's one ``ctx.run_agent`` runner, made on first use.

        Children are usually started from several threads at once; making the runner under the lock keeps a
        single runner, and so a single concurrency limit and key registry, per attempt.
        """
        with self._usage_lock:
            if self._children is None:
                self._children = make(self)
            return self._children

    def add_usage(self, part: dict[str, Any]) -> None:
        """Add a child's usage (thread-safe: children may run concurrently)."""
        from piw.store.fold import add_usage

        with self._usage_lock:
            self.usage = add_usage(self.usage, part)

    @property
    def node_id(self) -> str:
        return self.gnode.id

    @property
    def run_id(self) -> str:
        return self.writer.bundle.run_id

    def is_live(self) -> bool:
        """Still accepting updates and submissions: not finished, cancelled, parked or past its deadline."""
        remaining = self.remaining_s()
        return self.active and not self.cancel.is_set() and (remaining is None or remaining > 0)

    def remaining_s(self) -> float | None:
        """Seconds left before the deadline (``None`` without one)."""
        if self.timeout_s is None:
            return None
        return self.timeout_s - (time.monotonic() - self.started)

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)


class Executor(Protocol):
    def execute(self, attempt: Attempt) -> NodeOutcome: ...


def evaluate(value: Any, ctx: NodeContext) -> Any:
    """Callables of the DSL accept a value or a function of the context (a ``BaseException`` it raises comes back
    as ``WorkflowCodeExit``, so it fails the node instead of ending piw)."""
    return call_user(value, ctx) if callable(value) else value


def to_json_output(value: Any, node_id: str) -> Any:
    """Normalise a node's return value to JSON (pydantic models dumped); an unstorable value is an author bug."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if is_plain(value):  # plain JSON data (checked in one walk) needs no trial encoding
        return value
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise OutputInvalid(f"Node {node_id} returned a value that is not JSON ({exc}).") from exc
    return value


def describe_exception(exc: BaseException) -> str:
    """A one-line error for a failed node.

    A ``ValueError`` is how authors reject a value on purpose, so its message stands alone; any other exception
    keeps its type name, without which a message such as ``'x'`` (a ``KeyError``) would say nothing.
    ``sys.exit()`` and other ``BaseException``s from workflow code say what they are.
    """
    if isinstance(exc, WorkflowCodeExit) or not isinstance(exc, Exception):
        return describe_base_exception(exc)
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if message and type(exc) is ValueError:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def run_with_deadline(attempt: Attempt, fn: Callable[[], Any]) -> tuple[str, Any]:
    """Run ``fn`` in a worker thread, honouring the attempt's deadline and cancel event.

    Returns ``("ok", value)``, ``("error", exc)``, ``("timed_out", None)`` or ``("cancelled", None)``. A Python
    function cannot be killed, so on timeout the attempt is marked inactive (its late updates are refused) and the
    thread is left to finish on its own.
    """
    if attempt.timeout_s is None:
        # No deadline to watch: run inline. A thread hand-off would cost as much as the step itself, and Ctrl-C
        # still reaches the function in the main thread (the engine parks the run).
        try:
            return "ok", call_user(fn)
        except Exception as exc:
            return "error", exc
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    _submit(target)
    while not done.is_set():
        remaining = attempt.remaining_s()
        if remaining is not None and remaining <= 0:
            attempt.timed_out = True
            attempt.active = False
            attempt.cancel.set()
            return "timed_out", None
        if attempt.cancel.is_set() and not attempt.timed_out:
            done.wait(1.0)
            if not done.is_set():
                return "cancelled", None
        done.wait(0.05 if remaining is None else min(0.05, max(remaining, 0.001)))
    if "error" in box:
        return "error", box["error"]
    return "ok", box.get("value")


class _Worker(threading.Thread):
    """A reusable daemon thread for action functions: starting a thread per step cost more than the step.

    A worker returns to the idle pool only when its job has returned, so one left running by a timed-out
    attempt is never handed a new job; the pool grows to the number of such stragglers plus one.
    """

    def __init__(self) -> None:
        super().__init__(name="piw-action", daemon=True)
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            self.jobs.get()()
            _IDLE.put(self)


_IDLE: queue.SimpleQueue[_Worker] = queue.SimpleQueue()


def _submit(job: Callable[[], None]) -> None:
    try:
        worker = _IDLE.get_nowait()
    except queue.Empty:
        worker = _Worker()
        worker.start()
    worker.jobs.put(job)


def _forget_workers() -> None:
    """A forked child has none of its parent's threads: never hand a job to a worker that does not exist."""
    global _IDLE
    _IDLE = queue.SimpleQueue()


os.register_at_fork(after_in_child=_forget_workers)
