"""The engine: runs a flat graph one node at a time, committing every step to the trace first.

State changes only by appending an event and folding it (``RunWriter.append``); routing, resume and the
views all read the same ``RunState``. Resume continues from the trace alone (``persistence.md`` §8).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from piw.errors import ArtifactDamaged, PiwError, ResumeRefused, RunFinished, SourceChanged, UsageError
from piw.run.budget import BudgetGate
from piw.run.claims import ClaimControl, Stop
from piw.run.continuation import (
    ContinuationSpec,
    blocked_node,
    carried,
    continued_budget,
    continued_from,
)
from piw.run.executors import Attempt, Executor, NodeOutcome, describe_exception, evaluate
from piw.run.executors.checkpoint import CheckpointExecutor, DecisionBook
from piw.run.executors.compute import ComputeExecutor
from piw.run.executors.function import FunctionActionExecutor
from piw.run.executors.notify import NotifyExecutor, Outbox
from piw.run.fork import Prefix, check_prefix
from piw.run.process_groups import stop_group
from piw.run.tracebacks import redact, workflow_files, workflow_traceback
from piw.store.bundle import Bundle, new_run_id, open_bundle
from piw.store.damage import artifact_damage
from piw.store.db.index import RunIndex
from piw.store.db.lease import Lease
from piw.store.fold import TERMINAL_STATUSES, RunState, fold, result_to_json
from piw.store.run_store import RunStore, open_run_stores
from piw.store.session import SessionLog
from piw.store.storage import storage_error
from piw.store.trace import NODE_TERMINAL_TYPES, Durability, FileLayer, TraceEvent, TraceRead
from piw.store.writer import Listener, RunWriter
from piw.updates.publishing import UpdatePublisher
from piw.wire import now_iso
from piw.wire_models import Manifest
from piw.workflow.budget import BUDGET_WAIT, Budget
from piw.workflow.context import ActionContext, LazyOutputs, NodeContext
from piw.workflow.definition import ActionNode, AgentNode, CheckpointNode, ComputeNode
from piw.workflow.loader import LoadedWorkflow, prepare_input, resolve_title
from piw.workflow.routing import Decision, decide, next_invocation
from piw.workflow.user_code import WorkflowCodeExit


class RunInterrupted(PiwError):
    """The foreground run was interrupted (Ctrl-C or SIGTERM); it is parked and can be resumed."""

    exit_code = 130


NO_ORIGIN_SESSION = "Assistant completion requires an origin session."
"""The exact failure of an assistant node in a detached run that has no origin session (agent-steps §7)."""
CANCELLED_ERROR = "Cancelled with 'piw cancel'."


class _Parked(BaseException):
    """Unwinds the loop when the holder shuts down: the active node is aborted without a terminal event."""


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


class _BudgetStopped(Exception):
    """Raised past an attempt whose model request the budget refused; the run then waits on its budget."""


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
        self.writer: RunWriter | None = None
        self.session: SessionLog | None = None
        self.publisher: UpdatePublisher | None = None
        self.budget: BudgetGate | None = None
        self.active: Attempt | None = None
        self.claim = ClaimControl(self._abort_active)
        self.stopped: Stop | None = None
        """Why the loop stopped short of a terminal event (a pause, a park reason, ...)."""
        self._park_requested = False
        self.executors: dict[str, Executor] = {
            "compute": ComputeExecutor(),
            "notify": NotifyExecutor(self.options.outbox),
            "checkpoint": CheckpointExecutor(self.options.decisions),
            "agent": self.options.agent_executor or _MissingAgentExecutor(),
        }
        self._function = FunctionActionExecutor()
        self._shell_executor: Executor | None = None

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
        self.claim.hold(lease)
        writer = self._create_run(input_value, title, {}, run_id)
        if not begin:
            self.stopped = "queued"
            return self._guarded(lambda: None)
        return self._guarded(lambda: self._begin(writer))

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
        writer = self._create_run(input_value, title, extra)
        return self._guarded(lambda: self._adopt(writer, prefix))

    def _create_run(
        self, input_value: Any, title: str | None, extra: dict[str, Any], run_id: str | None = None
    ) -> RunWriter:
        """Create the bundle and commit ``run_started``; until that commits nothing is left behind."""
        payload = self.start_payload(input_value, title, extra)
        return self._create(run_id or new_run_id(self.workflow.definition.name), payload)

    def start_payload(
        self, input_value: Any, title: str | None, extra: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The ``run_started`` payload of a new run with this (validated) input and title; nothing is created.

        The runner fingerprints it (``piw run --idempotency-key``) before it inserts the run's queue row."""
        definition = self.workflow.definition
        run_title = title if title is not None else resolve_title(definition, input_value)
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
            **(extra or {}),
        }
        return payload

    def start_continuation(self, spec: ContinuationSpec, *, lease: Lease | None = None) -> RunState:
        """Create the continuation of a waiting run and follow the answered checkpoint's edge (§8).

        ``lease`` is a claim already held on the continuation's queue row (a host); otherwise the claimer
        claims the row the answer inserted, by name.

        The caller has accepted the answer (and recorded it, where a database is wired); this creates the new
        bundle, whose ``run_started`` carries the parent's results with the checkpoint answered.
        """
        parent = open_bundle(self.home, spec.parent_run_id)
        state = fold(parent.read_trace().events)
        if state.status != "waiting" or state.waiting_on != spec.node_id:
            raise ResumeRefused(
                f"Run {spec.parent_run_id} is not waiting on {spec.node_id} ({state.status}); it cannot be continued."
            )
        self._check_source(state, parent)
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
        self.claim.hold(lease)
        writer = self._create(spec.run_id, payload)
        if resume_at is not None:
            return self._guarded(lambda: self._after_top_up(writer, resume_at))
        return self._guarded(lambda: self._after_answer(writer, spec.node_id))

    def _create(self, run_id: str, payload: dict[str, Any]) -> RunWriter:
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
        if self.claim.lease is None and self.options.claimer is not None:
            self.claim.hold(self.options.claimer(run_id, payload))
        try:
            store = self.claim.acquire(self.stores.create(run_id, self.workflow.snapshot, manifest))
        except BaseException as exc:
            self.claim.settle(RunState(), None, exc)
            raise
        writer = self._open_writer(store, RunState(), manifest)
        try:
            writer.append(
                "run", "run_started", {k: v for k, v in payload.items() if v is not None}, sync=True
            )
        except BaseException:
            # Until run_started commits the bundle is incomplete: nothing started, so leave nothing behind.
            writer.close()
            assert self.session is not None
            self.session.close()
            store.release()
            store.discard()
            if self.claim.lease is not None:
                self.claim.lease.release("failed", "the run never started")
            raise
        self.claim.running()
        return writer

    def _limits(self) -> dict[str, Any] | None:
        """The limits this run starts with: the workflow's budget, tightened by the per-run one."""
        declared = self.workflow.definition.budget
        limits = declared.tightened(self.options.budget) if declared else self.options.budget
        return limits.to_wire() if limits is not None and not limits.empty else None

    def _after_answer(self, writer: RunWriter, node_id: str) -> None:
        if self.options.on_start:
            self.options.on_start(writer.bundle)
        self._loop(self._apply(self._route_answered(node_id)))

    def _after_top_up(self, writer: RunWriter, node_id: str) -> None:
        """A budget top-up's continuation runs the node whose request was refused, from its start."""
        if self.options.on_start:
            self.options.on_start(writer.bundle)
        self._loop(node_id)

    def _route_answered(self, node_id: str) -> Decision:
        """Route from a carried checkpoint: its (answered) output is what the edges after it see."""
        writer = self.writer
        assert writer is not None
        output = self._resolve(writer.state.outputs.get(node_id))
        return decide(self.graph, writer.state, node_id, "ok", output, None)

    def _adopt(self, writer: RunWriter, prefix: Prefix) -> None:
        """Copy the adopted prefix (artifacts first, then conversation entries, then events) and continue."""
        assert self.session is not None
        writer.store.copy_artifacts(prefix.parent)
        for entry in prefix.entries:
            self.session.adopt(entry)
        self.session.sync()
        # The adopted steps already ran in the parent: listeners (the live display) see the fork continue, not
        # a replay of every copied line.
        listeners, writer.listeners[:] = list(writer.listeners), []
        try:
            events = [writer.adopt(event) for event in prefix.events]
        finally:
            writer.listeners[:] = listeners
        if self.options.on_start:
            self.options.on_start(writer.bundle)
        self._continue(writer, events, 0)

    def _begin(self, writer: RunWriter) -> None:
        if self.options.on_start:
            self.options.on_start(writer.bundle)
        self._loop(self._apply(Decision(target=self.workflow.definition.start_at)))

    def _begin_or_follow(self, writer: RunWriter, events: list[TraceEvent]) -> None:
        """A run whose trace holds only ``run_started``: begin it (a continuation follows its answered edge)."""
        continued = events[0].payload.get("continuedFrom")
        if isinstance(continued, dict):
            self._after_answer(writer, str(continued.get("nodeId")))
        else:
            self._begin(writer)

    def resume(self, run_id: str, lease: Lease | None = None) -> RunState:
        """Continue an interrupted run from its trace (``persistence.md`` §8), under ``lease`` when given."""
        store = self.stores.open(run_id)
        bundle = store.bundle
        self.claim.hold(lease)
        store = self.claim.acquire(store)
        state: RunState | None = None
        try:
            manifest = Manifest.model_validate(bundle.read_manifest())
            read = store.read_trace()
            state = fold(read.events)
            if not read.events:
                raise ResumeRefused(
                    f"Run {run_id} never started (its trace is empty); start it again with piw run."
                )
            if state.status in TERMINAL_STATUSES:
                raise RunFinished(f"Run {run_id} already ended ({state.status}); nothing to resume.")
            self._check_source(state, bundle)
            store.fence()
            damage = artifact_damage(bundle.path, state)  # never rerun on top of an output that is not there
            if damage is not None:
                raise ArtifactDamaged(
                    f"Run {run_id}: {damage.notice} Restore the file from a backup (nothing was written), or "
                    "start the run again.",
                    damage.file,
                )
            truncated = self._repair_tail(store, read)
        except BaseException as exc:
            store.release()
            self.claim.settle_refusal(exc, state)
            raise
        if not self.options.session_visible:
            # A host acts for the run's recorded origin session (or none): it never becomes one itself.
            self.options.origin_session = state.origin_session
        writer = self._open_writer(store, state, manifest)
        self.claim.running()
        if not bundle.manifest_path.is_file():
            store.fence()
            bundle.write_manifest(manifest)  # it was lost and recovered from the trace: a cache, rebuilt
        return self._guarded(lambda: self._continue(writer, read.events, truncated))

    # ---- claims, pause, cancel, park ----------------------------------------------------------------------

    def request_park(self) -> None:
        """Holder shutdown (a host stopping): abort the active node without a terminal event and park the run."""
        self._park_requested = True
        self._abort_active()

    def _abort_active(self) -> None:
        """Cancel requested or claim lost: abort the active node (its model request closed, its shell group
        killed); the loop then records the cancellation, or writes nothing more after a lost claim."""
        active = self.active
        if active is not None:
            active.cancel.set()

    def _stop_at_boundary(self, after_effect: bool = False) -> bool:
        """Between steps: a requested cancel ends the run; a requested pause writes ``run_paused`` and parks.

        The flags are read here, not only by the lease's poll: after a step with effects always (one row read
        beside that step's fsync), between compute steps at most every few milliseconds. So a pause asked for
        while a step runs stops the run where that step ends."""
        writer = self.writer
        assert writer is not None
        if self._park_requested:
            raise _Parked
        self.claim.current_flags(always=after_effect)
        if self.claim.cancel_requested:
            self._write_cancelled()
            return True
        if self.claim.pause_requested:
            writer.append("run", "run_paused", {}, sync=True)
            self.stopped = "paused"
            return True
        return False

    def _write_cancelled(self) -> None:
        assert self.writer is not None
        self.writer.append(
            "run", "run_cancelled", {"status": "cancelled", "error": CANCELLED_ERROR}, sync=True
        )

    def _origin_id(self) -> str | None:
        return (self.options.origin_session or {}).get("id")

    def _is_assistant(self, node_id: str) -> bool:
        gnode = self.graph.nodes.get(node_id)
        return (
            gnode is not None and isinstance(gnode.node, AgentNode) and gnode.node.completion == "assistant"
        )

    def _needs_origin_session(self, node_id: str) -> bool:
        """A detached run reaching an assistant node that has an origin session to show the reply in."""
        return (
            not self.options.session_visible and self._is_assistant(node_id) and self._origin_id() is not None
        )

    # ---- resume helpers ---------------------------------------------------------------------------------

    def _check_source(self, state: RunState, bundle: Bundle) -> None:
        check_source(self.workflow, state)

    def _repair_tail(self, store: RunStore, read: TraceRead) -> int:
        return store.repair_tail(read)

    def _continue(self, writer: RunWriter, events: list[TraceEvent], truncated: int) -> None:
        state = writer.state
        if not truncated and len(events) == 1 and events[0].type == "run_started" and not state.steps:
            # Queued and never begun (``piw run --detach``): the host starts it; there is nothing to resume.
            self._begin_or_follow(writer, events)
            return
        if state.paused and state.current is None:
            writer.append("run", "run_resumed", {}, sync=True)  # after a pause: empty (§4)
            decision = self._decision_after(events, state)
            if decision.terminal is not None and not decision.exits:
                writer.append("run", decision.terminal[0], decision.terminal[1], sync=True)
                return
            next_node = self._apply(decision)
            if next_node is not None:
                self._loop(next_node)
            return
        if state.current is not None and self._needs_origin_session(state.current.node_id):
            self.stopped = "needs-origin-session"  # the origin session's 'piw resume' recovers it visibly
            return
        resumed: dict[str, Any] = {"replayedSteps": len(state.steps)}
        if truncated:
            resumed["truncatedBytes"] = truncated
        current = state.current
        group = current.process_group if current is not None else None
        # The dead holder's command may still run: stop it before its node reruns (process_groups).
        if group and stop_group(group):
            resumed["killedProcessGroup"] = {"pid": group.get("pid"), "pgid": group.get("pgid")}
        if current is not None:
            if self._can_reattach(current.node_type, current.node_id, current.attempt_id):
                resumed.update(resumeAt=current.node_id, reattachedAttemptId=current.attempt_id)
                writer.append("run", "run_resumed", resumed, sync=True)
                self._loop(current.node_id, reattach=current.attempt_id)
                return
            resumed.update(resumeAt=current.node_id, abandonedAttemptId=current.attempt_id)
            writer.append("run", "run_resumed", resumed, sync=True)
            self._loop(current.node_id)
            return
        decision = self._decision_after(events, state)
        if decision.terminal is not None and not decision.exits:
            if truncated:
                # Only the terminal event is owed, but the repair must still be reported (persistence.md §5),
                # e.g. when the cut was inside the terminal line itself.
                writer.append("run", "run_resumed", resumed, sync=True)
            writer.append("run", decision.terminal[0], decision.terminal[1], sync=True)
            return
        resumed["resumeAt"] = self._peek_target(decision)
        writer.append("run", "run_resumed", resumed, sync=True)
        next_node = self._apply(decision)
        if next_node is not None:
            self._loop(next_node)

    def _decision_after(self, events: list[TraceEvent], state: RunState) -> Decision:
        for event in reversed(events):
            if event.type in NODE_TERMINAL_TYPES and event.node_id:
                step = state.results[event.node_id]
                return self._route_after(step.node_id, step.outcome, step.output, step.error)
            if event.type == "include_exited":
                mount_path = "/".join(event.payload.get("mountPath", []))
                output = event.payload.get("output")  # wire form: _route_after resolves it exactly once
                return self._route_after(mount_path, "ok", output, None, exit_name=event.payload.get("exit"))
            if event.type == "include_entered":
                mount = self.graph.mounts["/".join(event.payload.get("mountPath", []))]
                return Decision(target=f"{mount.path}/{mount.definition.start_at}")
            if event.type == "run_started" and isinstance(event.payload.get("continuedFrom"), dict):
                # a continuation that crashed before its first step: follow the answered checkpoint's edge
                continued = event.payload["continuedFrom"]
                if continued.get("resumeAt"):
                    return Decision(target=str(continued["resumeAt"]))  # a budget top-up: the blocked node
                return self._route_answered(str(continued.get("nodeId")))
        return Decision(target=self.workflow.definition.start_at)

    def _peek_target(self, decision: Decision) -> str | None:
        target = decision.target
        while target is not None and target in self.graph.mounts:
            target = self.graph.mounts[target].start
        return target

    # ---- the loop -----------------------------------------------------------------------------------------

    def _open_writer(self, store: RunStore, state: RunState, manifest: Manifest) -> RunWriter:
        index = RunIndex(self.home) if self.claim.lease is not None else None
        writer = RunWriter(store, state, manifest, index=index)
        writer.listeners.extend(self.options.listeners)
        self.writer = writer
        self.session = store.open_session()
        self.publisher = UpdatePublisher(writer)
        self.budget = BudgetGate(writer)
        return writer

    def _guarded(self, body: Callable[[], None]) -> RunState:
        writer = self.writer
        assert writer is not None and self.session is not None
        error: BaseException | None = None
        try:
            with self._interrupts_cancel_the_active_attempt():
                body()
        except _Parked:
            self.stopped = "shutdown"
        except KeyboardInterrupt:
            if self.active is not None:
                self.active.cancel.set()
                self.active.active = False
            self.stopped = "interrupted"
            raise RunInterrupted(
                f"Run {writer.bundle.run_id} was interrupted and parked; continue it with "
                f"'piw resume {writer.bundle.run_id}'."
            ) from None
        except Exception as exc:
            if self.active is not None:
                self.active.cancel.set()
            storage = storage_error(exc, self.home, writer.bundle.run_id)
            error = storage or exc
            if storage is None:
                raise
            # A full disk (or a home that turned read-only) mid-run: nothing more can be written, so the run
            # is parked; the torn tail, if any, is repaired by the resume.
            raise storage from None
        except BaseException as exc:
            if self.active is not None:
                self.active.cancel.set()
            error = exc
            raise
        finally:
            writer.close()
            self.session.close()
            writer.store.release()
            self.claim.settle(writer.state, self.stopped, error)
        return writer.state

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
            if self.active is not None:
                self.active.cancel.set()
            raise KeyboardInterrupt

        previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _can_reattach(self, node_type: str, node_id: str, attempt_id: str) -> bool:
        """An in-progress agent attempt whose step prompt is in the conversation keeps its id (§8 step 5)."""
        check = getattr(self.executors["agent"], "can_reattach", None)
        writer = self.writer
        assert writer is not None and self.session is not None
        return node_type == "agent" and check is not None and check(self.session, writer.bundle.run_id, node_id,
                                                                     attempt_id)  # fmt: skip

    def _loop(self, node_id: str | None, reattach: str | None = None) -> None:
        writer = self.writer
        assert writer is not None
        after_effect = False  # whether the step that just ended had effects (was not a pure compute step)
        while node_id is not None:
            if self._stop_at_boundary(after_effect):
                return
            if self._needs_origin_session(node_id):
                self.stopped = "needs-origin-session"  # parked before node_started: no attempt, no request
                return
            state = writer.state
            if state.steps_taken >= state.max_steps:
                message = (
                    f"Run stopped before {node_id}: it reached max_steps ({state.max_steps}). Raise max_steps in "
                    "define_workflow if the loop is intended."
                )
                writer.append("run", "run_failed", {"status": "failed", "error": message}, sync=True)
                return
            gnode = self.graph.nodes[node_id]
            after_effect = not isinstance(gnode.node, ComputeNode)
            try:
                outcome = self._execute(node_id, reattach)
            except _BudgetStopped:
                assert self.budget is not None and self.budget.stop is not None
                payload = {"status": "waiting", "waitingOn": BUDGET_WAIT, "finalOutput": self.budget.stop}
                writer.append("run", "run_waiting", payload, sync=True)
                return
            reattach = None
            if self.claim.cancel_requested:
                self._write_cancelled()  # a cancelled node never routes on (a $result switch included)
                return
            if isinstance(gnode.node, CheckpointNode) and outcome.outcome == "ok":
                payload = {"status": "waiting", "waitingOn": node_id, "finalOutput": outcome.output}
                writer.append("run", "run_waiting", payload, sync=True)
                return
            # Route on the output as committed (wire form, resolved once in _route_after), never on the raw
            # value: user data with an "$artifact" key must not be read as an artifact ref.
            committed = writer.state.results.get(node_id)
            output = committed.output if committed is not None else None
            decision = self._route_after(node_id, outcome.outcome, output, outcome.error)
            node_id = self._apply(decision)

    def _route_after(
        self, node_id: str, outcome: str, output: Any, error: str | None, exit_name: str | None = None
    ) -> Decision:
        writer = self.writer
        assert writer is not None
        gnode = self.graph.nodes.get(node_id)
        if gnode is not None and isinstance(gnode.node, CheckpointNode) and outcome == "ok":
            return Decision(
                terminal=("run_waiting", {"status": "waiting", "waitingOn": node_id, "finalOutput": output})
            )
        return decide(self.graph, writer.state, node_id, outcome, self._resolve(output), error, exit_name)

    def _apply(self, decision: Decision) -> str | None:
        """Record include exits/entries and the terminal event; return the next node to run, if any."""
        writer = self.writer
        assert writer is not None
        for exit_ in decision.exits:
            mount = exit_.mount
            payload = {
                "mountPath": mount.path.split("/"),
                "workflowName": mount.definition.name,
                "invocation": next_invocation(writer.state, mount.path) - 1,
                "exit": exit_.name,
                "output": exit_.output,
            }
            writer.append("run", "include_exited", payload)
        if decision.terminal is not None:
            writer.append("run", decision.terminal[0], decision.terminal[1], sync=True)
            return None
        target = decision.target
        while target is not None and target in self.graph.mounts:
            mount = self.graph.mounts[target]
            ctx = self._context(mount.path, "")
            try:
                raw = evaluate(mount.input, ctx) if mount.input is not None else None
                child_input = prepare_input(mount.definition, raw)
            except Exception as exc:
                # The include's input is author code: a failure ends the run, never the process.
                reason = str(exc) if isinstance(exc, PiwError) else describe_exception(exc)
                error = f"Include {mount.path} could not start: {reason}"
                writer.append("run", "run_failed", {"status": "failed", "error": error}, sync=True)
                return None
            payload = {
                "mountPath": mount.path.split("/"),
                "workflowName": mount.definition.name,
                "invocation": next_invocation(writer.state, mount.path),
                "input": child_input,
            }
            writer.append("run", "include_entered", payload)
            target = f"{mount.path}/{mount.definition.start_at}"
        return target

    def _execute(self, node_id: str, reattach: str | None = None) -> NodeOutcome:
        writer = self.writer
        assert writer is not None and self.session is not None
        gnode = self.graph.nodes[node_id]
        node = gnode.node
        attempt_id = reattach or uuid.uuid4().hex
        attempt_holder: list[Attempt] = []
        ctx = self._context(node_id, attempt_id, attempt_holder)
        timeout_s: float | None = None
        timeout_error: str | None = None
        if isinstance(node, AgentNode | ActionNode):
            try:
                timeout_s = _timeout_value(evaluate(node.timeout_s, ctx))
            except Exception as exc:  # author code: the attempt fails, the run goes on routing
                timeout_error = f"timeout_s of {node_id} failed: {describe_exception(exc)}"
        started: dict[str, Any] = {"nodeType": node.node_type}
        detail = getattr(node, "status_detail", None)
        if detail:
            started["statusDetail"] = detail
        if timeout_s is not None:
            started["timeoutMs"] = int(timeout_s * 1000)
        if reattach is None:
            writer.append("node", "node_started", started, node_id=node_id, attempt_id=attempt_id)
        attempt = Attempt(
            gnode=gnode,
            attempt_id=attempt_id,
            ctx=ctx,
            writer=writer,
            session=self.session,
            timeout_s=timeout_s,
            cancel=ctx.cancelled if isinstance(ctx, ActionContext) else threading.Event(),
            origin_session_id=self._origin_id(),
            reattached=reattach is not None,
            publisher=self.publisher,
            budget=self.budget,
        )
        attempt_holder.append(attempt)
        self.active = attempt
        if self.claim.cancel_requested or self.claim.lost or self._park_requested:
            attempt.cancel.set()  # requested just before the attempt became active
        if not self.options.session_visible and self._is_assistant(node_id) and self._origin_id() is None:
            timeout_error = NO_ORIGIN_SESSION  # fails before prompting: no request, routes like any failure
        try:
            if isinstance(node, ActionNode):
                executor: Executor = self._shell() if node.shell is not None else self._function
            else:
                executor = self.executors[node.node_type]
            outcome = NodeOutcome.failed(timeout_error) if timeout_error else executor.execute(attempt)
        except WorkflowCodeExit as exc:
            # Workflow code is called through call_user, which turns its BaseExceptions (sys.exit(), ...) into
            # this; one that no executor handled still fails the node instead of ending piw with the run left
            # ``running``. Other BaseExceptions are piw's own unwinding (Ctrl-C, SIGTERM) and pass.
            outcome = NodeOutcome.failed(describe_exception(exc))
        finally:
            attempt.active = False
            self.active = None
        if self._park_requested:
            raise _Parked  # aborted for a park: no terminal event, the node reruns on resume (§8 step 5)
        if self.budget is not None and self.budget.stop is not None:
            # The refused request was never sent: the attempt stays without a terminal event, so a top-up's
            # continuation runs the node again from its start.
            raise _BudgetStopped
        payload: dict[str, Any] = {"outcome": outcome.outcome, "durationMs": attempt.elapsed_ms()}
        if outcome.outcome == "ok":
            payload["output"] = outcome.output
        else:
            payload["error"] = outcome.error or f"Node {node_id} {outcome.outcome}."
            exception = outcome.exception
            if exception is not None:
                payload["error"] = redact(payload["error"])
                outcome = dataclasses.replace(outcome, error=payload["error"])  # the run's error routes on it
                frames = workflow_traceback(exception, self._workflow_files())
                if frames:
                    payload["traceback"] = frames
        for key, value in (("conversation", outcome.conversation), ("action", outcome.action),
                           ("usage", outcome.usage)):  # fmt: skip
            if value is not None:
                payload[key] = value
        kind = "node_finished" if outcome.outcome == "ok" else "node_failed"
        writer.append(
            "node", kind, payload, node_id=node_id, attempt_id=attempt_id, sync=node.node_type != "compute"
        )
        return outcome

    def _workflow_files(self) -> frozenset[str]:
        """The run's workflow files (main and included): the frames a failure's traceback keeps."""
        graph = self.workflow.graph
        return workflow_files(
            [self.workflow.path, self.workflow.definition.source_file]
            + [mount.definition.source_file for mount in graph.mounts.values()]
        )

    # ---- contexts -----------------------------------------------------------------------------------------

    def _resolve(self, value: Any) -> Any:
        assert self.writer is not None
        return self.writer.bundle.resolve(value)

    def _context(self, node_id: str, attempt_id: str, holder: list[Attempt] | None = None) -> NodeContext:
        writer = self.writer
        assert writer is not None
        state = writer.state
        mount = self.graph.mount_of(node_id)
        if mount is None:
            raw_input = state.input
            outputs = {k: v for k, v in state.outputs.items() if "/" not in k}
            results = {k: result_to_json(v) for k, v in state.results.items() if "/" not in k}
        else:
            entry = state.mounts.get(mount.path, {})
            raw_input = entry.get("input")
            outputs, results = _scoped(state, mount.path, int(entry.get("stepIndex", 0)))
        common: dict[str, Any] = {
            "input": self._resolve(raw_input),
            "outputs": LazyOutputs(outputs, self._resolve),
            "results": results,
            "run_id": writer.bundle.run_id,
            "node_id": node_id,
            "attempt_id": attempt_id,
            "workflow_name": state.workflow_name,
            "clock": self.options.clock,
        }
        gnode = self.graph.nodes.get(node_id)
        if gnode is not None and isinstance(gnode.node, ActionNode):
            holder_ref = holder if holder is not None else []

            def publish(type_: str, key: str, data: Any) -> Any:
                assert self.publisher is not None
                attempt = holder_ref[0] if holder_ref else None
                return self.publisher.publish(
                    node_id,
                    attempt_id,
                    {"type": type_, "key": key, "data": data},
                    is_active=attempt.is_live if attempt else None,
                )

            def run_agent(prompt: str, **kwargs: Any) -> Any:
                attempt = holder_ref[0] if holder_ref else None
                make_runner = getattr(self.executors["agent"], "child_runner", None)
                if attempt is None or make_runner is None:
                    raise RuntimeError("ctx.run_agent needs a model provider; run with --provider NAME.")
                return attempt.child_runner(make_runner)(prompt, **kwargs)

            extra: dict[str, Any] = {"waiter": self.options.waiter} if self.options.waiter else {}
            return ActionContext(**common, publisher=publish, agent_runner=run_agent, **extra)
        return NodeContext(**common)

    def _shell(self) -> Executor:
        """The shell executor, made (and its line framing and update envelope imported) for a run's first shell
        step: a run without one never imports them."""
        if self._shell_executor is None:
            from piw.run.executors.shell import ShellActionExecutor

            self._shell_executor = ShellActionExecutor(self._publish_shell_update)
        return self._shell_executor

    def _publish_shell_update(self, attempt: Attempt, item: Any) -> None:
        assert self.publisher is not None
        raw = item.model_dump() if hasattr(item, "model_dump") else item
        self.publisher.publish(
            attempt.node_id, attempt.attempt_id, raw, is_active=attempt.is_live, wait_for_token=attempt.cancel
        )


