"""Starting and resuming runs in the foreground: the one library call behind ``piw run`` and ``piw resume``."""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from piw.errors import ResumeRefused, RunFinished, RunNotFound
from piw.run.continuation import ContinuationSpec
from piw.run.engine import Engine, RunOptions
from piw.run.executors import Executor
from piw.run.fork import ForkPoint, prefix_events, select_prefix
from piw.store.bundle import Bundle, discard_incomplete, load_state, open_bundle
from piw.store.replay import RunState, fold
from piw.store.trace import FileLayer, resolve_durability
from piw.store.writer import Listener
from piw.wire import now_iso
from piw.workflow.loader import LoadedWorkflow, builtins_dir, load_workflow, prepare_input, resolve_reference


@dataclass
class ForegroundOptions:
    """What the CLI decides for a foreground run."""

    listeners: list[Listener] = field(default_factory=list)
    durability: str | None = None
    files: FileLayer | None = None
    agent_executor_factory: Callable[[LoadedWorkflow], Executor | None] | None = None
    record_origin: bool = True
    on_start: Callable[[Bundle], None] | None = None
    clock: Callable[[], datetime] | None = None
    """The engine clock (tests inject one; ``None`` is the real UTC clock)."""
    waiter: Callable[[threading.Event, float], bool] | None = None
    """How ``ctx.sleep`` waits (tests pair it with ``clock``)."""


def _origin_session() -> dict[str, Any]:
    return {"id": "ses_" + secrets.token_hex(16), "startedAt": now_iso()}


def _engine(workflow: LoadedWorkflow, home: Path, options: ForegroundOptions) -> Engine:
    factory = options.agent_executor_factory
    clock: dict[str, Any] = {"clock": options.clock} if options.clock else {}
    return Engine(
        workflow,
        home,
        RunOptions(
            durability=resolve_durability(options.durability or configured_durability(home)),
            files=options.files,
            listeners=list(options.listeners),
            agent_executor=factory(workflow) if factory else None,
            origin_session=_origin_session() if options.record_origin else None,
            on_start=options.on_start,
            waiter=options.waiter,
            **clock,
        ),
    )


@contextlib.contextmanager
def _closing(engine: Engine) -> Iterator[Engine]:
    """Run with ``engine``, then release what its agent executor holds (a Pi process, a local model server)."""
    try:
        yield engine
    finally:
        close = getattr(engine.options.agent_executor, "close", None)
        if callable(close):
            close()


def start_run(
    reference: str, home: Path, raw_input: Any, title: str | None, options: ForegroundOptions
) -> RunState:
    """Load, validate and run a workflow to its end (or until it waits or is interrupted)."""
    workflow = load_workflow(reference, home, tools_known())
    prepare_input(workflow.definition, raw_input)  # input errors come before provider selection
    with _closing(_engine(workflow, home, options)) as engine:
        return engine.start(raw_input, title)


def resume_run(run_id: str, home: Path, options: ForegroundOptions) -> RunState:
    """Resume an unfinished run with the workflow it started from (a changed source is refused)."""
    bundle = open_bundle(home, run_id)
    # From the trace, never state.json: a cache that says "completed" must not stop a resume (persistence §3).
    state = fold(bundle.read_trace().events)
    # Refusals that need no workflow come first, so a deleted or broken file cannot hide them.
    if not state.run_id:
        raise ResumeRefused(f"Run {run_id} never started (its trace is empty); start it again with piw run.")
    if state.is_terminal:
        raise RunFinished(f"Run {run_id} already ended ({state.status}); nothing to resume.")
    workflow = load_workflow(
        workflow_path_of(state.workflow_source, state.workflow_name, home), home, tools_known()
    )
    with _closing(_engine(workflow, home, options)) as engine:
        return engine.resume(run_id)


def continue_run(spec: ContinuationSpec, home: Path, options: ForegroundOptions) -> RunState:
    """Run an accepted answer's continuation in the foreground: create it, or resume it if it exists.

    The answer is recorded first (``piw.run.answers``); this is safe to repeat: an existing continuation is
    resumed (or just reported, when it already ended), never created twice.
    """
    try:
        bundle = open_bundle(home, spec.run_id)
    except RunNotFound:
        bundle = None
    if bundle is not None:
        state = fold(bundle.read_trace().events)  # the trace decides, never a cached state.json
        if not state.run_id:
            discard_incomplete(bundle)  # created, but run_started never committed: start it again
        elif state.is_terminal:
            return state
        else:
            return resume_run(spec.run_id, home, options)
    parent = load_state(open_bundle(home, spec.parent_run_id))
    workflow = load_workflow(
        workflow_path_of(parent.workflow_source, parent.workflow_name, home), home, tools_known()
    )
    with _closing(_engine(workflow, home, options)) as engine:
        return engine.start_continuation(spec)


def fork_run(
    parent_id: str,
    home: Path,
    point: ForkPoint,
    options: ForegroundOptions,
    *,
    workflow: str | None = None,
    raw_input: Any | None = None,
    title: str | None = None,
) -> RunState:
    """Start a fork of ``parent_id`` at ``point`` and follow it; the parent bundle is only read.

    ``workflow`` names a (possibly changed) definition; by default the parent's own source is loaded again.
    """
    parent = open_bundle(home, parent_id)
    prefix = select_prefix(parent, point)
    if workflow is None:
        state = load_state(parent, prefix_events(parent))
        workflow = str(workflow_path_of(state.workflow_source, state.workflow_name, home))
    loaded = load_workflow(workflow, home, tools_known())
    if raw_input is not None:
        prepare_input(loaded.definition, raw_input)  # input errors come before provider selection
    return _engine(loaded, home, options).fork(prefix, raw_input, title)


def workflow_path_of(source: dict[str, Any], name: str, home: Path) -> Path:
    """Where a run's workflow lives now: its file, or the built-in of that id."""
    if source.get("kind") == "builtin":
        return builtins_dir() / f"{source.get('id')}.workflow.py"
    path = source.get("path")
    if path and Path(path).is_file():
        return Path(path)
    return resolve_reference(name, home)


def configured_durability(home: Path) -> str | None:
    """The ``durability`` key of ``config.toml`` (``PIW_DURABILITY`` still wins in ``resolve_durability``)."""
    from piw.providers.config import load_config

    return load_config(home).durability


def resolved_outcome(home: Path, state: RunState) -> tuple[Any, Any]:
    """The final output and error with artifact refs loaded (large values live in ``artifacts/``)."""
    bundle = open_bundle(home, state.run_id)
    return bundle.resolve(state.final_output), bundle.resolve(state.error)


def tools_known() -> Callable[[str], bool] | None:
    """Whether a tool name is registered (the run-start check of agent ``tools=``)."""
    try:
        from piw.tools import registry
    except ImportError:  # pragma: no cover - the tools package ships with piw
        return None
    # A live check: a workflow file may register its own tools when it is imported, after this is called.
    return lambda name: name in registry.registered_names()
