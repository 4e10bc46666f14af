"""The state view: status, title, input digest, the current node and what it waits for, the outcome, totals.

It reads only the replayed ``RunState`` (plus the liveness probe), so ``--at`` shows the run exactly as it was
at that sequence number. Long values are clipped to one line; ``piw inspect RUN --json`` has them in full.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.text import Text

from piw.progress import format_remaining, parse_instant
from piw.store.fold import RunState
from piw.store.telemetry_status import telemetry_line
from piw.views.base import View, compact, elapsed, marked, node_label, plural, safe, status_style
from piw.views.budget import spent_line
from piw.views.effects import UNKNOWN_MARK, unresolved_lines
from piw.views.phases import phase_lines
from piw.views.progress import next_check_at
from piw.wire import digest

KEY_WIDTH = 10
_WAITS = {"agent": "waiting for the model", "checkpoint": "recording the checkpoint", "notify": "sending"}


def status_line(state: RunState, live: bool | None) -> Text:
    """``✓ completed``, ``⏸ waiting on ask``, ``▶ running · possibly interrupted`` …"""
    if state.status == "unknown":  # parked on an interrupted effect="once" step: a person answers it
        return Text(f"{UNKNOWN_MARK} outcome unknown", style="bold yellow")
    line = Text(marked(state.status), style=f"bold {status_style(state.status)}".strip())
    if state.status == "waiting" and state.waiting_on:
        line.append(" on ")
        line.append(node_label(state.waiting_on))
    if state.status == "running":
        if state.paused:
            line.append(" · paused", style="yellow")
        if live is False:
            line.append(" · possibly interrupted", style="yellow")
    return line


def waiting_for(state: RunState, now: datetime) -> str:
    """What the current attempt waits for, from the trace alone (a long sleep reads as waiting, not hung)."""
    current = state.current
    if current is None:
        return ""
    if state.paused:
        return "paused; 'piw resume' continues it"
    if state.status == "unknown":
        return "parked: its outcome is unknown; 'piw resolve' answers it"
    schedule = next_check_at(state)
    if current.node_type == "action" and schedule is not None and schedule > now:
        return f"waiting for the next check in {format_remaining((schedule - now).total_seconds() * 1000)}"
    if current.node_type == "action":
        return "running the action"
    return _WAITS.get(current.node_type, "running")


def current_line(state: RunState, now: datetime) -> Text:
    """``work (action) · 12.0s · running the action``: the node in progress and its elapsed time."""
    current = state.current
    if current is None:
        return Text("")
    line = Text(node_label(current.node_id), style="bold")
    line.append(f" ({current.node_type})", style="dim")
    line.append(f" · {elapsed(current.started_at, now)}")
    detail = waiting_for(state, now)
    if current.status_detail:
        line.append(" · ")
        line.append_text(safe(current.status_detail))
    if detail:
        line.append(f" · {detail}", style="dim")
    return line


def totals_line(state: RunState) -> str:
    """Steps, model requests, tokens and cost (cost only when every part of it is known)."""
    parts = [plural(len(state.steps), "step")]
    usage: dict[str, Any] = state.usage or {}
    if usage:
        parts.append(plural(int(usage.get("requests", 0)), "model request"))
        tokens = int(usage.get("input", 0)) + int(usage.get("output", 0))
        parts.append(
            f"{tokens:,} tokens ({int(usage.get('input', 0)):,} in, {int(usage.get('output', 0)):,} out)"
        )
        if isinstance(usage.get("cost"), int | float):
            parts.append(f"${usage['cost']:.4f}")
        elif int(usage.get("requests", 0)):
            parts.append("cost unknown (no price configured)")
    return " · ".join(parts)


def _row(key: str, value: Text) -> Text:
    return Text(f"{key:<{KEY_WIDTH}}", style="dim") + value


class StateView(View):
    def __init__(
        self,
        state: RunState,
        now: datetime,
        *,
        live: bool | None = None,
        notice: str | None = None,
        at: int | None = None,
        forks: tuple[str, ...] = (),
        telemetry: dict[str, Any] | None = None,
    ) -> None:
        self.state, self.now, self.live, self.notice, self.at = state, now, live, notice, at
        self.forks = forks
        self.telemetry = telemetry
        """The run's ``telemetry.json`` (live OpenTelemetry export, ``docs/telemetry.md``), when it has one."""

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        state = self.state
        if not state.run_id:
            yield Text("No events in this run yet.", style="dim")
            return
        if self.notice:
            yield Text(f"⚠ {self.notice}", style="yellow")
        if self.at is not None:
            yield Text(f"replayed to seq {state.trace_seq} (--at {self.at})", style="dim")
        yield _row("run", safe(state.run_id))
        name = safe(state.workflow_name)
        if state.run_title and state.run_title != state.workflow_name:
            name.append(" — ")
            name.append_text(safe(state.run_title))
        yield _row("workflow", name)
        if state.parent_run_id:
            yield _row("continues", safe(state.parent_run_id))
        if state.forked_from:
            origin = state.forked_from
            yield _row("lineage", safe(f"forked from {origin.get('runId')} at seq {origin.get('seq')}"))
        if self.forks:
            yield _row("lineage" if not state.forked_from else "", safe("forks: " + ", ".join(self.forks)))
        yield _row("status", status_line(state, self.live))
        input_line = Text(digest(state.input)[:19], style="dim")
        input_line.append("  ")
        input_line.append_text(safe(compact(state.input, 200)))
        yield _row("input", input_line)
        if state.current is not None:
            yield _row("current", current_line(state, self.now))
        yield from self._phases()
        for index, line in enumerate(unresolved_lines(state)):
            yield _row("effect" if index == 0 else "", safe(line, "yellow"))
        yield _row("started", safe(state.started_at or ""))
        if state.finished_at:
            took = elapsed(state.started_at, parse_instant(state.finished_at))
            yield _row("finished", safe(f"{state.finished_at} (took {took})"))
        if state.status in ("completed", "waiting") or state.final_output is not None:
            yield _row("output", safe(compact(state.final_output, 400)))
        if state.error:
            yield from self._error(console, width)
        yield _row("totals", Text(totals_line(state)))
        if state.budget:
            yield _row("budget", Text(spent_line(state.spent, state.budget)))
        if self.telemetry is not None:
            dropped = bool(self.telemetry.get("dropped"))
            yield _row("telemetry", safe(telemetry_line(self.telemetry), "yellow" if dropped else ""))

    def _phases(self) -> Iterator[Text]:
        """A script's phases, one line each (``docs/dynamic-workflows.md``)."""
        for index, phase in enumerate(phase_lines(self.state, self.now)):
            yield _row("phases" if index == 0 else "", phase)

    def _error(self, console: Console, width: int) -> Iterator[Text]:
        """The error, wrapped over up to four lines (it is usually the one thing a reader came for)."""
        wrapped = safe(self.state.error or "", "red").wrap(console, max(1, width - KEY_WIDTH))
        for index, line in enumerate(wrapped[:4]):
            yield _row("error" if index == 0 else "", line)


state_view = StateView
"""What ``piw inspect --view state`` and the viewer's state tab build."""
