"""One frame of the live display (``piw run`` on a terminal, ``piw watch``): summary, graph, step card,
progress, notifications — bounded to the terminal height.

:class:`FrameModel` is the only incremental piece: it folds new events with ``fold_more`` (or takes the state
the engine already folded), keeps bounded progress windows, the latest step message and the last few
notifications. Rendering is a pure function of the model and ``now``, so clocks tick without reading or
writing anything. When the frame does not fit, the graph gives way first and is windowed around the current
node.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.text import Text

from piw.store.fold import RunState, fold_more
from piw.store.live_stream import LiveReply
from piw.store.session import SessionEntry
from piw.store.trace import TraceEvent
from piw.views.base import View, fit, safe, safe_block
from piw.views.budget import spent_line
from piw.views.cards import compact_card_lines
from piw.views.conversation import NOTIFICATION_TYPE, STEP_TYPE
from piw.views.graph import draw_graph
from piw.views.phases import phase_lines
from piw.views.progress import Tracks, panel_lines
from piw.views.state import current_line, status_line

NOTIFICATIONS = 3
STREAM_CHARS, STREAM_LINES = 2000, 3
MIN_GRAPH = 3


@dataclass(frozen=True)
class Notification:
    id: str
    kind: str
    text: str


class FrameModel:
    """What a frame shows, kept up to date from new trace events and session entries."""

    def __init__(self, snapshot: Mapping[str, Any], state: RunState | None = None) -> None:
        self.snapshot = snapshot
        self.reset(state)

    def reset(self, state: RunState | None = None) -> None:
        """Forget everything (the trace was repaired and is read again from the start)."""
        self.state = state or RunState()
        self.tracks = Tracks()
        self.notifications: deque[Notification] = deque(maxlen=NOTIFICATIONS)
        self.step: dict[str, Any] | None = None
        self.streaming = ""
        self.live_reply: LiveReply | None = None
        """Another process's stream of the current step (``piw watch``, from the bundle's side file)."""
        self.committed: tuple[str, str] | None = None
        """``(attempt id, text)`` of the newest committed assistant reply: shown once the stream has ended."""

    def stream(self, delta: str) -> None:
        """Assistant text arriving for the current step (only its tail is kept, and shown under the card)."""
        self.streaming = (self.streaming + delta)[-STREAM_CHARS:]

    def end_stream(self) -> None:
        self.streaming = ""

    def add_events(self, events: Iterable[TraceEvent], state: RunState | None = None) -> None:
        """Take new events; ``state`` is the already-folded state when the caller has it (the engine does)."""
        batch = list(events)
        for event in batch:
            self.tracks.add(event)
        self.state = state if state is not None else fold_more(self.state, batch)

    def add_entries(self, entries: Iterable[SessionEntry]) -> None:
        for entry in entries:
            message = entry.message
            if message.get("role") == "assistant" and self.step is not None and not message.get("retried"):
                attempt = str((self.step.get("contract") or {}).get("attemptId", ""))
                self.committed = (attempt, _reply_text(message.get("content")))
            if message.get("role") != "custom":
                continue
            details = message.get("details")
            details = details if isinstance(details, dict) else {}
            if message.get("customType") == NOTIFICATION_TYPE:
                ident, kind = str(details.get("notificationId", "")), str(details.get("kind", ""))
                self.notifications.append(Notification(ident, kind, str(message.get("content", ""))))
            elif message.get("customType") == STEP_TYPE:
                self.step = details

    def reply_lines(self) -> tuple[str, str] | None:
        """``(text, style)`` to show under the current step's card: this process's own stream, else another
        process's (``live_reply``) while it streams, else the reply the conversation committed for the step."""
        current = self.state.current
        if self.streaming.strip():
            return self.streaming.strip(), "dim"
        live = self.live_reply
        if live is not None and not live.ended:
            tools = "".join(f"\n⚙ {tool}" for tool in live.tools[-2:])
            text = (live.text.strip() + " ▍" if live.text.strip() else "") + tools
            return (text.strip(), "dim") if text.strip() else None
        if current is not None and self.committed is not None and self.committed[0] == current.attempt_id:
            return (self.committed[1].strip(), "") if self.committed[1].strip() else None
        return None

    def notification_text(self, event: TraceEvent) -> str | None:
        """The text of a recent notification named by a ``notification_queued`` event."""
        wanted = event.payload.get("notificationId")
        return next((note.text for note in self.notifications if note.id == wanted), None)

    def card_details(self) -> dict[str, Any] | None:
        """The current step's card: its real step message when one was delivered, else one built from
        state."""
        current = self.state.current
        if current is None:
            return None
        step = self.step
        if step is not None and (step.get("contract") or {}).get("attemptId") == current.attempt_id:
            return step
        presentation = {"runTitle": self.state.run_title or "", "statusDetail": current.status_detail or ""}
        contract = {"workflowName": self.state.workflow_name, "nodeId": current.node_id}
        return {"kind": "step", "contract": contract, "presentation": presentation}

    def frame(
        self, now: datetime, *, live: bool | None = None, height: int | None = None, notice: str | None = None
    ) -> FrameView:
        return FrameView(self, now, live, height, notice)


