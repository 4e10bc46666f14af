"""The engine: wires one run of a loaded workflow (start, fork, continuation or resume) to its bundle and claim.

It validates what can be refused before any bundle exists, creates the bundle (or takes the writer lock of an
existing one), opens the run for writing (``piw.run.open_run``) and hands it to the step loop
(``piw.run.step``) or to resume (``piw.run.resume``); whatever stops the loop, it closes the run and settles the
claim. State changes only by appending an event and folding it (``RunWriter.append``); routing, resume and the
views all read the same ``RunState`` (``docs/design/persistence.md`` §3, §8).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from piw.errors import ArtifactDamaged, ResumeRefused, RunInterrupted, UsageError
from piw.run.channel_posts import channel_posts
from piw.run.continuation import (
    ContinuationSpec,
    blocked_node,
    carried,
    continued_budget,
    continued_from,
)
from piw.run.control import Parked, RunControl
from piw.run.executors import Attempt, Executor, NodeOutcome
from piw.run.executors.checkpoint import CheckpointExecutor
from piw.run.executors.compute import ComputeExecutor
from piw.run.executors.notify import NotifyExecutor
from piw.run.fork import Prefix, check_prefix
from piw.run.open_run import OpenRun, open_run
from piw.run.options import RunOptions
from piw.run.resume import (
    RunTrace,
    check_source,
    continue_from_trace,
    read_on,
    read_run_trace,
    refuse_unresumable,
    repair_tail,
)
from piw.run.step import StepLoop
from piw.store.bundle import new_run_id, open_bundle
from piw.store.damage import artifact_damage
from piw.store.db.lease import Lease
from piw.store.fold import RunState, fold
from piw.store.run_store import open_run_stores
from piw.store.storage import storage_error
from piw.store.trace import TraceEvent
from piw.terminal import visible_title
from piw.wire import now_iso
from piw.wire_models import Manifest
from piw.workflow.budget import BUDGET_WAIT
from piw.workflow.loader import LoadedWorkflow, prepare_input, resolve_title

__all__ = ["Engine", "RunOptions"]


class _MissingAgentExecutor:
    def execute(self, attempt: Attempt) -> NodeOutcome:
        return NodeOutcome.failed(f"Agent node {attempt.node_id} needs a provider; run with --provider NAME.")


class Engine:
    """Executes one run of a loaded workflow (start or resume)."""

    def __init__(self, workflow: LoadedWorkflow, home: Path, options: RunOptions | None = None) -> None:
        self.workflow = workflow
        self.graph = workflow.graph
        self.home = home
        self.options = options or RunOptions()
        self.stores = open_run_stores(home, self.options.durability, self.options.files)
        self.control = RunControl()
        self.executors: dict[str, Executor] = {
            "compute": ComputeExecutor(),
            "notify": NotifyExecutor(self.options.outbox),
            "checkpoint": CheckpointExecutor(
                self.options.decisions, channel_posts(home, self.options.decisions)
            ),
            "agent": self.options.agent_executor or _MissingAgentExecutor(),
        }

    @property
    def active(self) -> Attempt | None:
        """The attempt that is running now, if any (``piw cancel`` and Ctrl-C set its cancel event)."""
        return self.control.active

    def request_park(self) -> None:
        """Holder shutdown (a host stopping): abort the active node without a terminal event and park the run."""
        self.control.request_park()

    # ---- public entry points ----------------------------------------------------------------------------

    def start(
        self,
        raw_input: Any,
        title: str | None = None,
        run_id: str | None = None,
        *,
        lease: Lease | None = None,
        begin: bool = True,
    ) -> RunState:
        """Start a new run; input and definition are validated before any bundle exists.

        ``lease`` is a claim already held on the run's queue row (a host creating a queued run); otherwise
        ``RunOptions.claimer`` makes one. ``begin=False`` (``piw run --detach``) stops after ``run_started``
        and hands the row to the queue for a host.
        """
        input_value = prepare_input(self.workflow.definition, raw_input)
        self.control.claim.hold(lease)
        run = self._create_run(input_value, title, {}, run_id)
        confirmation = self.options.confirmation
        if (
            not begin and confirmation is not None
        ):  # over --confirm-above: waits on its budget before any step
            return self._guarded(run, lambda steps: steps.wait_for_confirmation(confirmation))
        if not begin:
            self.control.stopped = "queued"
            return self._guarded(run, lambda steps: None)
        return self._guarded(run, StepLoop.begin)

    def fork(self, prefix: Prefix, raw_input: Any | None = None, title: str | None = None) -> RunState:
        """Start a run that adopts ``prefix`` of a parent run and continues live from the fork point.

        Everything that can refuse the fork (input, a definition that cannot reach the fork point) is checked
        before the new bundle exists; the parent bundle is only read.
        """
        parent = prefix.parent
        recorded = prefix.started.payload
        definition = self.workflow.definition
        source_input = parent.resolve(recorded.get("input")) if raw_input is None else raw_input
        input_value = prepare_input(definition, source_input)
        extra: dict[str, Any] = {"forkedFrom": {"runId": parent.run_id, "seq": prefix.seq}}
        for key in ("continuedFrom", "carried"):
            if key in recorded:
                extra[key] = recorded[key]
        if title is None:
            title = recorded.get("runTitle")
        probe = fold(
            [TraceEvent(1, now_iso(), "run", "run_started", "fork", {"input": input_value, **extra})]
        )
        where = str(self.workflow.path)
        reached = check_prefix(self.graph, prefix, probe, parent.resolve, where).next_target
        if prefix.next_node is not None and reached != prefix.next_node:
            goes = "ends the run" if reached is None else f"goes to {reached!r}"
            raise UsageError(
                f"The workflow in {where} cannot reach the fork point {prefix.next_node!r}: after the adopted "
                f"steps its routing {goes}."
            )
        run = self._create_run(input_value, title, extra)
        return self._guarded(run, lambda steps: _adopt(steps, prefix))

    def start_continuation(
        self, spec: ContinuationSpec, *, lease: Lease | None = None, begin: bool = True
    ) -> RunState:
        """Create the continuation of a waiting run and follow the answered checkpoint's edge (§8).

        ``lease`` is a claim already held on the continuation's queue row (a host); otherwise the claimer
        claims the row the answer inserted, by name. ``begin=False`` stops after ``run_started`` and hands the
        row to the queue for a host (an answer whose continuation could not start where it was given).

        The caller has accepted the answer (and recorded it, where a database is wired); this creates the new
        bundle, whose ``run_started`` carries the parent's results with the checkpoint answered.
        """
        parent = open_bundle(self.home, spec.parent_run_id)
        state = fold(parent.read_trace().events)
        if state.status != "waiting" or state.waiting_on != spec.node_id:
            raise ResumeRefused(
                f"Run {spec.parent_run_id} is not waiting on {spec.node_id} ({state.status}); it cannot be continued."
            )
        check_source(self.workflow, state)
        payload: dict[str, Any] = {
            "workflowName": state.workflow_name,
            "runTitle": state.run_title,
            "input": parent.resolve(state.input),
            "workflowSource": self.workflow.source,
            "workflowSources": self.workflow.sources or None,
            "definitionDigest": self.workflow.digest,
            "maxSteps": state.max_steps,
            "originSession": self.options.origin_session,
            "budget": continued_budget(state, spec),
            "continuedFrom": continued_from(spec),
            "carried": carried(parent, state, spec),
        }
        resume_at = blocked_node(parent, state) if spec.node_id == BUDGET_WAIT else None
        if resume_at is not None:
            payload["continuedFrom"]["resumeAt"] = resume_at
            if isinstance(spec.answer, dict) and isinstance(spec.answer.get("maxTasks"), int):
                payload["continuedFrom"]["fanOutLimit"] = spec.answer[
                    "maxTasks"
                ]  # ctx.start_fan_out reads it
        self.control.claim.hold(lease)
        run = self._create(spec.run_id, payload)
        if not begin:
            self.control.stopped = "queued"
            return self._guarded(run, lambda steps: None)
        if resume_at is not None:
            return self._guarded(run, lambda steps: steps.after_top_up(resume_at))
        return self._guarded(run, lambda steps: steps.after_answer(spec.node_id))

    def resume(self, run_id: str, lease: Lease | None = None, trace: RunTrace | None = None) -> RunState:
        """Continue an interrupted run from its trace (``docs/design/persistence.md`` §8), under ``lease`` when given.

        ``trace`` is the run's trace as the caller already read it (before claiming): once the writer lock is
        held it is used as it is unless the trace changed meanwhile.
        """
        store = self.stores.open(run_id)
        bundle = store.bundle
        claim = self.control.claim
        claim.hold(lease)
        store = claim.acquire(store)
        state: RunState | None = None
        try:
            manifest = Manifest.model_validate(bundle.read_manifest())
            trace = read_run_trace(store) if trace is None else read_on(store, trace)
            state = trace.state
            refuse_unresumable(trace, run_id, self.options.resolution)
            check_source(self.workflow, state)
            store.fence()
            damage = artifact_damage(bundle.path, state)  # never rerun on top of an output that is not there
            if damage is not None:
                raise ArtifactDamaged(
                    f"Run {run_id}: {damage.notice} Restore the file from a backup (nothing was written), or "
                    "start the run again.",
                    damage.file,
                )
            truncated = repair_tail(store, trace)
        except BaseException as exc:
            store.release()
            claim.settle_refusal(exc, state)
            raise
        if not self.options.session_visible:
            # A host acts for the run's recorded origin session (or none): it never becomes one itself.
            self.options.origin_session = state.origin_session
        run = open_run(self.home, store, state, manifest, self.options, indexed=claim.lease is not None)
        claim.running()
        if not bundle.manifest_path.is_file():
            store.fence()
            bundle.write_manifest(manifest)  # it was lost and recovered from the trace: a cache, rebuilt
        events = trace.events
        return self._guarded(run, lambda steps: continue_from_trace(steps, events, truncated))

    # ---- creating a run -----------------------------------------------------------------------------------

    def _create_run(
        self, input_value: Any, title: str | None, extra: dict[str, Any], run_id: str | None = None
    ) -> OpenRun:
        """Create the bundle and commit ``run_started``; until that commits nothing is left behind."""
        payload = self.start_payload(input_value, title, extra)
        return self._create(run_id or new_run_id(self.workflow.definition.name), payload)

    def start_payload(
        self, input_value: Any, title: str | None, extra: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The ``run_started`` payload of a new run with this (validated) input and title; nothing is created.

        The runner fingerprints it (``piw run --idempotency-key``) before it inserts the run's queue row."""
        definition = self.workflow.definition
        # A title that shows nothing (empty, whitespace, invisible) is no title: every view then shows the name.
        run_title = visible_title(title if title is not None else resolve_title(definition, input_value))
        payload: dict[str, Any] = {
            "workflowName": definition.name,
            "runTitle": run_title,
            "input": input_value,
            "workflowSource": self.workflow.source,
            "workflowSources": self.workflow.sources or None,
            "definitionDigest": self.workflow.digest,
            "maxSteps": definition.max_steps,
            "originSession": self.options.origin_session,
            "budget": self._limits(),
            "schedule": self.options.schedule,
            **(extra or {}),
        }
        return payload

    def _create(self, run_id: str, payload: dict[str, Any]) -> OpenRun:
        """Create the bundle and commit ``run_started``; until then nothing is left behind on failure."""
        manifest = Manifest(
            run_id=run_id,
            workflow_name=payload["workflowName"],
            run_title=payload.get("runTitle"),
            workflow_source=self.workflow.source,
            workflow_sources=self.workflow.sources or None,
            definition_digest=self.workflow.digest,
            started_at=now_iso(),
            forked_from=payload.get("forkedFrom"),
        )
        claim = self.control.claim
        if claim.lease is None and self.options.claimer is not None:
            claim.hold(self.options.claimer(run_id, payload))
        try:
            store = claim.acquire(self.stores.create(run_id, self.workflow.snapshot, manifest))
        except BaseException as exc:
            claim.settle(RunState(), None, exc)
            raise
        run = open_run(self.home, store, RunState(), manifest, self.options, indexed=claim.lease is not None)
        try:
            run.writer.append(
                "run", "run_started", {k: v for k, v in payload.items() if v is not None}, sync=True
            )
        except BaseException:
            # Until run_started commits the bundle is incomplete: nothing started, so leave nothing behind.
            run.close()
            store.discard()
            if claim.lease is not None:
                claim.lease.release("failed", "the run never started")
            raise
        claim.running()
        return run

    def _limits(self) -> dict[str, Any] | None:
        """The limits this run starts with: the workflow's budget, tightened by the per-run one."""
        declared = self.workflow.definition.budget
        limits = declared.tightened(self.options.budget) if declared else self.options.budget
        return limits.to_wire() if limits is not None and not limits.empty else None

    # ---- running it ---------------------------------------------------------------------------------------

    def _guarded(self, run: OpenRun, body: Callable[[StepLoop], None]) -> RunState:
        """Run ``body`` on the open run; however it ends, close the run and settle the claim."""
        control = self.control
        steps = StepLoop(self.workflow, self.options, control, self.executors, run)
        error: BaseException | None = None
        try:
            with self._interrupts_cancel_the_active_attempt():
                body(steps)
        except Parked:
            control.stopped = "shutdown"
        except KeyboardInterrupt:
            if control.active is not None:
                control.active.cancel.set()
                control.active.active = False
            control.stopped = "interrupted"
            raise RunInterrupted(
                f"Run {run.run_id} was interrupted and parked; continue it with 'piw resume {run.run_id}'."
            ) from None
        except Exception as exc:
            if control.active is not None:
                control.active.cancel.set()
            storage = storage_error(exc, self.home, run.run_id)
            error = storage or exc
            if storage is None:
                raise
            # A full disk (or a home that turned read-only) mid-run: nothing more can be written, so the run
            # is parked; the torn tail, if any, is repaired by the resume.
            raise storage from None
        except BaseException as exc:
            if control.active is not None:
                control.active.cancel.set()
            error = exc
            raise
        finally:
            run.close()
            control.claim.settle(run.state, control.stopped, error)
        return run.state

    @contextlib.contextmanager
    def _interrupts_cancel_the_active_attempt(self) -> Iterator[None]:
        """Ctrl-C / SIGTERM set the active attempt's cancel event before ``KeyboardInterrupt`` unwinds the stack.

        Threads the attempt started (``run_agent`` children, shell readers) then stop on their own, so an action
        waiting for them in a ``with ThreadPoolExecutor(...)`` block is not stuck joining them while the
        interrupt propagates.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def interrupt(signum: int, frame: FrameType | None) -> None:
            self.control.request_interrupt()
            raise KeyboardInterrupt

        previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _adopt(steps: StepLoop, prefix: Prefix) -> None:
    """Copy the adopted prefix (artifacts first, then conversation entries, then events) and continue."""
    run = steps.run
    writer = run.writer
    run.store.copy_artifacts(prefix.parent)  # (fenced: artifacts are bundle writes too)
    for entry in prefix.entries:
        run.session.adopt(entry)
    run.session.sync()
    # The adopted steps already ran in the parent: listeners (the live display) see the fork continue, not
    # a replay of every copied line.
    listeners, writer.listeners[:] = list(writer.listeners), []
    try:
        events = [writer.adopt(event) for event in prefix.events]
    finally:
        writer.listeners[:] = listeners
    steps.started()
    continue_from_trace(steps, events, 0)
