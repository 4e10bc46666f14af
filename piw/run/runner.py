"""Starting and resuming runs in the foreground: the one library call behind ``piw run`` and ``piw resume``.

Foreground runs go through the run queue like detached ones (``docs/design/persistence.md`` §10.2): a row
claimed by this process before the bundle exists, a lease renewed while it runs, and the claim released (final)
or parked when it stops, so ``piw runs``, ``piw pause`` and ``piw cancel`` in another terminal see and reach it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from piw.errors import ImportTimeout, LoadError, PiwError, ProviderError, RunFinished, RunLocked, RunNotFound
from piw.run.continuation import ContinuationSpec, continuation_executors
from piw.run.decision_book import open_decision_book
from piw.run.delivery import OriginDelivery
from piw.run.engine import Engine, RunOptions
from piw.run.executors import Executor
from piw.run.fork import ForkPoint, prefix_events, select_prefix, with_adopted_spend
from piw.run.launch import LaunchOptions
from piw.run.resume import RunTrace, read_run_trace, refuse_unresumable
from piw.store.bundle import (
    Bundle,
    discard_incomplete,
    ensure_private_dir,
    load_state,
    new_run_id,
    open_bundle,
)
from piw.store.db.holders import runner_id
from piw.store.db.idempotency import Adopted, StartKey
from piw.store.db.lease import Lease
from piw.store.db.outbox import NotificationRow, Outbox
from piw.store.db.queue import RunQueue
from piw.store.db.rows import FINAL_QUEUE_STATUS, Claim, NewRun, ParkReason
from piw.store.db.run_database import open_run_database
from piw.store.fold import RunState, fold
from piw.store.run_store import open_run_stores
from piw.store.trace import FileLayer, resolve_durability
from piw.store.writer import Listener
from piw.wire import now_iso
from piw.workflow.budget import Budget
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
    launch: LaunchOptions = field(default_factory=LaunchOptions)
    """How the run was started (provider, model, script; never keys): recorded on its queue row so
    ``piw resume`` and a host reuse them."""
    origin_session: dict[str, Any] | None = None
    """An explicit origin session (``piw run --detach`` from a terminal); default: a new one if recorded."""
    session_visible: bool = True
    budget: Budget | None = None
    """``piw run --budget``: sets or tightens the workflow's budget for this run."""
    confirmation: dict[str, Any] | None = None
    """A detached run whose projection is over ``--confirm-above``: it waits on its budget before any step."""
    show_notification: Callable[[NotificationRow], None] | None = None
    """How the origin session shows a notification an earlier process of this run left undelivered."""
    warn: Callable[[str], None] | None = None
    """Where a problem that does not stop the run is reported (the CLI prints ``Warning: …`` on stderr)."""
    idempotency_key: str | None = None
    """``piw run --idempotency-key``: a repeat of the same start adopts the run the key started (``Adopted``)."""
    resolution: dict[str, Any] | None = None
    """``piw resolve``: the answer for a run whose effect outcome is unknown (``piw.run.effects``)."""
    schedule: dict[str, Any] | None = None
    """``{name, fireAt}`` of the schedule fire queuing this run (``piw host``, docs/schedules.md)."""


def new_origin_session() -> dict[str, Any]:
    return {"id": "ses_" + secrets.token_hex(16), "startedAt": now_iso()}


def _engine(workflow: LoadedWorkflow, home: Path, options: ForegroundOptions) -> Engine:
    factory = options.agent_executor_factory
    clock: dict[str, Any] = {"clock": options.clock} if options.clock else {}
    database = open_run_database(ensure_private_dir(home))
    # The agent executor first: a workflow that needs a provider reports a broken config.toml as its error;
    # one that does not only hears about it as a warning (configured_durability) and runs.
    agent_executor = factory(workflow) if factory else None
    return Engine(
        workflow,
        home,
        RunOptions(
            durability=resolve_durability(options.durability or configured_durability(home, options.warn)),
            files=options.files,
            listeners=[*options.listeners, *_origin_delivery(database.outbox, home, options)],
            agent_executor=agent_executor,
            origin_session=options.origin_session
            or (new_origin_session() if options.record_origin and options.session_visible else None),
            on_start=options.on_start,
            waiter=options.waiter,
            session_visible=options.session_visible,
            claimer=_claimer(home, workflow, options.launch),
            decisions=open_decision_book(database.decisions),
            outbox=database.outbox,
            budget=options.budget,
            resolution=options.resolution,
            schedule=options.schedule,
            confirmation=options.confirmation,
            **clock,
        ),
    )


