"""The engine: runs a flat graph one node at a time, committing every step to the trace first.

State changes only by appending an event and folding it (``RunWriter.append``); routing, resume and the
views all read the same ``RunState``. Resume continues from the trace alone (``persistence.md`` §8).
"""

from __future__ import annotations

import contextlib
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

from piw.errors import ClaimLost, PiwError, ResumeRefused, RunFinished, RunLocked, SourceChanged, TraceCorrupt
from piw.run.executors import Attempt, Executor, NodeOutcome, describe_exception, evaluate
from piw.run.executors.checkpoint import CheckpointExecutor
from piw.run.executors.compute import ComputeExecutor
from piw.run.executors.function import FunctionActionExecutor
from piw.run.executors.notify import NotifyExecutor
from piw.run.executors.shell import ShellActionExecutor
from piw.run.takeover import Takeover, before_rerun
from piw.store.bundle import Bundle, WriterLock, create_bundle, discard_incomplete, new_run_id, open_bundle
from piw.store.index import RunIndex
from piw.store.lease import Lease
from piw.store.queue import RENEW_MS, FinalStatus
from piw.store.replay import TERMINAL_STATUSES, RunState, fold, result_to_json
from piw.store.session import SessionLog
from piw.store.trace import NODE_TERMINAL_TYPES, Durability, FileLayer, TraceEvent, truncate_tail
from piw.store.writer import Listener, RunWriter
from piw.updates.publishing import UpdatePublisher
from piw.wire import Manifest, now_iso
from piw.workflow.context import ActionContext, LazyOutputs, NodeContext
from piw.workflow.definition import ActionNode, AgentNode, CheckpointNode
from piw.workflow.loader import LoadedWorkflow, prepare_input, resolve_title
from piw.workflow.routing import Decision, decide, next_invocation


class RunInterrupted(PiwError):
    """The foreground run was interrupted (Ctrl-C or SIGTERM); it is parked and can be resumed."""

    exit_code = 130


