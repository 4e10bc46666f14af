"""Starting a run without a terminal: ``piw run NAME --detach``, and ``POST /api/runs`` (``docs/serve.md``).

A client of the API may start only a workflow that ``piw list`` shows (a discovered file or a built-in, by its
id), never a path it names: what runs is what the owner of this home installed. The run is validated and queued
exactly as ``piw run --detach`` queues it; ``piw host`` executes it.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piw.errors import UsageError
from piw.run.launch import LaunchOptions

if TYPE_CHECKING:
    from piw.store.db.idempotency import Adopted
    from piw.store.fold import RunState
    from piw.workflow.budget import Budget


def startable(home: Path) -> dict[str, tuple[str, Path]]:
    """The workflows ``piw list`` shows, by id: their origin label and file."""
    from piw.workflow.loader import discover

    return {path.name.removesuffix(".workflow.py"): (label, path) for label, path in discover(home)}


def queue_detached(
    home: Path,
    reference: str,
    raw_input: Any,
    title: str | None,
    launch: LaunchOptions,
    *,
    origin_session: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    budget: Budget | None = None,
    confirmation: dict[str, Any] | None = None,
    allow_duplicate: bool = True,
) -> RunState | Adopted:
    """Validate everything, write ``run_started``, queue the run for a host (or adopt the run of the same key);
    ``confirmation``: the budget stop a run over ``--confirm-above`` waits on before its first step; without
    ``allow_duplicate`` a live run of the same file and input is refused (``piw.run.duplicates``)."""
    from rich.console import Console

    from piw.agent_steps.factory import agent_executor_factory
    from piw.run.runner import ForegroundOptions, queue_run

    # The provider the host will use must exist and be requestable now, not fail later in the host.
    factory = agent_executor_factory(home, Console(file=io.StringIO()), launch)
    options = ForegroundOptions(
        launch=launch.recorded(),
        origin_session=origin_session,
        idempotency_key=idempotency_key,
        budget=budget,
        confirmation=confirmation,
    )
    return queue_run(
        reference, home, raw_input, title, options, check=factory, allow_duplicate=allow_duplicate
    )


def start_discovered(
    home: Path, workflow: str, raw_input: Any, title: str | None, idempotency_key: str | None = None
) -> RunState | Adopted:
    """``POST /api/runs``: queue a run of the discovered workflow ``workflow`` (its id in ``piw list``)."""
    found = startable(home).get(workflow)
    if found is None:
        raise UsageError(
            f"No workflow {workflow!r} is installed here; start one that 'piw list' shows "
            "(GET /api/workflows lists them)."
        )
    return queue_detached(
        home, str(found[1]), raw_input, title, LaunchOptions(), idempotency_key=idempotency_key
    )