def check_source(loaded: LoadedWorkflow, state: RunState) -> None:
    """``SourceChanged`` unless the loaded workflow is the one the run started from (file hash or built-in
    revision, every mounted child, the definition digest): completed steps replay only against that."""
    same = (
        state.workflow_source == loaded.source
        and list(state.workflow_sources or []) == list(loaded.sources or [])
        and state.definition_digest == loaded.digest
    )
    if not same:
        where = _source_label(state.workflow_source, loaded.source, state.workflow_name)
        raise SourceChanged(
            f"Workflow source changed since run {state.run_id} started ({where}). Completed steps cannot be "
            f"replayed against a different definition. Cancel it with 'piw cancel {state.run_id}' and start "
            f"again with 'piw run {state.workflow_name}'."
        )


def _source_label(recorded: dict[str, Any], installed: dict[str, Any], name: str) -> str:
    """The parenthesis of ``SourceChanged``: a file's path, or a built-in's recorded and installed revisions."""
    if recorded.get("kind") == "builtin":
        now = installed.get("revision") if installed.get("kind") == "builtin" else None
        return (
            f"builtin {recorded.get('id')} revision {recorded.get('revision')}, "
            f"installed revision {now if now is not None else 'none'}"
        )
    return str(recorded.get("path") or recorded.get("id") or name)


def _timeout_value(value: Any) -> float | None:
    """A node deadline in seconds from a ``timeout_s`` function: ``None`` or a finite number > 0."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"timeout_s must be None or a finite number > 0, got {value!r}")
    return float(value)


def _scoped(state: RunState, mount_path: str, start: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Outputs and results of the current invocation of a mount, keyed by local id."""
    prefix = mount_path + "/"
    outputs: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for step in state.steps[start:]:
        rest = step.node_id[len(prefix) :] if step.node_id.startswith(prefix) else None
        if rest is None or "/" in rest:
            continue
        results[rest] = result_to_json(step)
        if step.outcome == "ok":
            outputs[rest] = step.output
        else:
            outputs.pop(rest, None)
    for key, value in state.outputs.items():
        rest = key[len(prefix) :] if key.startswith(prefix) else None
        if (
            rest
            and "/" not in rest
            and key in state.mounts
            and int(state.mounts[key].get("stepIndex", 0)) >= start
        ):
            outputs[rest] = value
    return outputs, results
