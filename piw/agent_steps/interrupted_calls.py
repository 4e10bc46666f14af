"""Tool calls a crash interrupted: answered on resume, never run again silently (``docs/effects.md``, "Tool calls").

A tool call whose result is in the conversation is never executed again: the resumed loop sends that result to the
model. A call without a result gets one written now, before the model is asked again:

- a ``once`` tool (``bash``, any tool that may change something, an MCP tool) whose start was recorded
  (``tool_call_started``): it was interrupted mid-flight and nobody knows whether it took effect, so the model is
  told exactly that and asked to check before repeating it;
- any other call (a read-only tool, or a ``once`` call that never started): it did not run to the end, and was
  not run again; the model may call it again.

The result is an error result with ``details.interrupted`` (``outcome``: ``unknown`` or ``not run``), which the
conversation view marks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from piw.providers.messages import ToolResultMessage
from piw.store.session import SessionEntry

if TYPE_CHECKING:
    from piw.agent_steps.attempt import AttemptRun


def pending_calls(entries: list[SessionEntry]) -> list[tuple[str, str]]:
    """``(call id, tool name)`` of the last assistant message's tool calls that have no result after it, when
    nothing but their results follows it (otherwise the conversation moved on and there is nothing to answer)."""
    for index in range(len(entries) - 1, -1, -1):
        message = entries[index].message
        if message.get("role") == "toolResult":
            continue
        if message.get("role") != "assistant" or message.get("stopReason") in ("error", "aborted", "length"):
            return []
        answered = {entry.message.get("toolCallId") for entry in entries[index + 1 :]}
        return [
            (str(block.get("id")), str(block.get("name")))
            for block in message.get("content") or []
            if isinstance(block, dict) and block.get("type") == "toolCall" and block.get("id") not in answered
        ]
    return []


def answer_interrupted(run: AttemptRun, entries: list[SessionEntry], started: tuple[str, ...]) -> bool:
    """Record a result for each call the crash left without one; whether there were any."""
    pending = pending_calls(entries)
    for call_id, name in pending:
        if call_id in started:
            text = (
                f"Tool call {name} ({call_id}) was interrupted while it ran: piw stopped and the step was resumed. "
                "Its outcome is unknown: it may or may not have taken effect. Check before you run it again."
            )
            outcome = "unknown"
        else:
            text = (
                f"Tool call {name} ({call_id}) did not finish: piw stopped and the step was resumed. It was not "
                "run again; call it again if you still need its result."
            )
            outcome = "not run"
        details = {"interrupted": True, "outcome": outcome}
        run.record(
            ToolResultMessage(
                tool_call_id=call_id, tool_name=name, content=text, is_error=True, details=details
            )
        )
    return bool(pending)
