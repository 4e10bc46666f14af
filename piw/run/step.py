"""The step loop: one node at a time, each attempt committed to the trace before the run routes on.

An attempt is ``node_started``, the executor's work, then ``node_finished`` or ``node_failed``; between two
steps the loop reads the pause and cancel flags, counts ``max_steps`` and stops before an assistant node a
detached holder must not run. Routing reads the output as committed, so the state the next step sees is the
fold of the trace (``docs/design/persistence.md`` §3, §8).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import uuid
from typing import Any

from piw.errors import PiwError
from piw.lazy import Lazy
from piw.run.contexts import node_context
from piw.run.control import Parked, RunControl
from piw.run.executors import Attempt, Executor, NodeOutcome, describe_exception, evaluate
from piw.run.executors.function import FunctionActionExecutor
from piw.run.open_run import OpenRun
from piw.run.options import RunOptions
from piw.run.tracebacks import redact, workflow_files, workflow_traceback
from piw.workflow.budget import BUDGET_WAIT
from piw.workflow.context import ActionContext, NodeContext
from piw.workflow.definition import ActionNode, AgentNode, CheckpointNode, ComputeNode, Node
from piw.workflow.loader import LoadedWorkflow, prepare_input
from piw.workflow.routing import Decision, decide, next_invocation
from piw.workflow.user_code import WorkflowCodeExit

NO_ORIGIN_SESSION = "Assistant completion requires an origin session."
"""The exact failure of an assistant node in a detached run that has no origin session
(docs/design/agent-steps.md §7)."""
CANCELLED_ERROR = "Cancelled with 'piw cancel'."


class BudgetStopped(Exception):
    """Raised past an attempt whose model request the budget refused; the run then waits on its budget."""

    def __init__(self, stop: dict[str, Any]) -> None:
        super().__init__(stop.get("reason"))
        self.stop = stop
        """The ``finalOutput`` of the ``run_waiting`` the loop writes (``BudgetGate.stop``)."""


class StepLoop:
    """Runs the steps of one open run, from a node (or a routing decision) to where the run stops."""

    def __init__(
        self,
        workflow: LoadedWorkflow,
        options: RunOptions,
        control: RunControl,
        executors: dict[str, Executor],
        run: OpenRun,
    ) -> None:
        self.workflow = workflow
        self.graph = workflow.graph
        self.options = options
        self.control = control
        self.executors = executors
        self.run = run
        self._function = FunctionActionExecutor()
        self._shell = Lazy(self._make_shell)
        """The shell executor, made (and its line framing and update envelope imported) for a run's first shell
        step: a run without one never imports them."""

    # ---- starting -----------------------------------------------------------------------------------------

    def started(self) -> None:
        """Tell ``RunOptions.on_start`` the run's bundle is live (the CLI shows where to follow it)."""
        if self.options.on_start:
            self.options.on_start(self.run.bundle)

    def begin(self) -> None:
        self.started()
        self.loop(self.apply(Decision(target=self.workflow.definition.start_at)))

    def after_answer(self, node_id: str) -> None:
        self.started()
        self.loop(self.apply(self.route_answered(node_id)))

    def wait_for_confirmation(self, stop: dict[str, Any]) -> None:
        """A detached run over ``--confirm-above``: wait on the budget gate, before the first step, with the
        projection in the stop; ``piw answer RUN '{"confirm": true}'`` continues it at the entry."""
        self.started()
        stop = {**stop, "blockedNode": self.workflow.definition.start_at}
        payload = {"status": "waiting", "waitingOn": BUDGET_WAIT, "finalOutput": stop}
        self.run.writer.append("run", "run_waiting", payload, sync=True)

    def after_top_up(self, node_id: str) -> None:
        """A budget top-up's continuation runs the node whose request was refused, from its start."""
        self.started()
        self.loop(node_id)

    # ---- the loop -----------------------------------------------------------------------------------------

    def loop(self, node_id: str | None, reattach: str | None = None) -> None:
        writer = self.run.writer
        after_effect = False  # whether the step that just ended had effects (was not a pure compute step)
        while node_id is not None:
            if self.stop_at_boundary(after_effect):
                return
            if self.needs_origin_session(node_id):
                self.control.stopped = (
                    "needs-origin-session"  # parked before node_started: no attempt, no request
                )
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
                outcome = self.execute(node_id, reattach)
            except BudgetStopped as stopped:
                payload = {"status": "waiting", "waitingOn": BUDGET_WAIT, "finalOutput": stopped.stop}
                writer.append("run", "run_waiting", payload, sync=True)
                return
            reattach = None
            if self.control.claim.cancel_requested:
                self.write_cancelled()  # a cancelled node never routes on (a $result switch included)
                return
            if isinstance(gnode.node, CheckpointNode) and outcome.outcome == "ok":
                payload = {"status": "waiting", "waitingOn": node_id, "finalOutput": outcome.output}
                writer.append("run", "run_waiting", payload, sync=True)
                return
            # Route on the output as committed (wire form, resolved once in route_after), never on the raw
            # value: user data with an "$artifact" key must not be read as an artifact ref.
            committed = writer.state.results.get(node_id)
            output = committed.output if committed is not None else None
            decision = self.route_after(node_id, outcome.outcome, output, outcome.error)
            node_id = self.apply(decision)

    def stop_at_boundary(self, after_effect: bool = False) -> bool:
        """Between steps: a requested cancel ends the run; a requested pause writes ``run_paused`` and parks.

        The flags are read here, not only by the lease's poll: after a step with effects always (one row read
        beside that step's fsync), between compute steps at most every few milliseconds. So a pause asked for
        while a step runs stops the run where that step ends."""
        control = self.control
        if control.interrupted:
            raise KeyboardInterrupt  # its own was swallowed (RunControl.interrupted)
        if control.park_requested:
            raise Parked
        control.claim.current_flags(always=after_effect)
        if control.claim.cancel_requested:
            self.write_cancelled()
            return True
        if control.claim.pause_requested:
            self.run.writer.append("run", "run_paused", {}, sync=True)
            control.stopped = "paused"
            return True
        return False

    def write_cancelled(self) -> None:
        self.run.writer.append(
            "run", "run_cancelled", {"status": "cancelled", "error": CANCELLED_ERROR}, sync=True
        )

    # ---- origin sessions ----------------------------------------------------------------------------------

    def origin_id(self) -> str | None:
        return (self.options.origin_session or {}).get("id")

    def is_assistant(self, node_id: str) -> bool:
        gnode = self.graph.nodes.get(node_id)
        return (
            gnode is not None and isinstance(gnode.node, AgentNode) and gnode.node.completion == "assistant"
        )

    def needs_origin_session(self, node_id: str) -> bool:
        """A detached run reaching an assistant node that has an origin session to show the reply in."""
        return (
            not self.options.session_visible and self.is_assistant(node_id) and self.origin_id() is not None
        )

    # ---- routing ------------------------------------------------------------------------------------------

    def route_after(
        self, node_id: str, outcome: str, output: Any, error: str | None, exit_name: str | None = None
    ) -> Decision:
        gnode = self.graph.nodes.get(node_id)
        if gnode is not None and isinstance(gnode.node, CheckpointNode) and outcome == "ok":
            return Decision(
                terminal=("run_waiting", {"status": "waiting", "waitingOn": node_id, "finalOutput": output})
            )
        return decide(
            self.graph, self.run.state, node_id, outcome, self.run.resolve(output), error, exit_name
        )

    def route_answered(self, node_id: str) -> Decision:
        """Route from a carried checkpoint: its (answered) output is what the edges after it see."""
        state = self.run.state
        output = self.run.resolve(state.outputs.get(node_id))
        return decide(self.graph, state, node_id, "ok", output, None)

    def apply(self, decision: Decision) -> str | None:
        """Record include exits/entries and the terminal event; return the next node to run, if any."""
        writer = self.run.writer
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
            ctx = self.context(mount.path, "")
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

    # ---- one attempt --------------------------------------------------------------------------------------

    def execute(self, node_id: str, reattach: str | None = None) -> NodeOutcome:
        """Run one attempt of ``node_id`` and commit its terminal event (``reattach``: resume that attempt)."""
        run = self.run
        gnode = self.graph.nodes[node_id]
        node = gnode.node
        attempt_id = reattach or uuid.uuid4().hex
        holder: list[Attempt] = []
        ctx = self.context(node_id, attempt_id, holder)
        timeout_s, failure = _deadline(node, node_id, ctx)
        if reattach is None:
            started = _started_payload(node, timeout_s)
            run.writer.append("node", "node_started", started, node_id=node_id, attempt_id=attempt_id)
        attempt = Attempt(
            gnode=gnode,
            attempt_id=attempt_id,
            ctx=ctx,
            writer=run.writer,
            session=run.session,
            timeout_s=timeout_s,
            cancel=ctx.cancelled if isinstance(ctx, ActionContext) else threading.Event(),
            origin_session_id=self.origin_id(),
            reattached=reattach is not None,
            publisher=run.publisher,
            budget=run.budget,
        )
        holder.append(attempt)
        self.control.active = attempt
        if self.control.halted:
            attempt.cancel.set()  # requested just before the attempt became active
        if not self.options.session_visible and self.is_assistant(node_id) and self.origin_id() is None:
            failure = NO_ORIGIN_SESSION  # fails before prompting: no request, routes like any failure
        outcome = self._outcome(attempt, node, failure)
        if self.control.interrupted:
            raise KeyboardInterrupt  # aborted by Ctrl-C or SIGTERM whose own exception was swallowed
        if self.control.park_requested:
            raise Parked  # aborted for a park: no terminal event, the node reruns on resume (§8 step 5)
        stop = run.budget.stop
        if stop is not None:
            # The refused request was never sent: the attempt stays without a terminal event, so a top-up's
            # continuation runs the node again from its start.
            raise BudgetStopped(stop)
        return self._commit(attempt, node, outcome)

    def _outcome(self, attempt: Attempt, node: Node, failure: str | None) -> NodeOutcome:
        """What the node's executor reports, or ``failure`` without running it."""
        try:
            if isinstance(node, ActionNode):
                executor: Executor = self._shell.get() if node.shell is not None else self._function
            else:
                executor = self.executors[node.node_type]
            return NodeOutcome.failed(failure) if failure else executor.execute(attempt)
        except WorkflowCodeExit as exc:
            # Workflow code is called through call_user, which turns its BaseExceptions (sys.exit(), ...) into
            # this; one that no executor handled still fails the node instead of ending piw with the run left
            # ``running``. Other BaseExceptions are piw's own unwinding (Ctrl-C, SIGTERM) and pass.
            return NodeOutcome.failed(describe_exception(exc))
        finally:
            attempt.active = False
            self.control.active = None

    def _commit(self, attempt: Attempt, node: Node, outcome: NodeOutcome) -> NodeOutcome:
        """Append the attempt's ``node_finished``/``node_failed``; the outcome routes on its (redacted) error."""
        node_id = attempt.node_id
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
        for key, value in (
            ("conversation", outcome.conversation),
            ("action", outcome.action),
            ("usage", outcome.usage),
        ):
            if value is not None:
                payload[key] = value
        kind = "node_finished" if outcome.outcome == "ok" else "node_failed"
        self.run.writer.append(
            "node",
            kind,
            payload,
            node_id=node_id,
            attempt_id=attempt.attempt_id,
            sync=node.node_type != "compute",
        )
        return outcome

    def _workflow_files(self) -> frozenset[str]:
        """The run's workflow files (main and included): the frames a failure's traceback keeps."""
        graph = self.workflow.graph
        return workflow_files(
            [self.workflow.path, self.workflow.definition.source_file]
            + [mount.definition.source_file for mount in graph.mounts.values()]
        )

    def context(self, node_id: str, attempt_id: str, holder: list[Attempt] | None = None) -> NodeContext:
        return node_context(
            self.run, self.graph, self.options, self.executors["agent"], node_id, attempt_id, holder
        )

    def _make_shell(self) -> Executor:
        from piw.run.executors.shell import ShellActionExecutor

        return ShellActionExecutor(self._publish_shell_update)

    def _publish_shell_update(self, attempt: Attempt, item: Any) -> None:
        raw = item.model_dump() if hasattr(item, "model_dump") else item
        self.run.publisher.publish(
            attempt.node_id, attempt.attempt_id, raw, is_active=attempt.is_live, wait_for_token=attempt.cancel
        )


def _deadline(node: Node, node_id: str, ctx: NodeContext) -> tuple[float | None, str | None]:
    """The attempt's deadline in seconds, or the failure of its ``timeout_s`` function (author code: the attempt
    fails and the run goes on routing)."""
    if not isinstance(node, AgentNode | ActionNode):
        return None, None
    try:
        return _timeout_value(evaluate(node.timeout_s, ctx)), None
    except Exception as exc:
        return None, f"timeout_s of {node_id} failed: {describe_exception(exc)}"


def _started_payload(node: Node, timeout_s: float | None) -> dict[str, Any]:
    started: dict[str, Any] = {"nodeType": node.node_type}
    detail = getattr(node, "status_detail", None)
    if detail:
        started["statusDetail"] = detail
    if timeout_s is not None:
        started["timeoutMs"] = int(timeout_s * 1000)
    return started


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
