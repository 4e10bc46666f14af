"""One step expanded: what the viewer shows on Enter — the prompt, tool calls, submission, validation errors and
usage of one attempt.

A pure function of the step record (``RunState.steps[]`` or the attempt in progress) and the session entries of
its conversation range (``firstEntryId``..``lastEntryId``, inclusive): tool calls are the assistant's ``toolCall``
blocks, and a validation error is a tool result the ``workflow`` tool returned as an error. All text is
sanitised and drawn as plain ``Text``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from piw.store.fold import CurrentAttempt, RunState, StepRecord
from piw.store.session import SessionEntry
from piw.views.base import (
    OUTCOME_MARKS,
    View,
    compact,
    fmt_duration,
    node_label,
    safe,
    safe_block,
    status_style,
)
from piw.views.conversation import entry_lines
from piw.views.phases import Phase, leaf_cards
from piw.views.state import totals_line

OUTPUT_LINES = 40


def conversation_range(entries: Iterable[SessionEntry], conversation: Any) -> Iterator[SessionEntry]:
    """The entries from ``firstEntryId`` through ``lastEntryId`` (nothing when the range is unknown)."""
    if not isinstance(conversation, dict):
        return
    first, last = conversation.get("firstEntryId"), conversation.get("lastEntryId")
    inside = False
    for entry in entries:
        inside = inside or entry.id == first
        if inside:
            yield entry
        if entry.id == last:
            return


def _heading(title: str) -> Iterator[Text]:
    yield Text("")
    yield Text(title, style="bold underline")


def _pretty(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.splitlines() or [""]
    try:
        text = json.dumps(value, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        text = compact(value)
    return text.splitlines()


def _validation_errors(entries: list[SessionEntry]) -> list[str]:
    errors = []
    for entry in entries:
        message = entry.message
        if message.get("role") == "toolResult" and message.get("isError"):
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
            errors.append(str(content))
    return errors


class StepDetailView(View):
    """Every part of one attempt, top to bottom."""

    def __init__(
        self,
        step: StepRecord | CurrentAttempt,
        entries: Iterable[SessionEntry],
        number: int | None = None,
        phases: Sequence[Phase] = (),
    ) -> None:
        self.step, self.number = step, number
        self.phases = list(phases)
        """A script attempt's phases (``piw.views.phases``): its leaves are shown as step cards per phase."""
        conversation = step.conversation if isinstance(step, StepRecord) else None
        self.entries = list(conversation_range(entries, conversation))

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        step = self.step
        finished = isinstance(step, StepRecord)
        outcome = step.outcome if isinstance(step, StepRecord) else "running"
        head = Text(f"{OUTCOME_MARKS.get(outcome, '·')} ", style=status_style(outcome))
        if self.number is not None:
            head.append(f"#{self.number} ", style="dim")
        head.append(node_label(step.node_id), style="bold")
        head.append(f"  ({step.node_type})  {outcome}", style=status_style(outcome))
        if isinstance(step, StepRecord):
            head.append(f"  {fmt_duration(step.duration_ms)}")
        yield head
        yield Text("attempt   ", style="dim") + safe(step.attempt_id)
        yield Text("started   ", style="dim") + safe(step.started_at or "")
        if isinstance(step, StepRecord):
            yield Text("finished  ", style="dim") + safe(step.finished_at)
        yield from _heading("prompt")
        if step.prompt:
            yield from safe_block(step.prompt).wrap(console, width)
        else:
            yield Text("No prompt (this step made no model request).", style="dim")
        yield from _heading("conversation")
        if self.entries:
            for entry in self.entries:
                yield from entry_lines(console, entry, width, expanded=True)
        else:
            yield Text("No conversation entries for this attempt.", style="dim")
        errors = _validation_errors(self.entries)
        if errors:
            yield from _heading("validation errors")
            for error in errors:
                yield from safe_block(f"✗ {error}", "red").wrap(console, width)
        if isinstance(step, StepRecord):
            yield from self._outcome(console, width, step)
        if finished and isinstance(step, StepRecord) and step.usage:
            yield from _heading("usage")
            yield Text(_usage_line(step.usage))
        if self.phases:
            yield from _heading("leaves")
            yield from leaf_cards(step.node_id, step.children, self.phases, indent="")
        elif step.children:
            yield from _heading("children")
            for child in step.children:
                yield safe(
                    f"{child.get('key', '')}  {child.get('outcome', '')}  "
                    f"{compact(child.get('output', child.get('error', '')), 200)}"
                )

    def _outcome(self, console: Console, width: int, step: StepRecord) -> Iterator[Text]:
        if step.outcome == "ok":
            yield from _heading("submission" if step.node_type == "agent" else "output")
            lines = _pretty(step.output)
            for line in lines[:OUTPUT_LINES]:
                yield from safe_block(compact(line) if len(line) > 4000 else line).wrap(console, width)
            if len(lines) > OUTPUT_LINES:
                yield Text(
                    f"… {len(lines) - OUTPUT_LINES} more lines ('piw inspect RUN --json')", style="dim"
                )
        if step.error:
            yield from _heading("error")
            yield from safe_block(step.error, "red").wrap(console, width)
        if step.action:
            yield from _heading("action")
            yield safe(compact(step.action, 400), "dim")


def _usage_line(usage: dict[str, Any]) -> str:
    """``2 model requests · 1,234 tokens (…) · $0.0012`` (the run totals' wording, for one attempt)."""
    return totals_line(RunState(usage=usage)).split(" · ", 1)[-1]


def step_detail_view(
    step: StepRecord | CurrentAttempt,
    entries: Iterable[SessionEntry],
    number: int | None = None,
    phases: Sequence[Phase] = (),
) -> StepDetailView:
    return StepDetailView(step, entries, number, phases)
