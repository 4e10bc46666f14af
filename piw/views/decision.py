"""What a waiting run waits for, in words: the question, the choices and the exact command that answers it.

A pure view of the waiting run's recorded output (a human decision's open request, or a checkpoint's summary)
and its definition snapshot: ``piw run``/``resume``/``answer``/``decide`` print it when a run stops ``waiting``,
and ``piw inspect``'s state view shows it for an open decision. Every piece of workflow data goes through the
terminal sanitiser; commands are shell-quoted so they can be pasted as they are.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from piw.progress import format_remaining, parse_instant
from piw.terminal import sanitize_terminal_text, single_line
from piw.views.base import View, compact, node_label, safe
from piw.views.budget import budget_stop_lines
from piw.workflow.answer_example import example_text
from piw.workflow.budget import BUDGET_WAIT

SUMMARY_LINES = 6


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_decision(output: Any) -> bool:
    return (
        isinstance(output, dict)
        and output.get("kind") == "human_decision"
        and isinstance(output.get("choices"), list)
    )


def decide_commands(run_id: str, output: dict[str, Any]) -> list[str]:
    """One ``piw decide`` command per choice, with a placeholder for the text a choice needs."""
    commands: list[str] = []
    for item in output.get("choices", []):
        if not isinstance(item, dict):
            continue
        parts = ["piw", "decide", run_id, str(item.get("id"))]
        inputs = [field for field in item.get("inputs", []) if isinstance(field, dict)]
        if len(inputs) == 1:
            parts += ["--text", "…"]
        else:
            for field in inputs:
                parts += ["--text", f"{field.get('name')}=…"]
        commands.append(" ".join(shlex.quote(part) for part in parts))
    return commands


def sample_answer(schema: dict[str, Any] | None) -> str:
    """A JSON example that fits a checkpoint's answer model (``piw.workflow.answer_example``)."""
    return example_text(schema)


def answer_command(run_id: str, schema: dict[str, Any] | None) -> str:
    return f"piw answer {shlex.quote(run_id)} {shlex.quote(sample_answer(schema))}"


