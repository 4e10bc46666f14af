"""How one run is executed: durability, listeners, the agent executor, the origin session and what is wired.

The engine reads these; ``piw.run.runner`` and ``piw.run.host`` fill them in for a foreground run and a host.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from piw.run.executors import Executor
from piw.run.executors.checkpoint import DecisionBook
from piw.run.executors.notify import Outbox
from piw.store.bundle import Bundle
from piw.store.db.lease import Lease
from piw.store.trace import Durability, FileLayer
from piw.store.writer import Listener
from piw.workflow.budget import Budget


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class RunOptions:
    """How a run is executed: durability, listeners, the agent executor and the origin session."""

    durability: Durability = "effects"
    files: FileLayer | None = None
    listeners: list[Listener] = field(default_factory=list)
    agent_executor: Executor | None = None
    origin_session: dict[str, Any] | None = None
    clock: Callable[[], datetime] = _utc_now
    waiter: Callable[[threading.Event, float], bool] | None = None
    """How ``ActionContext.sleep`` waits (default: on the cancel event); tests pair it with ``clock``."""
    on_start: Callable[[Bundle], None] | None = None
    budget: Budget | None = None
    """A per-run budget (``piw run --budget``): sets or tightens the workflow's own."""
    schedule: dict[str, Any] | None = None
    """``{name, fireAt}`` of the schedule fire starting this run, recorded in ``run_started`` (docs/schedules.md)."""
    confirmation: dict[str, Any] | None = None
    """``piw run --detach`` over ``--confirm-above``: the budget stop the run waits on before its first step."""
    decisions: DecisionBook | None = None
    """Where human-decision gates record their open request (the run database); ``None`` records none."""
    outbox: Outbox | None = None
    """Where notify nodes queue their notification for delivery (the run database); ``None``: the trace only."""
    session_visible: bool = True
    """Foreground (``True``): this process shows assistant output. A detached host (``False``) never runs an
    assistant-completion node: it parks the run for its origin session, or fails the node without one."""
    claimer: Callable[[str, dict[str, Any]], Lease] | None = None
    """Inserts the queue row of a run being created (``run_id``, its ``run_started`` payload), claimed by this
    process, before its bundle exists; the engine then writes under that claim (``piw.run.claims``)."""
    resolution: dict[str, Any] | None = None
    """``piw resolve``: ``{resolution: done|retry|skip, output?}`` for a run whose effect outcome is unknown."""
