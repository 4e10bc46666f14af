"""The terminating ``workflow`` tool: submissions, updates and status, gated in code
(``docs/design/agent-steps.md`` §3).

The gate is open only while the active step is a submit-mode step; prompt text can never open it. An accepted
``submit`` returns ``terminate=True`` so the loop ends without another model request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from piw.agent_steps.contract import AgentStepContract
from piw.agent_steps.schema import hoist_defs, model_schema
from piw.errors import AttemptInactive, OutputInvalid, UpdateRejected
from piw.providers.messages import AssistantReply, CustomMessage, Message, ToolResultMessage, ToolSpec
from piw.tools import ToolResult
from piw.workflow.user_code import WorkflowCodeExit

WORKFLOW_TOOL_NAME = "workflow"
ASSISTANT_STEP_SUBMIT = "This step completes with a normal assistant response. Do not submit workflow output."
GATE_CLOSED = "The workflow tool is not available on this turn."

OUTPUT_CUT_TYPE = "pi-workflows-output-cut"
"""``customType`` of the entry that answers a response cut off at ``length`` inside a tool call (§4 output cap)."""

GENERIC_WORKFLOW_SCHEMA: dict[str, Any] = {
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
"""The untyped tool of earlier revisions, kept for the ``pi-rpc`` bridge, which registers one tool per session."""


def output_schema(expected: Any) -> dict[str, Any]:
    """``STEP_OUTPUT_SCHEMA`` of §3.1: what the tool's ``output`` must be for this ``expected_output``."""
    if isinstance(expected, type) and issubclass(expected, BaseModel):
        return model_schema(expected)
    if isinstance(expected, str):
        return {"description": expected}
    return {"type": "object"}


def step_tool_schema(expected: Any, updates: bool) -> dict[str, Any]:
    """The ``workflow`` tool's parameters for one step: ``output`` typed by the step's schema (§3.1).

    A grammar-constrained server (llama.cpp, vLLM, Ollama with ``tool_choice`` required) builds its grammar from
    this, so the shape of the output is enforced while the model writes it, not only checked afterwards.
    """
    output, defs = hoist_defs(output_schema(expected))
    actions = ["submit", "update", "status"] if updates else ["submit"]
    properties: dict[str, Any] = {
        "action": {"type": "string", "enum": actions},
        "step": {"type": "string"},
        "attempt": {"type": "string"},
        "output": output,
    }
    if updates:
        properties["update"] = {"type": "object"}
    # Without updates every call is a submit, which needs an output: requiring it lets the grammar enforce it
    # (a 0.5B model otherwise sent {"action": "submit"} alone, three times in a row).
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["action"] if updates else ["action", "output"],
        "properties": properties,
    }
    if defs:
        schema["$defs"] = defs
    return schema


def step_tool_spec(node_id: str, expected: Any, updates: bool) -> ToolSpec:
    """The ``workflow`` tool as offered to one submit-mode step."""
    return ToolSpec(
        name=WORKFLOW_TOOL_NAME,
        description=f"Submit the output of workflow step {node_id}.",
        parameters=step_tool_schema(expected, updates),
    )