def _reply_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def summary_lines(state: RunState, now: datetime, live: bool | None) -> list[Text]:
    """Title and status, the current node, and the error of a failed run."""
    head = Text("● ", style="bold") + safe(state.run_title or state.workflow_name or "run", "bold")
    head.append("  ")
    head.append_text(status_line(state, live))
    head.append_text(safe(f"  {state.run_id}", "dim"))
    lines = [head]
    if state.current is not None:
        lines.append(Text("  ") + current_line(state, now))
        lines += [
            Text("    ") + line for line in phase_lines(state, now, live_only=True)
        ]  # a script's phases
    if state.error:
        lines.append(Text("  ") + safe(state.error, "red"))
    if state.budget:
        lines.append(
            Text("  budget ", style="dim") + Text(spent_line(state.spent, state.budget), style="dim")
        )
    return lines


class FrameView(View):
    def __init__(
        self,
        model: FrameModel,
        now: datetime,
        live: bool | None,
        height: int | None,
        notice: str | None = None,
    ) -> None:
        self.model, self.now, self.live, self.height, self.notice = model, now, live, height, notice

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        model, now = self.model, self.now
        top = summary_lines(model.state, now, self.live)
        if self.notice:
            top.insert(0, safe(f"⚠ {self.notice}", "yellow"))
        bottom: list[Text] = []
        details = model.card_details()
        if details is not None:
            bottom += [Text("")] + [Text(line, style="cyan") for line in compact_card_lines(details, width)]
            reply = model.reply_lines()
            if reply is not None:
                bottom += list(safe_block(reply[0], reply[1]).wrap(console, width))[-STREAM_LINES:]
        progress = panel_lines(model.tracks, model.state, now, console=console, width=width)
        if progress:
            bottom += [Text(""), Text("Progress", style="bold"), *progress]
        if model.notifications:
            bottom.append(Text(""))
            for note in model.notifications:
                bottom.append(Text("✉ ", style="magenta") + safe(note.text))
        drawing = draw_graph(model.snapshot, model.state, now, width)
        graph = [Text(""), *drawing.lines]
        if self.height is not None:
            room = max(MIN_GRAPH, self.height - len(top) - len(bottom))
            graph = _window(
                graph, room, None if drawing.focus is None else (drawing.focus[0] + 1, drawing.focus[1] + 1)
            )
        lines = top + graph + bottom
        if self.height is not None:
            lines = lines[: max(1, self.height)]
        for line in lines:
            yield fit(line, width)


def _window(lines: list[Text], room: int, focus: tuple[int, int] | None) -> list[Text]:
    """At most ``room`` lines, keeping the focus rows visible and marking what was cut with ``⋮``."""
    if len(lines) <= room:
        return lines
    focus_top, focus_bottom = focus if focus is not None else (0, 0)
    start = max(0, min(focus_top - (room - (focus_bottom - focus_top + 1)) // 2, len(lines) - room))
    shown = lines[start : start + room]
    if start > 0:
        shown[0] = Text("  ⋮", style="dim")
    if start + room < len(lines):
        shown[-1] = Text("  ⋮", style="dim")
    return shown
