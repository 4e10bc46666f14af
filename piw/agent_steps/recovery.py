"""Recovering an agent attempt on resume from its durable evidence (``docs/design/persistence.md`` §9).

The first matching row wins: a committed completion receipt; an accepted submission; a completed assistant reply
(adopted, never re-asked); a loop that stopped at the prompt or at tool results (continued without a new message);
otherwise the prompt is delivered again as ``resume`` under the same attempt id. A reply from another attempt or
another branch is never adopted, so each node visit shows at most one visible response. Nor is a reply that
something else follows on the branch — a notification, a user message, another step's prompt: it is no longer
the answer to this step's prompt alone, so the step is asked again (``docs/agent-steps.md``, Assistant mode).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from piw.agent_steps.attempt import (
    STEP_CUSTOM_TYPE,
    AgentSettings,
    AttemptRun,
    messages_of,
    step_contract,
    usage_of,
)
from piw.agent_steps.contract import AgentStepContract, format_step_prompt
from piw.agent_steps.interrupted_calls import answer_interrupted
from piw.agent_steps.loop import Deadline
from piw.agent_steps.workflow_tool import OUTPUT_CUT_TYPE, lenient_json
from piw.providers.base import Provider
from piw.providers.messages import MESSAGE_ADAPTER, AssistantReply
from piw.run.executors import Attempt, NodeOutcome
from piw.store.session import SessionEntry, current_branch
from piw.wire import parse_time, sha256_hex
from piw.workflow.definition import AgentNode


def _contract_of(entry: SessionEntry) -> dict[str, Any] | None:
    message = entry.message
    if message.get("role") != "custom" or message.get("customType") != STEP_CUSTOM_TYPE:
        return None
    contract = (message.get("details") or {}).get("contract")
    return contract if isinstance(contract, dict) else None


def matching_prompts(branch: list[SessionEntry], run_id: str, node_id: str, attempt_id: str) -> list[int]:
    """Indexes of the step messages on the branch whose contract names exactly this run, node and attempt."""
    found = []
    for index, entry in enumerate(branch):
        contract = _contract_of(entry)
        if contract and (contract.get("runId"), contract.get("nodeId"), contract.get("attemptId")) == (
            run_id,
            node_id,
            attempt_id,
        ):
            found.append(index)
    return found


def _range_after(branch: list[SessionEntry], index: int) -> list[SessionEntry]:
    """Entries after a prompt and before the next step message."""
    out = []
    for entry in branch[index + 1 :]:
        if _contract_of(entry) is not None:
            break
        out.append(entry)
    return out


def recover(
    settings: AgentSettings, provider: Callable[[], Provider], attempt: Attempt, node: AgentNode
) -> NodeOutcome:
    """Finish, continue or re-deliver a reattached attempt without ever showing a second answer."""
    branch = current_branch(attempt.session.entries)
    prompts = matching_prompts(branch, attempt.run_id, attempt.node_id, attempt.attempt_id)
    first, latest = prompts[0], prompts[-1]
    recorded = AgentStepContract.model_validate(_contract_of(branch[latest]))
    contract = step_contract(attempt, node)
    run = AttemptRun(settings, provider, attempt, node, contract if contract == recorded else recorded)
    run.first_entry_id = branch[first].id
    run.messages = messages_of(branch[first + 1 :])
    run.tool.restore(run.messages)  # max_rejections counts over the whole attempt, crash or not
    _charge_time_used(run, attempt, branch[first:])
    after = _range_after(branch, latest)
    state_current = attempt.writer.state.current
    receipt = state_current.assistant_completion if state_current else None
    if receipt:
        return _from_receipt(run, attempt, receipt)
    if contract.completion == "submit":
        accepted = _accepted_submission(after)
        if accepted is not None:
            entry_id, output = accepted
            run.last_entry_id = entry_id
            try:
                return run.succeed(run.accept(lenient_json(output)))
            except Exception as exc:
                return run.fail(f"Recorded submission no longer validates: {exc}")
    elif len(after) == len(branch) - latest - 1:  # nothing (another step's prompt) follows the prompt's range
        adopted = _completed_reply(after)
        if adopted is not None:
            entry, message = adopted
            run.last_assistant_entry = entry.id
            return run.assistant_outcome(message, adopted=True)
    started = state_current.tool_calls_started if state_current else ()
    if answer_interrupted(run, branch[latest + 1 :], started):
        return run.run(None)  # the model reads what became of its calls; none is run again
    last = branch[-1]
    continues = last.message.get("role") == "toolResult" or last.message.get("customType") == OUTPUT_CUT_TYPE
    if last is branch[latest] or continues:
        return run.run(None)
    original = branch[first].message.get("content", "")
    return run.run(original if isinstance(original, str) else format_step_prompt("", contract), "resume")


def _charge_time_used(run: AttemptRun, attempt: Attempt, entries: list[SessionEntry]) -> None:
    """A reattached attempt keeps the deadline it had: loop time used before the park or crash is spent.

    Active time is measured from the attempt's start to its last recorded conversation entry; the time the
    run sat parked or crashed after that is not charged.
    """
    current = attempt.writer.state.current
    if attempt.timeout_s is None or current is None or not entries:
        return
    used = (parse_time(entries[-1].timestamp) - parse_time(current.started_at)).total_seconds()
    run.deadline = Deadline(max(0.001, attempt.timeout_s - max(0.0, used)))


def _from_receipt(run: AttemptRun, attempt: Attempt, receipt: dict[str, Any]) -> NodeOutcome:
    entry_id = receipt.get("assistantEntryId")
    entry = next((e for e in attempt.session.entries if e.id == entry_id), None)
    if entry is None:
        return run.fail(f"Recorded reply {entry_id} is missing from the conversation.")
    message = MESSAGE_ADAPTER.validate_python(entry.message)
    text = message.visible_text() if isinstance(message, AssistantReply) else ""
    if "sha256:" + sha256_hex(text) != receipt.get("textSha256"):
        return run.fail(f"Recorded reply {entry_id} does not match its digest.")
    return NodeOutcome.ok(text, usage=usage_of(run.messages), conversation=receipt.get("conversation"))


def _accepted_submission(entries: list[SessionEntry]) -> tuple[str, Any] | None:
    """The accepted ``workflow`` submit in a prompt's range: its tool result entry id and the submitted output."""
    calls: dict[str, Any] = {}
    for entry in entries:
        message = entry.message
        if message.get("role") == "assistant":
            for block in message.get("content") or []:
                if block.get("type") == "toolCall" and block.get("name") == "workflow":
                    calls[block.get("id")] = (block.get("arguments") or {}).get("output")
        elif (
            message.get("role") == "toolResult"
            and message.get("toolName") == "workflow"
            and message.get("terminate")
            and not message.get("isError")
            and message.get("toolCallId") in calls
        ):
            return entry.id, calls[message["toolCallId"]]
    return None


def _completed_reply(entries: list[SessionEntry]) -> tuple[SessionEntry, AssistantReply] | None:
    """The last assistant message in the range when nothing (user or custom) follows it."""
    for position in range(len(entries) - 1, -1, -1):
        entry = entries[position]
        role = entry.message.get("role")
        if role in ("user", "custom"):
            return None
        if role == "assistant":
            message = MESSAGE_ADAPTER.validate_python(entry.message)
            assert isinstance(message, AssistantReply)
            if message.retried:
                continue
            if message.stop_reason == "stop" and not message.tool_calls():
                return entry, message
            return None
    return None