NO_ORIGIN_SESSION = "Assistant completion requires an origin session."
"""The exact failure of an assistant node in a detached run that has no origin session (agent-steps §7)."""
CANCELLED_ERROR = "Cancelled with 'piw cancel'."
FINAL_QUEUE_STATUS: dict[str, FinalStatus] = {
    "completed": "done",
    "waiting": "done",
    "failed": "failed",
    "timed_out": "failed",
    "cancelled": "cancelled",
}
_PAUSED = "paused"
_QUEUED = "queued"
_SHUTDOWN = "shutdown"


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
    on_start: Callable[[Bundle], None] | None = None
    session_visible: bool = True
    """Foreground (``True``): this process shows assistant output. A detached host (``False``) never runs an
    assistant-completion node: it parks the run for its origin session, or fails the node without one."""


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
        self.writer: RunWriter | None = None
        self.session: SessionLog | None = None
        self.publisher: UpdatePublisher | None = None
        self.active: Attempt | None = None
        self.lease: Lease | None = None
        self.stopped: str | None = None
        self._park_requested = False
        """Why the loop stopped short of a terminal event: ``paused`` or a park reason."""
        self.executors: dict[str, Executor] = {
            "compute": ComputeExecutor(),
            "notify": NotifyExecutor(),
            "checkpoint": CheckpointExecutor(),
            "agent": self.options.agent_executor or _MissingAgentExecutor(),
        }
        self._function = FunctionActionExecutor()
        self._shell = ShellActionExecutor(self._publish_shell_update)

    # ---- public entry points ----------------------------------------------------------------------------

    def start(
        self,
        raw_input: Any,
        title: str | None = None,
        *,
        run_id: str | None = None,
        lease: Lease | None = None,
        begin: bool = True,
    ) -> RunState:
        """Start a new run; input and definition are validated before any bundle exists.

        With a ``lease`` (the claim on the run's queue row, ``run_id`` its id) every write is fenced by it and
        the claim is settled when the run stops: released final, or parked. ``begin=False`` (``piw run
        --detach``) stops after ``run_started`` and hands the row to the queue for a host.
        """
        definition = self.workflow.definition
        input_value = prepare_input(definition, raw_input)
        run_title = title if title is not None else resolve_title(definition, input_value)
        run_id = run_id or new_run_id(definition.name)
        manifest = Manifest(
            run_id=run_id,
            workflow_name=definition.name,
            run_title=run_title,
            workflow_source=self.workflow.source,
            workflow_sources=self.workflow.sources or None,
            definition_digest=self.workflow.digest,
            started_at=now_iso(),
        )
        bundle = create_bundle(self.home, run_id, self.workflow.snapshot, manifest)
        lock = self._acquire(bundle, lease)
        writer = self._open_writer(bundle, lock, RunState(), manifest)
        payload: dict[str, Any] = {
            "workflowName": definition.name,
            "runTitle": run_title,
            "input": input_value,
            "workflowSource": self.workflow.source,
            "workflowSources": self.workflow.sources or None,
            "definitionDigest": self.workflow.digest,
            "maxSteps": definition.max_steps,
            "originSession": self.options.origin_session,
        }
        try:
            writer.append(
                "run", "run_started", {k: v for k, v in payload.items() if v is not None}, sync=True
            )
        except BaseException:
            # Until run_started commits the bundle is incomplete: nothing started, so leave nothing behind.
            writer.close()
            assert self.session is not None
            self.session.close()
            lock.release()
            discard_incomplete(bundle)
            if lease is not None:
                lease.release("failed", "the run never started")
            raise
        if not begin:
            self.stopped = _QUEUED
            return self._guarded(lambda: None)
        self._running()
        return self._guarded(lambda: self._begin(writer))

    def _begin(self, writer: RunWriter) -> None:
        if self.options.on_start:
            self.options.on_start(writer.bundle)
        self._loop(self._apply(Decision(target=self.workflow.definition.start_at)))

    def resume(self, run_id: str, lease: Lease | None = None) -> RunState:
        """Continue an interrupted run from its trace (``persistence.md`` §8)."""
        bundle = open_bundle(self.home, run_id)
        lock = self._acquire(bundle, lease)
        state: RunState | None = None
        try:
            manifest = Manifest.model_validate(bundle.read_manifest())
            read = bundle.read_trace()
            state = fold(read.events)
            if not read.events:
                raise ResumeRefused(
                    f"Run {run_id} never started (its trace is empty); start it again with piw run."
                )
            if state.status in TERMINAL_STATUSES:
                raise RunFinished(f"Run {run_id} already ended ({state.status}); nothing to resume.")
            self._check_source(state, bundle)
            lock.fence()
            truncated = self._repair_tail(bundle, read.valid_bytes, read.torn_bytes)
            before_rerun(Takeover(bundle, state, lease.claim.taken_from if lease else None, "resume"))
        except BaseException as exc:
            lock.release()
            if lease is not None:
                self._settle_refusal(lease, exc, state)
            raise
        if not self.options.session_visible:
            # A host acts for the run's recorded origin session (or none): it never becomes one itself.
            self.options.origin_session = state.origin_session
        writer = self._open_writer(bundle, lock, state, manifest)
        self._running()
        return self._guarded(lambda: self._continue(writer, read.events, truncated))

    # ---- claims -------------------------------------------------------------------------------------------

    def _acquire(self, bundle: Bundle, lease: Lease | None) -> WriterLock:
        """Take the writer lock (fenced by ``lease``); a busy lock parks the claim for ``RENEW_MS``."""
        self.lease = lease
        if lease is not None:
            lease.on_lost = self._abort_active
            lease.on_cancel = self._abort_active
        try:
            return WriterLock(bundle, lease).acquire()
        except RunLocked:
            if lease is not None:
                lease.park(delay_ms=RENEW_MS)
            raise

    def request_park(self) -> None:
        """Holder shutdown (a host stopping): abort the active node without a terminal event and park the run."""
        self._park_requested = True
        self._abort_active()

    def _abort_active(self, *_: Any) -> None:
        """Cancel requested or claim lost: the active node is aborted (its model request closed, its shell
        group killed); the loop then records the cancellation, or writes nothing more after a lost claim."""
        active = self.active
        if active is not None:
            active.cancel.set()

    def _running(self) -> None:
        if self.lease is not None:
            self.lease.queue.mark_running(self.lease.claim)

    @staticmethod
    def _settle_refusal(lease: Lease, exc: BaseException, state: RunState | None) -> None:
        """A resume that refused before writing: say why on the queue row (§8 steps 1–3)."""
        if isinstance(exc, ClaimLost):
            lease.stop()
        elif isinstance(exc, RunFinished) and state is not None:
            lease.release(FINAL_QUEUE_STATUS.get(state.status, "done"))  # a crash after the terminal event
        elif isinstance(exc, SourceChanged):
            lease.park("source_changed", error=str(exc))
        elif isinstance(exc, TraceCorrupt):
            lease.park("trace_corrupt", error=str(exc))
        elif isinstance(exc, RunLocked):
            pass  # _acquire parked it already
        else:
            lease.park("interrupted", error=str(exc))

    def _settle_claim(self, state: RunState, error: BaseException | None) -> None:
        """Give the claim back when the loop stops: final status, paused, parked, or nothing once it is lost."""
        lease = self.lease
        if lease is None:
            return
        if lease.lost is not None:
            lease.stop()
            return
        try:
            if state.status in TERMINAL_STATUSES:
                lease.release(FINAL_QUEUE_STATUS[state.status])
            elif self.stopped == _PAUSED:
                lease.park()  # pause_requested stays set: claimers skip the row until 'piw resume'
            elif self.stopped == _QUEUED:
                lease.requeue()
            elif self.stopped == _SHUTDOWN:
                lease.park()  # holder shutdown: available to the next claimer at once
            elif self.stopped is not None:
                lease.park(self.stopped)  # type: ignore[arg-type]
            else:
                lease.park("interrupted", error=None if error is None else str(error) or type(error).__name__)
        except ClaimLost:
            lease.stop()

    # ---- resume helpers ---------------------------------------------------------------------------------

    def _check_source(self, state: RunState, bundle: Bundle) -> None:
        loaded = self.workflow
        same = (
            state.workflow_source == loaded.source
            and list(state.workflow_sources or []) == list(loaded.sources or [])
            and state.definition_digest == loaded.digest
        )
        if not same:
            where = (
                state.workflow_source.get("path") or state.workflow_source.get("id") or state.workflow_name
            )
            raise SourceChanged(
                f"Workflow source changed since run {state.run_id} started ({where}). Completed steps cannot be "
                f"replayed against a different definition. Cancel it with 'piw cancel {state.run_id}' and start "
                f"again with 'piw run {state.workflow_name}'."
            )

    def _repair_tail(self, bundle: Bundle, valid_bytes: int, torn_bytes: int) -> int:
        if torn_bytes <= 0:
            return 0
        return truncate_tail(bundle.trace_path, valid_bytes, self.options.files)

    def _continue(self, writer: RunWriter, events: list[TraceEvent], truncated: int) -> None:
        state = writer.state
        if not truncated and events[-1].type == "run_started":
            # Queued and never begun (``piw run --detach``): the host starts it; there is nothing to resume.
            self._begin(writer)
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
        resumed: dict[str, Any] = {"replayedSteps": len(state.steps)}
        if truncated:
            resumed["truncatedBytes"] = truncated
        current = state.current
        if current is not None and self._needs_origin_session(current.node_id):
            self.stopped = "needs-origin-session"  # the origin session's 'piw resume' recovers it visibly
            return
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
        return Decision(target=self.workflow.definition.start_at)

    def _peek_target(self, decision: Decision) -> str | None:
        target = decision.target
        while target is not None and target in self.graph.mounts:
            target = self.graph.mounts[target].start
        return target

    # ---- the loop -----------------------------------------------------------------------------------------

    def _open_writer(
        self, bundle: Bundle, lock: WriterLock, state: RunState, manifest: Manifest
    ) -> RunWriter:
        index = RunIndex(self.home) if self.lease is not None else None
        writer = RunWriter(
            bundle, lock, self.options.durability, state, manifest, self.options.files, index=index
        )
        writer.listeners.extend(self.options.listeners)
        self.writer = writer
        self.session = SessionLog(
            bundle.session_path, self.options.durability, self.options.files, fence=lock.fence
        )
        self.publisher = UpdatePublisher(writer)
        return writer

    def _guarded(self, body: Callable[[], None]) -> RunState:
        writer = self.writer
        assert writer is not None and self.session is not None
        error: BaseException | None = None
        try:
            with self._interrupts_cancel_the_active_attempt():
                body()
        except _Parked:
            self.stopped = _SHUTDOWN
        except KeyboardInterrupt:
            if self.active is not None:
                self.active.cancel.set()
                self.active.active = False
            self.stopped = "interrupted"
            raise RunInterrupted(
                f"Run {writer.bundle.run_id} was interrupted and parked; continue it with "
                f"'piw resume {writer.bundle.run_id}'."
            ) from None
        except BaseException as exc:
            if self.active is not None:
                self.active.cancel.set()
            error = exc
            raise
        finally:
            writer.close()
            self.session.close()
            writer.lock.release()
            self._settle_claim(writer.state, error)
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
        while node_id is not None:
            if self._park_requested:
                raise _Parked
            if self._stop_at_boundary():
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
            outcome = self._execute(node_id, reattach)
            reattach = None
            if self.lease is not None and self.lease.cancel_requested:
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

    def _stop_at_boundary(self) -> bool:
        """Between steps: a requested cancel ends the run, a requested pause writes ``run_paused`` and parks."""
        lease = self.lease
        writer = self.writer
        if lease is None or writer is None:
            return False
        if lease.cancel_requested:
            self._write_cancelled()
            return True
        if lease.pause_requested:
            writer.append("run", "run_paused", {}, sync=True)
            self.stopped = _PAUSED
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
        )
        attempt_holder.append(attempt)
        self.active = attempt
        if self.lease is not None and (self.lease.cancel_requested or self.lease.lost):
            attempt.cancel.set()  # requested just before the attempt became active
        if not self.options.session_visible and self._is_assistant(node_id) and self._origin_id() is None:
            timeout_error = NO_ORIGIN_SESSION  # fails before prompting: no request, routes like any failure
        try:
            if isinstance(node, ActionNode):
                executor: Executor = self._shell if node.shell is not None else self._function
            else:
                executor = self.executors[node.node_type]
            outcome = NodeOutcome.failed(timeout_error) if timeout_error else executor.execute(attempt)
        finally:
            attempt.active = False
            self.active = None
        if self._park_requested:
            raise _Parked  # aborted for a park: no terminal event, the node reruns on resume (§8 step 5)
        payload: dict[str, Any] = {"outcome": outcome.outcome, "durationMs": attempt.elapsed_ms()}
        if outcome.outcome == "ok":
            payload["output"] = outcome.output
        else:
            payload["error"] = outcome.error or f"Node {node_id} {outcome.outcome}."
        for key, value in (("conversation", outcome.conversation), ("action", outcome.action),
                           ("usage", outcome.usage)):  # fmt: skip
            if value is not None:
                payload[key] = value
        kind = "node_finished" if outcome.outcome == "ok" else "node_failed"
        writer.append(
            "node", kind, payload, node_id=node_id, attempt_id=attempt_id, sync=node.node_type != "compute"
        )
        return outcome

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

            return ActionContext(**common, publisher=publish, agent_runner=run_agent)
        return NodeContext(**common)

    def _publish_shell_update(self, attempt: Attempt, item: Any) -> None:
        assert self.publisher is not None
        raw = item.model_dump() if hasattr(item, "model_dump") else item
        self.publisher.publish(
            attempt.node_id, attempt.attempt_id, raw, is_active=attempt.is_live, wait_for_token=attempt.cancel
        )


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
