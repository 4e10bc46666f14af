"""The terminating ``workflow`` tool: submissions, updates and status, gated in code (``agent-steps.md`` §3).

The gate is open only while the active step is a submit-mode step; prompt text can never open it. An accepted
``submit`` returns ``terminate=True`` so the loop ends without another model request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from piw.agent.contract import AgentStepContract
from piw.errors import AttemptInactive, OutputInvalid, UpdateRejected
from piw.providers.messages import ToolSpec
from piw.tools import ToolResult
from piw.workflow.user_code import WorkflowCodeExit

WORKFLOW_TOOL_NAME = "workflow"
ASSISTANT_STEP_SUBMIT = "This step completes with a normal assistant response. Do not submit workflow output."
GATE_CLOSED = "The workflow tool is not available on this turn."

WORKFLOW_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["action"],
    "properties": {
        "action": {"type": "string", "enum": ["submit", "update", "status"]},
        "step": {"type": "string"},
        "attempt": {"type": "string"},
        "output": {"description": "The step result (any JSON value)."},
        "update": {"type": "object"},
    },
}

WORKFLOW_TOOL_SPEC = ToolSpec(
    name=WORKFLOW_TOOL_NAME,
    description=(
        "Finish the active workflow step (action 'submit' with your output), report progress without finishing "
        "(action 'update'), or read the step's status (action 'status')."
    ),
    parameters=WORKFLOW_TOOL_SCHEMA,
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitCall(_Strict):
    action: Literal["submit"]
    step: str
    attempt: str
    output: Any


class UpdateCall(_Strict):
    action: Literal["update"]
    step: str
    attempt: str
    update: dict[str, Any]


class StatusCall(_Strict):
    action: Literal["status"]
    step: str | None = None
    attempt: str | None = None


_CALL_MODELS: dict[str, type[_Strict]] = {"submit": SubmitCall, "update": UpdateCall, "status": StatusCall}


def validation_reason(exc: ValidationError) -> str:
    """One line naming each failing field and why."""
    parts = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error["loc"]) or "value"
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)


_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)


def lenient_json(value: Any) -> Any:
    """A string output may hold JSON (optionally fenced); objects and arrays replace it, anything else stays."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return value
    return parsed if isinstance(parsed, dict | list) else value


@dataclass
class ActiveStep:
    """The step the loop currently serves, with the acceptance rules of its node."""

    contract: AgentStepContract
    accept: Callable[[Any], Any]
    """Runs §1.1 steps 2–4 on a lenient-parsed value; raises ``ValueError`` (reason) or ``OutputInvalid``."""
    accepted: bool = False
    output: Any = None
    invalid_output: OutputInvalid | None = None
    closed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class WorkflowTool:
    """Answers ``workflow`` tool calls for one agent loop."""

    def __init__(
        self,
        step: ActiveStep,
        publish: Callable[[dict[str, Any], str], dict[str, Any]] | None = None,
        status: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.step = step
        self._publish = publish
        self._status = status

    @property
    def gate_open(self) -> bool:
        """Open only for an active, unfinished submit-mode step (decided in code, never by prompt text)."""
        return self.step.contract.completion == "submit" and not self.step.closed

    def handle(
        self, call_id: str, arguments: dict[str, Any] | None, raw_error: str | None = None
    ) -> ToolResult:
        contract = self.step.contract
        action = arguments.get("action") if isinstance(arguments, dict) else None
        if contract.completion == "assistant" and action == "submit":
            return ToolResult(ASSISTANT_STEP_SUBMIT, is_error=True)
        if not self.gate_open:
            return ToolResult(GATE_CLOSED, is_error=True)
        if raw_error is not None or not isinstance(arguments, dict):
            return ToolResult(
                f"Invalid workflow tool call: {raw_error or 'arguments must be a JSON object'}", is_error=True
            )
        model = _CALL_MODELS.get(str(action))
        if model is None:
            return ToolResult(
                "Invalid workflow tool call: action must be one of submit, update, status", is_error=True
            )
        try:
            call = model.model_validate(arguments)
        except ValidationError as exc:
            return ToolResult(f"Invalid workflow tool call: {validation_reason(exc)}", is_error=True)
        if isinstance(call, StatusCall):
            return self._status_result()
        assert isinstance(call, SubmitCall | UpdateCall)
        if call.step != contract.node_id:
            return ToolResult(
                f"Step {call.step} is not active. The active step is {contract.node_id}.", is_error=True
            )
        if call.attempt != contract.attempt_id:
            return ToolResult(
                f"Attempt {call.attempt} is stale. The active attempt for step {contract.node_id} is "
                f"{contract.attempt_id}.",
                is_error=True,
            )
        if isinstance(call, UpdateCall):
            return self._update(call, call_id)
        if self.step.accepted:
            return ToolResult(f"Step {contract.node_id} already has an accepted output.", is_error=True)
        try:
            output = self.step.accept(lenient_json(call.output))
        except (OutputInvalid, WorkflowCodeExit) as exc:
            # An author bug (a validator returning non-JSON, or calling sys.exit()): the attempt fails; the model
            # is not blamed.
            self.step.invalid_output = exc if isinstance(exc, OutputInvalid) else OutputInvalid(str(exc))
            self.step.closed = True
            return ToolResult(f"Output rejected for step {contract.node_id}: the step cannot store it.", is_error=True,
                              terminate=True)  # fmt: skip
        except ValidationError as exc:
            return ToolResult(
                f"Output rejected for step {contract.node_id}: {validation_reason(exc)}", is_error=True
            )
        except Exception as exc:
            return ToolResult(f"Output rejected for step {contract.node_id}: {exc}", is_error=True)
        self.step.accepted, self.step.output = True, output
        return ToolResult(f"Output accepted for step {contract.node_id}.", terminate=True)

    def _update(self, call: UpdateCall, call_id: str) -> ToolResult:
        if self._publish is None:
            return ToolResult("Updates are not available for this step.", is_error=True)
        try:
            receipt = self._publish(call.update, call_id)
        except (UpdateRejected, AttemptInactive) as exc:
            return ToolResult(str(exc), is_error=True)
        return ToolResult(json.dumps(receipt), details=receipt)

    def _status_result(self) -> ToolResult:
        contract = self.step.contract
        details: dict[str, Any] = {
            "runId": contract.run_id,
            "workflowName": contract.workflow_name,
            "nodeId": contract.node_id,
            "attemptId": contract.attempt_id,
            "updates": self._status()["updates"] if self._status else [],
        }
        return ToolResult(json.dumps(details, ensure_ascii=False), details=details)