def _origin_delivery(outbox: Outbox, home: Path, options: ForegroundOptions) -> list[Listener]:
    """The origin session delivers its run's notifications (a detached host has none to deliver to)."""
    if not (options.record_origin and options.session_visible):
        return []
    return [OriginDelivery(outbox, home, options.show_notification)]


def start_fingerprint(payload: dict[str, Any], launch: LaunchOptions) -> str:
    """The SHA-256 of what a start asks for: workflow identity, input, title, budget and launch options.

    The origin session and the run id are left out: they differ on every call, and a repeat is the same request.
    """
    request = {
        key: payload.get(key)
        for key in ("workflowSource", "workflowSources", "definitionDigest", "input", "runTitle", "budget")
    }
    request["launch"] = launch.to_json()
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _new_row(
    run_id: str,
    payload: dict[str, Any],
    workflow: LoadedWorkflow,
    launch: LaunchOptions,
    start_key: StartKey | None = None,
) -> NewRun:
    """The queue row of a run being created, from its ``run_started`` payload."""
    continued = payload.get("continuedFrom")
    return NewRun(
        run_id=run_id,
        workflow_ref=str(workflow.path),
        workflow_source=workflow.source,
        definition_digest=workflow.digest,
        input=payload.get("input"),
        options=launch.to_json(),
        origin_session_id=(payload.get("originSession") or {}).get("id"),
        parent_run_id=continued.get("runId") if isinstance(continued, dict) else None,
        start_key=start_key,
    )


def _claimer(
    home: Path, workflow: LoadedWorkflow, launch: LaunchOptions
) -> Callable[[str, dict[str, Any]], Lease]:
    """Claims the queue row of a run being created (a fork, a continuation): inserted already claimed, or (a
    continuation whose row the answer inserted) claimed by name."""

    def claim(run_id: str, payload: dict[str, Any]) -> Lease:
        queue = open_run_database(home).queue
        if queue.get(run_id) is not None:
            return Lease(queue, queue.claim_run(run_id, runner_id())).start()
        claimed = queue.enqueue(_new_row(run_id, payload, workflow, launch), claim_for=runner_id())
        assert isinstance(claimed, Claim)  # (no start key: nothing to adopt)
        return Lease(queue, claimed).start()

    return claim


def _claim_start(
    engine: Engine, home: Path, raw_input: Any, title: str | None, options: ForegroundOptions
) -> tuple[str, Lease] | Adopted:
    """Insert a new run's queue row, claimed by this process, before the engine creates its bundle: the run id and
    its lease. With an idempotency key the row's transaction records the key first, and an exact repeat of an
    earlier start adopts that run instead (nothing is inserted)."""
    workflow = engine.workflow
    payload = engine.start_payload(prepare_input(workflow.definition, raw_input), title)
    run_id = new_run_id(workflow.definition.name)
    key = options.idempotency_key
    start_key = None if key is None else StartKey(key, start_fingerprint(payload, options.launch))
    queue = open_run_database(home).queue
    claimed = queue.enqueue(
        _new_row(run_id, payload, workflow, options.launch, start_key), claim_for=runner_id()
    )
    if isinstance(claimed, Adopted):
        return claimed
    assert claimed is not None  # (claimed for this process)
    return run_id, Lease(queue, claimed).start()


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
) -> RunState | Adopted:
    """Load, validate and run a workflow to its end (or until it waits or is interrupted).

    A repeat of an earlier start with the same idempotency key and request runs nothing: :class:`Adopted` names
    the run the key started."""
    workflow = load_workflow(reference, home, tools_known())
    prepare_input(workflow.definition, raw_input)  # input errors come before provider selection
    with _closing(_engine(workflow, home, options)) as engine:
        claimed = _claim_start(engine, home, raw_input, title, options)
        if isinstance(claimed, Adopted):
            return claimed
        run_id, lease = claimed
        return engine.start(raw_input, title, run_id, lease=lease)


