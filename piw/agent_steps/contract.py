"""The step contract and the one prompt formatter every executor uses (``docs/design/agent-steps.md`` §2).

These functions are pure: the exact string sent to a model is ``format_step_prompt(task, contract)``, recorded
verbatim in ``agent_prompt_sent`` and in the step message, so what the model saw can always be read back.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from piw.agent_steps.schema import model_schema
from piw.workflow.definition import AssistantMessage


class AgentStepContract(BaseModel):
    """Binds one delivery to its run, node and attempt; stored with the attempt and carried by each step message."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    run_id: str
    workflow_name: str
    node_id: str
    attempt_id: str
    completion: Literal["submit", "assistant"]
    expected_output: str | None = None
    max_output_chars: int | None = None
    updates: bool = False
    """The node opted in to ``update``/``status`` (``agent(updates=True)``); on the wire only when true."""

    def to_wire(self) -> dict[str, Any]:
        data = self.model_dump(by_alias=True)
        if data.get("maxOutputChars") is None:
            data.pop("maxOutputChars", None)
        if not data.get("updates"):
            data.pop("updates", None)
        return data


def render_expected_output(expected: Any) -> str:
    """``None`` → a generic hint, a string verbatim, a pydantic model → its JSON Schema in canonical form."""
    if expected is None:
        return "a JSON object with your result"
    if isinstance(expected, str):
        return expected
    if isinstance(expected, type) and issubclass(expected, BaseModel):
        schema = json.dumps(model_schema(expected), sort_keys=True, separators=(",", ":"))
        return "a JSON value matching this JSON Schema: " + schema
    raise TypeError(f"cannot render expected_output {expected!r}")


def make_contract(
    run_id: str,
    workflow_name: str,
    node_id: str,
    attempt_id: str,
    expected_output: Any,
    *,
    updates: bool = False,
) -> AgentStepContract:
    """The contract for one attempt of an agent node (or a ``ctx.run_agent`` child)."""
    if isinstance(expected_output, AssistantMessage):
        return AgentStepContract(
            run_id=run_id,
            workflow_name=workflow_name,
            node_id=node_id,
            attempt_id=attempt_id,
            completion="assistant",
            max_output_chars=expected_output.max_chars,
        )
    return AgentStepContract(
        run_id=run_id,
        workflow_name=workflow_name,
        node_id=node_id,
        attempt_id=attempt_id,
        completion="submit",
        expected_output=render_expected_output(expected_output),
        updates=updates,
    )


def contract_text(contract: AgentStepContract) -> str:
    """The text appended to the task prompt for the contract's completion mode."""
    header = (
        "---\n"
        f"Workflow step: workflow {contract.workflow_name}, step {contract.node_id}, attempt {contract.attempt_id}\n\n"
    )
    if contract.completion == "assistant":
        lines = [
            "Reply with a normal assistant message.",
            "Do not call the workflow tool to complete this step.",
            "Your visible reply becomes the workflow step output.",
        ]
        if contract.max_output_chars is not None:
            lines.append(f"Keep the reply to at most {contract.max_output_chars} characters.")
        return header + "\n".join(lines)
    # No call example: small models copy placeholders such as <result> or "..." into their output, and the ids
    # are already in the header (each 32-hex id costs ~25 tokens); the typed tool says the rest.
    lines = [
        'Finish this step by calling the `workflow` tool with action "submit" and your result as "output".',
        f"Expected output: {contract.expected_output}",
    ]
    if contract.updates:
        lines += [
            'You may report progress before finishing by calling the tool with action "update".',
            "Updates are recorded but never finish the step.",
        ]
    lines.append(
        "The step is finished only when the tool accepts your output. If the tool returns an error, correct the "
        "output and submit again."
    )
    return header + "\n".join(lines)


def format_step_prompt(task_prompt: str, contract: AgentStepContract) -> str:
    """The exact prompt of a step (and of a ``resume`` delivery): the task, a blank line, the contract text."""
    return task_prompt.rstrip() + "\n\n" + contract_text(contract)


def format_reminder(contract: AgentStepContract) -> str:
    """The reminder sent when a submit-mode loop settles without an accepted output."""
    return (
        f"You ended your turn without finishing workflow step {contract.node_id} (attempt {contract.attempt_id}). "
        'Call the workflow tool with action "submit" now.\n\n' + contract_text(contract)
    )