class WaitView(View):
    """The waiting run's question, choices, deadline and the commands that answer it."""

    def __init__(
        self,
        run_id: str,
        node_id: str,
        output: Any,
        *,
        answer_schema: dict[str, Any] | None = None,
        now: datetime | None = None,
        resolved: dict[str, Any] | None = None,
    ) -> None:
        self.run_id, self.node_id, self.output = run_id, node_id, output
        self.answer_schema, self.now, self.resolved = answer_schema, now, resolved

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """Whole lines, never cut to the width like other views: they hold run ids and commands to copy (a
        terminal wraps them; off a terminal they stay one line each)."""
        yield from self.lines(console, max(1, options.max_width))

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        if self.node_id == BUDGET_WAIT:
            if self.resolved is not None:
                yield Text("Stopped by its budget.")
                yield from self._resolved_lines()
                return
            yield from budget_stop_lines(self.run_id, self.output)
        elif is_decision(self.output):
            yield from self._decision(self.output)
        else:
            yield from self._checkpoint()

    def _checkpoint(self) -> Iterator[Text]:
        line = Text("Waiting at checkpoint ")
        line.append(node_label(self.node_id), style="bold")
        if self.output is not None:
            line.append(": ")
            line.append_text(safe(compact(self.output, 300)))
        yield line
        if self.resolved is not None:
            yield from self._resolved_lines()
            return
        if self.answer_schema:
            fields = ", ".join(
                f"{name} ({(spec or {}).get('type', 'any')})"
                for name, spec in (self.answer_schema.get("properties") or {}).items()
            )
            if fields:
                yield Text(
                    f"The answer is a JSON object with: {sanitize_terminal_text(fields)}.", style="dim"
                )
        yield Text("Answer with: ") + Text(answer_command(self.run_id, self.answer_schema), style="bold")

    def _decision(self, output: dict[str, Any]) -> Iterator[Text]:
        raw = output.get("request")
        request: dict[str, Any] = raw if isinstance(raw, dict) else {}
        head = Text("Waiting for a decision at ")
        head.append(node_label(self.node_id), style="bold")
        audience = output.get("audience")
        if audience:
            head.append(f" (for {single_line(str(audience))})")
        head.append(":")
        yield head
        yield Text("  ") + Text(single_line(_clip(str(request.get("title", "")), 300)), style="bold")
        if request.get("subject"):
            yield Text("  ") + safe(single_line(_clip(str(request["subject"]), 300)))
        summary = str(request.get("summary") or "")
        if summary:
            rows = sanitize_terminal_text(summary).splitlines()
            for row in rows[:SUMMARY_LINES]:
                yield Text("  " + _clip(row, 300), style="dim")
            if len(rows) > SUMMARY_LINES:
                yield Text(f"  … {len(rows) - SUMMARY_LINES} more lines", style="dim")
        if self.resolved is not None:
            yield from self._resolved_lines()
            return
        yield Text("Choices:")
        choices = [item for item in output.get("choices", []) if isinstance(item, dict)]
        pad = max((len(str(item.get("id"))) for item in choices), default=0)
        for item in choices:
            ident, label = single_line(str(item.get("id"))), single_line(str(item.get("label") or ""))
            if label.strip() and label != ident:
                line = Text(f"  {ident:<{pad}}  ", style="bold")
                line.append(label)
            else:  # a choice given as a plain string has its id as label: shown once
                line = Text(f"  {ident}", style="bold")
            for field in item.get("inputs", []):
                need = "needs" if field.get("required", True) else "optional"
                line.append(f" — {need} text {single_line(str(field.get('name')))}", style="dim")
                line.append(f" ({single_line(str(field.get('prompt', '')))})", style="dim")
            yield line
        timeout = output.get("onTimeout")
        if isinstance(timeout, dict) and timeout.get("expiresAt"):
            yield from self._timeout_lines(timeout)
        commands = decide_commands(self.run_id, output)
        for index, command in enumerate(commands):
            label = "Decide with: " if index == 0 else "         or: "
            yield Text(label) + Text(command, style="bold")
        yield Text(f"The whole request: piw inspect {shlex.quote(self.run_id)}", style="dim")

    def _timeout_lines(self, timeout: dict[str, Any]) -> Iterator[Text]:
        """When the declared timeout applies, and what applies it: a sweep, which only ``piw host`` (or this run's
        terminal prompt, or a ``piw decide`` of it) makes, so a deadline passes unnoticed when none runs."""
        choice, at = single_line(str(timeout.get("choice"))), single_line(str(timeout["expiresAt"]))
        expires = parse_instant(str(timeout["expiresAt"]))
        left = (expires - self.now).total_seconds() * 1000 if self.now is not None and expires else None
        if left is not None and left <= 0:
            yield Text(
                f"Without an answer it continues with {choice}: due since {at} ({format_remaining(-left)} ago)."
            )
        else:
            when = f" (in {format_remaining(left)})" if left is not None else ""
            yield Text(f"Without an answer it continues with {choice} at {at}{when}.")
        yield Text(
            "  The timeout fires only while 'piw host' runs (or this run's terminal prompt waits).",
            style="dim",
        )

    def _resolved_lines(self) -> Iterator[Text]:
        resolved: dict[str, Any] = self.resolved or {}
        status = resolved.get("status")
        if status == "cancelled":
            yield Text("Cancelled: this run will not continue.", style="yellow")
            return
        answer = resolved.get("answer")
        how = resolved.get("provenance")
        line = Text("Answered", style="green")
        if isinstance(answer, dict) and "choice" in answer:
            line.append(f" {single_line(str(answer['choice']))}")
        elif answer is not None:
            line.append(" ")
            line.append_text(safe(compact(answer, 200)))
        if how:
            line.append(f" ({single_line(str(how))}")
            if resolved.get("answeredBy"):
                line.append(f", by {single_line(str(resolved['answeredBy']))}")
            line.append(")")
        if resolved.get("continuationRunId"):
            line.append(f"; continued as run {single_line(str(resolved['continuationRunId']))}")
        yield line