def queue_run(
    reference: str,
    home: Path,
    raw_input: Any,
    title: str | None,
    options: ForegroundOptions,
    check: Callable[[LoadedWorkflow], object] | None = None,
    *,
    allow_duplicate: bool = True,
) -> RunState | Adopted:
    """``piw run --detach``: validate, create the bundle with ``run_started``, and leave it queued for a host.

    ``check`` (e.g. building the provider the host will use) runs after the input is validated and before
    anything exists, so a bad input or an unusable provider leaves no row and no bundle behind. Without
    ``allow_duplicate`` a live run of the same file and input is refused (``DuplicateRun``, piw.run.duplicates).
    """
    workflow = load_workflow(reference, home, tools_known())
    prepared = prepare_input(workflow.definition, raw_input)  # nothing exists until the input is valid
    if not allow_duplicate and options.idempotency_key is None:  # (a key decides repeats itself)
        from piw.run.duplicates import refuse_duplicate

        refuse_duplicate(home, workflow.source, prepared)
    if check is not None:
        check(workflow)
    detached = ForegroundOptions(
        durability=options.durability,
        files=options.files,
        record_origin=False,
        launch=options.launch,
        origin_session=options.origin_session,
        session_visible=False,
        budget=options.budget,
        idempotency_key=options.idempotency_key,
        schedule=options.schedule,
        confirmation=options.confirmation,
    )
    with _closing(_engine(workflow, home, detached)) as engine:
        claimed = _claim_start(engine, home, raw_input, title, detached)
        if isinstance(claimed, Adopted):
            return claimed
        run_id, lease = claimed
        return engine.start(raw_input, title, run_id, lease=lease, begin=False)


def resume_run(run_id: str, home: Path, options: ForegroundOptions) -> RunState:
    """Resume an unfinished run with the workflow it started from (a changed source is refused).

    The run's queue row is claimed first (``RunLocked`` while another process holds it live; a dead holder on
    this host is taken over at once), a pause request is cleared, and the claim is parked or released when the
    run stops again.
    """
    store = open_run_stores(home).open(run_id)
    return _resume(store.bundle, home, options, read_run_trace(store))


def _resume(bundle: Bundle, home: Path, options: ForegroundOptions, trace: RunTrace) -> RunState:
    """:func:`resume_run` of a trace already read (and folded): the engine folds it no second time."""
    run_id = bundle.run_id
    # Refusals that need no workflow come first, so a deleted or broken file cannot hide them.
    try:
        refuse_unresumable(trace, run_id, options.resolution)
    except RunFinished:
        finish_row(open_run_database(home).queue, trace.state)
        raise
    state = trace.state
    queue = open_run_database(home).queue
    ensure_row(queue, state, home)
    row = queue.get(run_id)
    if row is not None and row.is_final:
        queue.reopen(run_id)  # the trace has no terminal event after all (a torn last line): it wins
    claim = queue.claim_run(run_id, runner_id())
    queue.clear_pause(run_id)
    lease = Lease(queue, claim).start()
    try:
        engine = _engine(load_run_workflow(state, home), home, options)
    except LoadError as exc:
        lease.park(load_park_reason(exc), error=str(exc))
        raise
    except BaseException as exc:
        lease.park("interrupted", error=str(exc) if isinstance(exc, PiwError) else type(exc).__name__)
        raise
    with _closing(engine):
        return engine.resume(run_id, lease, trace)


def ensure_row(queue: RunQueue, state: RunState, home: Path) -> None:
    """A run started before the database existed (or after it was moved aside) gets a parked row."""
    if queue.get(state.run_id) is not None:
        return
    queue.ensure(row_of_bundle(state, home))


def row_of_bundle(state: RunState, home: Path) -> NewRun:
    """A queue row for a run that has a bundle (resumed from its trace, so no input is needed)."""
    source = state.workflow_source or {}
    return NewRun(
        run_id=state.run_id,
        workflow_ref=str(workflow_path_of(source, state.workflow_name, home)) if source else "",
        workflow_source=source,
        definition_digest=state.definition_digest,
        input=None,
        origin_session_id=(state.origin_session or {}).get("id"),
    )


def finish_row(queue: RunQueue, state: RunState) -> None:
    """A run whose trace has a terminal event: set its queue row final if a crash left it open (§8 step 2)."""
    row = queue.get(state.run_id)
    if row is None or row.is_final:
        return
    with contextlib.suppress(PiwError):  # a live holder finalizes it itself
        queue.finalize(state.run_id, FINAL_QUEUE_STATUS.get(state.status, "done"))


def recorded_launch(home: Path, run_id: str) -> LaunchOptions:
    """The provider, model and script a run was started with (its queue row), for ``piw resume``."""
    row = open_run_database(home).queue.get(run_id)
    return LaunchOptions.from_json(row.options) if row is not None else LaunchOptions()


