"""The step log of a foreground run: one line when a node starts and one when it ends.

It listens to committed trace events (never to executors), so what it prints is exactly what the trace holds.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from piw.replay import RunState
from piw.terminal import single_line
from piw.trace import TraceEvent

_MARKS = {"ok": ("✓", "green"), "failed": ("✗", "red"), "timed_out": ("⏱", "yellow"), "cancelled": ("■", "yellow")}


def _clip(value: Any, limit: int = 80) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = single_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _node_label(node_id: str) -> str:
    return single_line(node_id.replace("/", " › "))


class StepLog:
    """A trace listener that prints step lines to a console."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, event: TraceEvent, state: RunState) -> None:
        kind = event.type
        line = Text()
        if kind == "run_started":
            line.append("● ", style="bold")
            line.append(single_line(state.run_title or state.workflow_name), style="bold")
            line.append(f"  {event.run_id}", style="dim")
        elif kind == "node_started":
            line.append("▶ ", style="cyan")
            line.append(_node_label(event.node_id or ""))
            line.append(f"  {event.payload.get('nodeType', '')}", style="dim")
        elif kind in ("node_finished", "node_failed"):
            outcome = event.payload.get("outcome", "ok")
            mark, style = _MARKS.get(outcome, ("?", ""))
            line.append(f"{mark} ", style=style)
            line.append(_node_label(event.node_id or ""))
            line.append(f"  {outcome}  {event.payload.get('durationMs', 0)} ms", style="dim")
            if outcome != "ok":
                line.append("  " + _clip(event.payload.get("error", ""), 200), style=style)
        elif kind == "notification_queued":
            line.append("✉ notification ", style="magenta")
            line.append(event.payload.get("notificationId", ""), style="dim")
        elif kind == "update_published":
            payload = event.payload
            line.append("  ↳ ", style="dim")
            line.append(single_line(f"{payload.get('type')} {payload.get('key')}: "), style="dim")
            line.append(_clip(payload.get("data"), 60), style="dim")
        elif kind in ("include_entered", "include_exited"):
            arrow = "↘" if kind == "include_entered" else "↗"
            line.append(f"{arrow} ", style="dim")
            line.append(single_line(" › ".join(event.payload.get("mountPath", []))), style="dim")
        elif kind == "run_resumed":
            line.append("↻ resumed", style="bold")
            if event.payload.get("resumeAt"):
                line.append(f" at {_node_label(event.payload['resumeAt'])}")
        elif kind.startswith("run_") and kind != "run_paused":
            status = state.status
            style = "green" if status in ("completed", "waiting") else "red"
            line.append(f"■ {status}", style=f"bold {style}")
            if state.waiting_on:
                line.append(f" on {_node_label(state.waiting_on)}")
            if state.error:
                line.append("  " + _clip(state.error, 300), style=style)
        else:
            return
        self.console.print(line)