GENERIC_WORKFLOW_SPEC = ToolSpec(
    name=WORKFLOW_TOOL_NAME,
    description=(
        "Finish the active workflow step (action 'submit' with your output), report progress without finishing "
        "(action 'update'), or read the step's status (action 'status')."
    ),
    parameters=GENERIC_WORKFLOW_SCHEMA,
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitCall(_Strict):
    action: Literal["submit"]
    step: str | None = None
    attempt: str | None = None
    output: Any


class UpdateCall(_Strict):
    action: Literal["update"]
    step: str | None = None
    attempt: str | None = None
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


def _unfenced(text: str) -> str:
    text = text.strip()
    fenced = _FENCE.match(text)
    return fenced.group(1).strip() if fenced else text


def lenient_json(value: Any) -> Any:
    """A string output may hold JSON (optionally fenced); objects and arrays replace it, anything else stays."""
    if not isinstance(value, str):
        return value
    try:
        parsed = json.loads(_unfenced(value))
    except ValueError:
        return value
    return parsed if isinstance(parsed, dict | list) else value


def json_parse_error(value: Any) -> str | None:
    """For a string output that is not JSON at all, the parser's complaint (``None`` when it parses)."""
    if not isinstance(value, str):
        return None
    try:
        json.loads(_unfenced(value))
    except ValueError as exc:
        return str(exc)
    return None


def canonical(value: Any) -> str:
    """The canonical JSON of an output, to recognise a resubmission of an already rejected one."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


DEFAULT_MAX_REJECTIONS = 3


@dataclass
class ActiveStep:
    """The step the loop currently serves, with the acceptance rules of its node."""

    contract: AgentStepContract
    accept: Callable[[Any], Any]
    """Runs §1.1 steps 2–4 on a lenient-parsed value; raises ``ValueError`` (reason) or ``OutputInvalid``."""
    wants_object: bool = False
    """The output schema is an object (a model or ``expected_output=None``), so a non-JSON string cannot pass."""
    accepted: bool = False
    output: Any = None
    invalid_output: OutputInvalid | None = None
    failure: str | None = None
    """Set when ``max_rejections`` ended the attempt: the exact failure text (§3.2)."""
    closed: bool = False
    rejections: int = 0
    rejected: dict[str, str] = field(default_factory=dict)
    """Canonical JSON of each rejected output → the reason it was rejected."""
    extra: dict[str, Any] = field(default_factory=dict)


class WorkflowTool:
    """Answers ``workflow`` tool calls for one agent loop.

    Rejections are bounded (§3.2): every error answer to a submission (an invalid call, wrong ids, a rejected or
    identical output) and every cut-off response counts, and the ``max_rejections``-th one closes the step with
    a failure, so a model that never produces a valid output costs exactly that many requests.
    """

    def __init__(
        self,
        step: ActiveStep,
        publish: Callable[[dict[str, Any], str], dict[str, Any]] | None = None,
        status: Callable[[], dict[str, Any]] | None = None,
        *,
        updates: bool = False,
        max_rejections: int = DEFAULT_MAX_REJECTIONS,
    ) -> None:
        self.step = step
        self._publish = publish
        self._status = status
        self.updates = updates
        self.max_rejections = max_rejections

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
            return self._invalid(raw_error or "arguments must be a JSON object")
        actions = ("submit", "update", "status") if self.updates else ("submit",)
        model = _CALL_MODELS.get(str(action)) if action in actions else None
        if model is None:
            if self.updates:
                return self._invalid("action must be one of submit, update, status")
            return self._invalid('action must be "submit" (this step takes no updates)')
        try:
            call = model.model_validate(arguments)
        except ValidationError as exc:
            return self._invalid(validation_reason(exc))
        if isinstance(call, StatusCall):
            return self._status_result()
        assert isinstance(call, SubmitCall | UpdateCall)
        if call.step is not None and call.step != contract.node_id:
            text = f"Step {call.step} is not active. The active step is {contract.node_id}."
            return (
                self._reject(text, text) if isinstance(call, SubmitCall) else ToolResult(text, is_error=True)
            )
        if call.attempt is not None and call.attempt != contract.attempt_id:
            text = (
                f"Attempt {call.attempt} is stale. The active attempt for step {contract.node_id} is "
                f"{contract.attempt_id}."
            )
            return (
                self._reject(text, text) if isinstance(call, SubmitCall) else ToolResult(text, is_error=True)
            )
        if isinstance(call, UpdateCall):
            return self._update(call, call_id)
        if self.step.accepted:
            return ToolResult(f"Step {contract.node_id} already has an accepted output.", is_error=True)
        return self._submit(call.output)

    def _submit(self, raw: Any) -> ToolResult:
        node_id = self.step.contract.node_id
        key = canonical(raw)
        earlier = self.step.rejected.get(key)
        if earlier is not None:
            return self._reject(
                f"Output rejected for step {node_id}: identical to a rejected output; change it.", earlier
            )
        value = lenient_json(raw)
        parse_error = json_parse_error(value) if self.step.wants_object else None
        try:
            if parse_error is not None:
                raise ValueError(f"output is not valid JSON: {parse_error}")
            output = self.step.accept(value)
        except (OutputInvalid, WorkflowCodeExit) as exc:
            # An author bug (a validator returning non-JSON, or calling sys.exit()): the attempt fails; the model
            # is not blamed.
            self.step.invalid_output = exc if isinstance(exc, OutputInvalid) else OutputInvalid(str(exc))
            self.step.closed = True
            return ToolResult(
                f"Output rejected for step {node_id}: the step cannot store it.",
                is_error=True,
                terminate=True,
            )
        except ValidationError as exc:
            reason = validation_reason(exc)
        except Exception as exc:
            reason = str(exc)
        else:
            self.step.accepted, self.step.output = True, output
            return ToolResult(f"Output accepted for step {node_id}.", terminate=True)
        self.step.rejected[key] = reason
        return self._reject(f"Output rejected for step {node_id}: {reason}", reason)

    def _invalid(self, reason: str) -> ToolResult:
        return self._reject(f"Invalid workflow tool call: {reason}", reason)

    def _reject(self, content: str, reason: str) -> ToolResult:
        """An error answer that counts toward ``max_rejections``; the last allowed one ends the attempt."""
        self.step.rejections += 1
        details = {"rejections": self.step.rejections, "reason": reason}
        if self.step.rejections < self.max_rejections:
            return ToolResult(content, details=details, is_error=True)
        self.step.failure = rejection_failure(self.step.contract.node_id, self.step.rejections, reason)
        self.step.closed = True
        return ToolResult(content, details=details, is_error=True, terminate=True)

    def cut_off(self, tokens: int) -> tuple[str, dict[str, Any]]:
        """The answer to a response cut off at ``length`` inside a tool call (§4); it counts as a rejection."""
        text = f"Output was cut off after {tokens} tokens; submit a shorter output."
        result = self._reject(text, f"output was cut off after {tokens} tokens")
        return text, {**(result.details or {}), "outputTokens": tokens}

    def restore(self, messages: Sequence[Message]) -> None:
        """Re-count the rejections of an attempt continued after a park or crash, from its recorded entries."""
        outputs: dict[str, Any] = {}
        for message in messages:
            if isinstance(message, AssistantReply):
                for call in message.tool_calls():
                    if call.name == WORKFLOW_TOOL_NAME and "output" in call.arguments:
                        outputs[call.id] = call.arguments["output"]
                continue
            is_workflow_result = (
                isinstance(message, ToolResultMessage) and message.tool_name == WORKFLOW_TOOL_NAME
            )
            is_cut = isinstance(message, CustomMessage) and message.custom_type == OUTPUT_CUT_TYPE
            details = getattr(message, "details", None) or {}
            count = details.get("rejections")
            if not (is_workflow_result or is_cut) or not isinstance(count, int):
                continue
            self.step.rejections = max(self.step.rejections, count)
            reason = details.get("reason")
            call_id = getattr(message, "tool_call_id", None)
            if (
                isinstance(reason, str)
                and call_id in outputs
                and message.content.startswith("Output rejected")
            ):
                self.step.rejected.setdefault(canonical(outputs[call_id]), reason)

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


def rejection_failure(node_id: str, count: int, reason: str) -> str:
    """The exact text of an attempt ended by ``max_rejections`` (§3.2), so authors can route on it."""
    return f"Step {node_id}: output rejected {count} times; last reason: {reason}"
