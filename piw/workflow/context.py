"""The node context that workflow callables receive: input, earlier outputs, ids and, for actions, effects.

Compute callbacks, prompt builders and validators get the read-only ``NodeContext``; action callbacks get
``ActionContext``, which adds ``publish_update``, ``run_agent``, cancellation and the engine clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from piw.errors import Cancelled

if TYPE_CHECKING:
    from piw.updates.envelope import UpdateReceipt


class LazyOutputs(Mapping[str, Any]):
    """A read-only mapping that resolves artifact refs only when a value is read."""

    def __init__(self, raw: Mapping[str, Any], resolve: Callable[[Any], Any]) -> None:
        self._raw = raw
        self._resolve = resolve
        self._cache: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._cache:
            self._cache[key] = self._resolve(self._raw[key])
        return self._cache[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __repr__(self) -> str:
        return f"LazyOutputs({list(self._raw)!r})"


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _event_wait(event: threading.Event, seconds: float) -> bool:
    return event.wait(seconds)


@dataclass(frozen=True)
class NodeContext:
    """What every node callable sees: ``input``, ``outputs`` (latest ok output per node), ``results`` and ids."""

    input: Any
    outputs: Mapping[str, Any]
    results: Mapping[str, Any]
    run_id: str
    node_id: str
    attempt_id: str
    workflow_name: str = ""
    clock: Callable[[], datetime] = field(default=_utc_now, repr=False)

    def now(self) -> datetime:
        """The engine clock (injectable in tests)."""
        return self.clock()


@dataclass(frozen=True)
class ActionContext(NodeContext):
    """The context of an action: adds durable updates, child agent steps and cooperative cancellation."""

    cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    publisher: Callable[[str, str, Mapping[str, Any]], UpdateReceipt] | None = field(default=None, repr=False)
    agent_runner: Callable[..., Any] | None = field(default=None, repr=False)
    waiter: Callable[[threading.Event, float], bool] = field(default=_event_wait, repr=False)
    """How ``sleep`` waits on the cancel event (the engine clock's companion: injectable in tests)."""
    idempotency_key: str = ""
    """The same for every attempt of this visit of the node (a rerun after a crash, ``piw resolve RUN retry``),
    another for the next visit: hand it to an API that deduplicates requests (``docs/effects.md``)."""

    def publish_update(self, type: str, key: str, data: Mapping[str, Any]) -> UpdateReceipt:
        """Record a durable update for ``(type, key)``; returns once the event is durable."""
        if self.publisher is None:
            raise RuntimeError("publish_update is not available in this context")
        return self.publisher(type, key, data)

    def run_agent(self, prompt: str, **kwargs: Any) -> Any:
        """Run a child agent step from this action (``docs/design/agent-steps.md`` §10)."""
        if self.agent_runner is None:
            raise RuntimeError("run_agent needs an agent provider; start the run with --provider")
        return self.agent_runner(prompt, **kwargs)

    def start_fan_out(self, children: int) -> int:
        """Announce ``children`` ``run_agent`` children about to start; returns how many may (fewer after a budget
        answer's ``maxTasks``). When their projected spend would cross the run's budget, the run parks on it
        before any child request (``Cancelled`` is raised here: docs/planning.md)."""
        gate = getattr(self.agent_runner, "fan_out", None)
        return int(gate(children)) if gate is not None else children

    def sleep(self, seconds: float) -> None:
        """Sleep, returning early with ``Cancelled`` when the attempt is cancelled, parked or past its deadline."""
        if self.waiter(self.cancelled, max(0.0, seconds)) or self.cancelled.is_set():
            raise Cancelled(f"Step {self.node_id} was cancelled while sleeping.")