def continue_run(
    spec: ContinuationSpec, home: Path, options: ForegroundOptions, *, begin: bool = True
) -> RunState:
    """Run an accepted answer's continuation in the foreground: create it, or resume it if it exists.

    The answer is recorded first (``piw.run.answers``), with the continuation's queue row, which the engine
    claims by name before it creates the bundle. Safe to repeat: an existing continuation is resumed (or just
    reported when it already ended), never created twice; ``RunLocked`` while another live process runs it.
    Its agent executor is built only when a step ahead asks a model (``continuation_executors``).
    ``begin=False`` only creates it and queues it for a host (a continuation that could not start here).
    """
    options = replace(
        options, agent_executor_factory=continuation_executors(options.agent_executor_factory, home, spec)
    )
    try:
        bundle: Bundle | None = open_bundle(home, spec.run_id)
    except RunNotFound:
        bundle = None
    queue = open_run_database(home).queue
    if bundle is not None:
        trace = read_run_trace(
            open_run_stores(home).open(bundle.run_id)
        )  # the trace decides, never state.json
        state = trace.state
        if state.run_id and state.is_terminal:
            finish_row(queue, state)
            return state
        if state.run_id:
            try:
                return _resume(bundle, home, options, trace)
            except RunFinished:  # it ended an instant ago in the process that ran it: report that
                return read_run_trace(open_run_stores(home).open(bundle.run_id)).state
        row = queue.get(spec.run_id)
        if row is not None and row.has_live_claim(queue.clock()):
            raise RunLocked(f"Run {spec.run_id} is being created by another piw process ({row.runner_id}).")
        discard_incomplete(bundle)  # created, but run_started never committed (its creator died): again
    workflow = load_run_workflow(load_state(open_bundle(home, spec.parent_run_id)), home)
    try:
        with _closing(_engine(workflow, home, options)) as engine:
            return engine.start_continuation(spec, begin=begin)
    except RunFinished:  # another process created and finished it meanwhile: report it
        return fold(open_bundle(home, spec.run_id).read_trace().events)


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
    if options.budget is not None or loaded.definition.budget is not None:
        prefix = with_adopted_spend(prefix)  # the fork's budget counts what the adopted steps spent
    return _engine(loaded, home, options).fork(prefix, raw_input, title)


def load_run_workflow(state: RunState, home: Path) -> LoadedWorkflow:
    """The workflow a run started from, loaded as it is now (``check_source`` tells whether it changed)."""
    return load_workflow(
        workflow_path_of(state.workflow_source, state.workflow_name, home), home, tools_known()
    )


def load_park_reason(exc: PiwError) -> ParkReason:
    """Why a claimed run whose workflow cannot be loaded is parked: an import past its deadline
    (``import_timeout``) is not a changed source (``docs/guarantees.md``, "Hostile workflow files")."""
    return "import_timeout" if isinstance(exc, ImportTimeout) else "source_changed"


def workflow_path_of(source: dict[str, Any], name: str, home: Path) -> Path:
    """Where a run's workflow lives now: its file, or the built-in of that id."""
    if source.get("kind") == "builtin":
        return builtins_dir() / f"{source.get('id')}.workflow.py"
    path = source.get("path")
    if path and Path(path).is_file():
        return Path(path)
    return resolve_reference(name, home)


def configured_durability(home: Path, warn: Callable[[str], None] | None = None) -> str | None:
    """The ``durability`` key of ``config.toml`` (``PIW_DURABILITY`` still wins in ``resolve_durability``).

    A config file that cannot be read does not stop a run that needs no provider: the problem goes to ``warn``
    (one line) and the defaults apply. A run that needs a provider already failed on it when selecting one.
    """
    if not (home / "config.toml").exists():  # (``config_path``): no file, no key, no provider layer to import
        return None
    from piw.config.settings import load_config

    try:
        return load_config(home).durability
    except ProviderError as exc:
        if warn is not None:
            warn(f"{exc} It is ignored for this run, which needs no provider.")
        return None


def resolved_outcome(home: Path, state: RunState) -> tuple[Any, Any]:
    """The final output and error with artifact refs loaded (large values live in ``artifacts/``)."""
    bundle = open_bundle(home, state.run_id)
    return bundle.resolve(state.final_output), bundle.resolve(state.error)


def tools_known() -> Callable[[str], bool]:
    """Whether a tool name is registered (the run-start check of agent ``tools=``).

    A live check: a workflow file may register its own tools when it is imported, after this is called. The
    registry (and the built-in tools it registers) is imported by the first check, so a workflow without agent
    tools never imports it."""

    def known(name: str) -> bool:
        from piw.tools import registry

        return name in registry.registered_names()

    return known
