"""What a foreground run shows while it runs: a live frame on a terminal, plain step lines otherwise.

Both listen to committed trace events (never to executors), so what they show is exactly what the trace holds.
:class:`LiveDisplay` is the listener ``piw run`` installs: on a terminal it keeps one rich ``Live`` frame
(graph, current step card, progress panel, recent notifications) redrawn in place and bounded to the terminal
height; when the console is not a terminal it falls back to :class:`StepLog`, one line per step, so scripts
and CI logs see progress with no escape sequences at all.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from piw.cli.stdout_guard import reader_gone
from piw.errors import PiwError
from piw.progress import (
    ProgressSample,
    ProgressWindow,
    estimate_progress,
    format_progress_line,
    parse_instant,
)
from piw.store.bundle import open_bundle, piw_home
from piw.store.fold import RunState
from piw.store.session import SessionEntry
from piw.store.trace import TraceEvent
from piw.terminal import single_line
from piw.views.base import Lines, node_kinds
from piw.views.failure import where
from piw.views.source import Tail, session_tail, trace_stream

if TYPE_CHECKING:  # a terminal's frame only: a run off a terminal (a pipe, CI) never imports them
    from rich.live import Live

    from piw.views.frame import FrameModel, FrameView

_MARKS = {
    "ok": ("✓", "green"),
    "failed": ("✗", "red"),
    "timed_out": ("⏱", "yellow"),
    "cancelled": ("■", "yellow"),
}
NotificationText = Callable[[TraceEvent], "str | None"]


def _clip(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = single_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _node_label(node_id: str) -> str:
    return single_line(node_id.replace("/", " › "))


Segments = list[tuple[str, str]]
"""A step line as ``(text, style)`` pieces: joined as plain text off a terminal, styled with rich on one."""


class StepLog:
    """A trace listener that prints one line per step event to a console.

    Off a terminal (a pipe, a file, CI) the line is written as plain text straight to the console's file:
    the same words as the rich line, no styles, no wrapping, and a fraction of the cost of rendering a rich
    ``Text`` per event (which was most of what a step cost under ``piw run``). On a terminal it prints the
    styled line with rich. ``notification_text`` optionally looks up a queued notification's text (it lives in
    the session, not the trace) so the line shows the message rather than only its id.
    """

    def __init__(
        self,
        console: Console,
        notification_text: NotificationText | None = None,
        *,
        outcome_below: bool = False,
        agent_cards: bool = False,
    ) -> None:
        self.console = console
        self.notification_text = notification_text
        self.outcome_below = outcome_below
        """``piw run`` prints the outcome block after the status line, so the line leaves the error to it."""
        self.agent_cards = agent_cards
        """The agent display prints a step card (``▶ title › node``) for each delivered prompt, so an agent node's
        own ``▶ node  agent`` line waits: dropped when its prompt is sent (the card is the step's one ``▶`` line),
        printed when anything else comes first (a step that fails or stops before its prompt)."""
        self.kinds: dict[str, str] = {}
        """What each node is called (``human_decision`` for a gate), from the definition snapshot when known."""
        self.plain = not console.is_terminal
        self._tracks: dict[str, ProgressWindow] = {}
        self._agent_start: tuple[TraceEvent, RunState] | None = None

    def _progress_line(self, event: TraceEvent) -> str | None:
        """The track's progress line (label, counts, phase, ETA) from a bounded window of its samples."""
        at = parse_instant(event.at)
        key = str(event.payload.get("key", ""))
        if at is None:
            return None
        window = self._tracks.setdefault(key, ProgressWindow())
        window.add(ProgressSample(at, event.payload.get("data") or {}))
        try:
            return format_progress_line(estimate_progress(key, window.samples, at), at)
        except ValueError:
            return None

    def __call__(self, event: TraceEvent, state: RunState) -> None:
        if self.agent_cards:
            waiting, self._agent_start = self._agent_start, None
            if event.type == "node_started" and event.payload.get("nodeType") == "agent":
                self._agent_start = (event, state)
                return
            carded = event.type == "agent_prompt_sent" and waiting is not None
            if waiting is not None and not (carded and waiting[0].attempt_id == event.attempt_id):
                self._print(self.segments(*waiting), *waiting)
        self._print(self.segments(event, state), event, state)

    def _print(self, parts: Segments | None, event: TraceEvent, state: RunState) -> None:
        if parts is None:
            return
        if self.plain:
            stream = self.console.file
            stream.write("".join(text for text, _ in parts) + "\n")
            stream.flush()
        else:
            self.console.print(_text(parts))
        if (
            event.type.startswith("run_")
            and state.is_terminal
            and self.console.file is sys.stdout
            and reader_gone()
        ):
            # stdout's reader went away (``| head -1``): the run went on; its end still reaches someone.
            sys.stderr.write("".join(text for text, _ in parts) + "\n")
            sys.stderr.flush()

    def line(self, event: TraceEvent, state: RunState) -> Text | None:
        """The styled line for an event (``None`` for events that print nothing)."""
        parts = self.segments(event, state)
        return None if parts is None else _text(parts)

    def plain_line(self, event: TraceEvent, state: RunState) -> str | None:
        """The same line as plain text: what is written when the console is not a terminal."""
        parts = self.segments(event, state)
        return None if parts is None else "".join(text for text, _ in parts)

    def segments(self, event: TraceEvent, state: RunState) -> Segments | None:
        kind = event.type
        payload = event.payload
        if kind == "node_started":
            shown = self.kinds.get(event.node_id or "") or single_line(str(payload.get("nodeType", "")))
            return [("▶ ", "cyan"), (_node_label(event.node_id or ""), ""), (f"  {shown}", "dim")]
        if kind in ("node_finished", "node_failed"):
            return _finished_segments(event)
        if kind == "notification_queued" and payload.get("kind") == "channel":  # docs/channels.md
            return [("✉ ", "magenta"), (f"announced on channel {_clip(payload.get('channel', ''))}", "dim")]
        if kind == "notification_queued":
            text = self.notification_text(event) if self.notification_text else None
            ident = _clip(payload.get("notificationId", ""))
            return [
                ("✉ ", "magenta"),
                (_clip(text, 200) if text is not None else f"notification {ident}", ""),
            ]
        if kind == "update_published":
            return self._update_segments(event)
        if kind in ("include_entered", "include_exited"):
            arrow = "↘" if kind == "include_entered" else "↗"
            return [
                (f"{arrow} ", "dim"),
                (single_line(" › ".join(map(str, payload.get("mountPath", [])))), "dim"),
            ]
        if kind == "effect_outcome_unknown":  # docs/effects.md: parked for 'piw resolve'
            return [
                ("? ", "bold yellow"),
                (_node_label(event.node_id or ""), ""),
                ("  outcome unknown", "bold yellow"),
            ]
        if kind == "effect_resolved":
            return [
                ("↻ ", "dim"),
                (_node_label(event.node_id or ""), ""),
                (f"  resolved: {_clip(payload.get('resolution'))}", "dim"),
            ]
        if kind.startswith("run_"):
            return self._run_segments(event, state)
        return None

    def _update_segments(self, event: TraceEvent) -> Segments:
        """A published update: a progress track's line (counts, ETA), else its type, key and clipped data."""
        payload = event.payload
        progress = self._progress_line(event) if payload.get("type") == "progress" else None
        if progress is not None:
            return [("  ↳ ", "dim"), (single_line(progress), "dim")]
        return [
            ("  ↳ ", "dim"),
            (single_line(f"{payload.get('type')} {payload.get('key')}: "), "dim"),
            (_clip(payload.get("data"), 60), "dim"),
        ]

    def _run_segments(self, event: TraceEvent, state: RunState) -> Segments:
        """A run event's line: started, resumed (or forked), paused, or the status it ended in."""
        kind = event.type
        if kind == "run_started":
            return [
                ("● ", "bold"),
                (single_line(state.run_title or state.workflow_name), "bold"),
                (f"  {single_line(event.run_id)}", "dim"),
            ]
        if kind == "run_resumed":
            return _resumed_segments(event, state)
        if kind == "run_paused":
            return [
                ("■ paused", "bold yellow"),
                (f"; continue it with 'piw resume {single_line(event.run_id)}'", ""),
            ]
        status = state.status
        style = "green" if status in ("completed", "waiting") else "red"
        parts = [(f"■ {single_line(status)}", f"bold {style}")]
        if state.waiting_on:
            parts.append((f" on {_node_label(state.waiting_on)}", ""))
        if state.error and not self.outcome_below:
            parts.append(("  " + _clip(state.error, 300), style))
        return parts


def _finished_segments(event: TraceEvent) -> Segments:
    """A step's end: its mark, outcome and duration, and for a failure the error and where it was raised."""
    payload = event.payload
    outcome = str(payload.get("outcome", "ok"))
    mark, style = _MARKS.get(outcome, ("?", ""))
    parts = [
        (f"{mark} ", style),
        (_node_label(event.node_id or ""), ""),
        (f"  {single_line(outcome)}  {payload.get('durationMs', 0)} ms", "dim"),
    ]
    if outcome != "ok":
        parts.append(("  " + _clip(payload.get("error", ""), 200), style))
        location = where(payload.get("traceback"))
        if location:
            parts.append((f"  at {location}", "dim"))
    return parts


def _resumed_segments(event: TraceEvent, state: RunState) -> Segments:
    """``↻ resumed at node``, or for a fork's first resume where it was forked from and how many steps it adopted."""
    payload = event.payload
    at = _node_label(str(payload["resumeAt"])) if payload.get("resumeAt") else None
    forked = state.forked_from
    if not forked:
        return [("↻ resumed", "bold"), *([(f" at {at}", "")] if at else [])]
    adopted = payload.get("replayedSteps", 0)
    noun = "step" if adopted == 1 else "steps"
    parts = [
        (f"⑂ forked from {single_line(str(forked.get('runId')))}", "bold"),
        (f" at seq {forked.get('seq')}: {adopted} {noun} adopted", ""),
    ]
    if at:
        parts.append((f"; continuing at {at}", ""))
    return parts


def _text(parts: Segments) -> Text:
    line = Text()
    for text, style in parts:
        line.append(text, style=style)
    return line


class _Frame:
    """What rich ``Live`` refreshes: the frame at the current time, built under the display's lock."""

    def __init__(self, display: LiveDisplay) -> None:
        self.display = display

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.display.frame_lines(console, options.max_width)


class LiveDisplay:
    """The ``piw run`` listener: call it with ``(event, state)`` for every committed event, then ``close()``.

    On a terminal the first event opens the bundle read-only (for the definition snapshot and the session's
    notifications) and starts a ``Live`` region refreshed a few times a second, so clocks tick between events.
    Anything else printed on the same console with ``console.print`` (step cards, assistant text) appears
    above the frame. Off a terminal it is exactly :class:`StepLog`, plus the text of each notification.
    """

    def __init__(
        self, console: Console, *, home: Path | None = None, refresh_per_second: float = 4.0
    ) -> None:
        self.console = console
        self.home = home
        self.refresh_per_second = refresh_per_second
        self.interactive = console.is_terminal
        self._lock = threading.RLock()
        self._model: FrameModel | None = None
        self._session: Tail[SessionEntry] | None = None
        self._live: Live | None = None
        self._opened = False
        self._steps = StepLog(console, self._notification_text, outcome_below=True, agent_cards=True)

    def _open(self, event: TraceEvent, state: RunState) -> None:
        """Open the bundle on the first event (``run_started``, or ``run_resumed`` for a resume)."""
        self._opened = True
        try:
            bundle = open_bundle(self.home or piw_home(), event.run_id)
            self._session = session_tail(bundle)
            snapshot = bundle.read_snapshot()
            self._steps.kinds = node_kinds(snapshot)
            if not self.interactive:
                return
            from rich.live import Live

            from piw.views.frame import FrameModel

            model = FrameModel(snapshot, state)
            model.tracks.feed(trace_stream(bundle.trace_path, limit=event.seq - 1))
        except PiwError:
            return  # the step lines still work without the bundle
        self._model = model
        self._live = Live(
            _Frame(self),
            console=self.console,
            refresh_per_second=self.refresh_per_second,
            vertical_overflow="crop",
        )
        self._live.start()

    def _notification_text(self, event: TraceEvent) -> str | None:
        if self._session is None:
            return None
        wanted = event.payload.get("notificationId")
        for entry in self._session.read().records:
            details = entry.message.get("details")
            if isinstance(details, dict) and details.get("notificationId") == wanted:
                return str(entry.message.get("content", ""))
        return None

    def __call__(self, event: TraceEvent, state: RunState) -> None:
        with self._lock:
            if not self._opened:
                self._open(event, state)
            if self._model is None or self._session is None:
                self._steps(event, state)
                return
            self._model.add_events([event], state)
            self._model.add_entries(self._session.read().records)
            if event.type in ("node_finished", "node_failed"):
                self._model.end_stream()
            if state.is_terminal and self._live is not None:
                self._live.refresh()

    def stream_text(self, delta: str) -> None:
        """Show assistant text as it streams, under the current step card (terminal only; a no-op otherwise).

        While the frame is live, text written straight to the console would tear it; an agent display that
        streams should hand its deltas here and print only settled messages with ``console.print``.
        """
        with self._lock:
            if self._model is not None:
                self._model.stream(delta)

    def end_stream(self) -> None:
        with self._lock:
            if self._model is not None:
                self._model.end_stream()

    def frame(self) -> FrameView | Text:
        """The current frame (for a final print or a test); empty before the first event."""
        with self._lock:
            model = self._model
            if model is None:
                return Text("")
            state = model.state
            finished = parse_instant(state.finished_at) if state.is_terminal and state.finished_at else None
            now = finished or datetime.now(UTC)
            return model.frame(now, live=True, height=max(5, self.console.size.height - 1))

    def frame_lines(self, console: Console, width: int) -> Lines:
        """The frame drawn to lines under the lock, so the engine thread never changes it mid-draw."""
        with self._lock:
            frame = self.frame()
            if isinstance(frame, Text):
                return Lines([frame])
            return Lines(list(frame.lines(console, width)))

    def close(self) -> None:
        """Stop redrawing and leave the last frame on screen; safe to call more than once."""
        with self._lock:
            live, self._live = self._live, None
        if live is not None:
            live.stop()
