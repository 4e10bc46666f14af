"""What the run screen's panes show: pure functions from the reader, a position and a filter to a pane source.

The run screen (:mod:`piw.app.run_screen`) owns the widgets, the keys and the worker threads; everything it draws
comes from here, so a pane's content is a function of ``(reader, state, position, filter)`` and nothing else
(``docs/views.md``, "piw view").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rich.console import Console
from rich.progress_bar import ProgressBar
from rich.text import Text

from piw.app.reader import RunReader
from piw.app.sources import LineSource, StepsSource, TextSource, UpdatesSource, ViewSource, trace_source
from piw.store.fold import RunState
from piw.store.session import SessionEntry
from piw.views.base import fmt_clock, node_label, safe
from piw.views.budget import spent_line
from piw.views.conversation import NOTIFICATION_TYPE, conversation_view
from piw.views.progress import Tracks, bar_text, progress_view
from piw.views.state import state_view
from piw.views.step_detail import conversation_range
from piw.views.steps import steps_view
from piw.views.trace import matches

POSITION_BAR = 24


@dataclass(frozen=True)
class Position:
    """Where the screen stands: the state it shows, its clock, and the filter the panes other than steps apply."""

    state: RunState
    now: datetime
    at: int | None
    """The seq shown (``None``: the end, followed live)."""
    upto: int
    node: str | None
    """The node picked in the graph."""
    attempt: tuple[str, str] | None
    """``(node, attempt)`` of the steps cursor."""
    live_writer: bool | None
    expanded: bool

    @property
    def filter(self) -> tuple[str | None, str | None]:
        """The node and attempt the panes other than steps are filtered to."""
        if self.attempt is not None:
            return self.attempt
        return self.node, None


def pane_source(name: str, reader: RunReader, position: Position) -> LineSource:
    """The source of pane ``name`` at ``position``."""
    ready = reader.indexed.is_set()
    state, now = position.state, position.now
    node, attempt = position.filter
    if not state.run_id and not ready:
        return TextSource([f"Replaying the trace… {int(reader.progress * 100)}%"])
    if name == "steps":
        return StepsSource(state, steps_view(state, now), position.node)
    if name == "state":
        live = position.live_writer if position.at is None else None
        return ViewSource(
            state_view(state, now, live=live, notice=reader.notice, at=position.at, forks=reader.forks)
        )
    if not ready:
        return TextSource([f"Reading the trace… {int(reader.progress * 100)}%"])
    if name == "conversation":
        entries = entries_for(reader, state, position.at, node, attempt)
        return ViewSource(conversation_view(entries, position.expanded))
    if name == "updates":
        return UpdatesSource(reader, state, position.upto, node, attempt)
    if name == "progress":
        return ViewSource(
            progress_view(tracks_for(reader, position.at, position.upto, node, attempt), now, bars=True)
        )
    return trace_source(reader, position.upto, node, attempt)


def entries_for(
    reader: RunReader, state: RunState, at: int | None, node: str | None, attempt: str | None
) -> list[SessionEntry]:
    """The session entries up to ``at``, only those of ``node`` (and ``attempt``) when one is picked."""
    entries = list(reader.entries_at(at if reader.indexed.is_set() else None))
    if node is None:
        return entries
    ranges = [
        step.conversation
        for step in state.steps
        if (step.node_id == node or step.node_id.startswith(node + "/"))
        and (attempt is None or step.attempt_id == attempt)
    ]
    picked: list[SessionEntry] = []
    for conversation in ranges:
        picked.extend(conversation_range(entries, conversation))
    return picked


def tracks_for(reader: RunReader, at: int | None, upto: int, node: str | None, attempt: str | None) -> Tracks:
    """The progress tracks up to ``upto``, from the updates of ``node`` (and ``attempt``) when one is picked."""
    if node is None and attempt is None:
        return reader.tracks_at(at)
    tracks = Tracks()
    for seq in reader.index_data.update_seqs:
        if seq > upto:
            break
        event = reader.event(seq)
        if event is not None and matches(event, node, attempt):
            tracks.add(event)
    return tracks


def position_line(
    reader: RunReader, position: Position, replaying: int | None, active: str, console: Console
) -> Text:
    """``seq 12/40 ▰▰▱▱  ⏪ time travel 10:02:03 (l: live)  filter: node review (esc clears)``."""
    last = reader.last_seq
    line = Text(f"seq {position.upto:,}/{last:,} ", style="bold")
    bar = ProgressBar(total=max(1, last), completed=position.upto, width=POSITION_BAR)
    line.append_text(bar_text(console, bar, POSITION_BAR))
    if not reader.indexed.is_set():
        line.append(f"  reading the trace… {int(reader.progress * 100)}%", style="yellow")
    elif replaying is not None:
        line.append(f"  replaying to seq {replaying:,}…", style="yellow")
    elif position.at is not None:
        event = reader.event(position.at)
        moment = fmt_clock(event.at) if event else ""
        line.append(f"  ⏪ time travel {moment} (l: live)", style="magenta")
    elif position.state.status == "running":
        line.append("  ● live", style="green")
    else:
        line.append("  ■ ended", style="dim")
    filters = filter_text(position, active)
    if filters:
        line.append("  filter: ", style="dim")
        line.append_text(safe(filters, "cyan"))
        line.append(" (esc clears)", style="dim")
    return line


def filter_text(position: Position, active: str) -> str:
    """``node review · review · attempt 1a2b3c4d`` for the filter in force (empty when none)."""
    parts = []
    if position.node:
        parts.append(f"node {node_label(position.node)}")
    if position.attempt and active != "steps":
        parts.append(f"{node_label(position.attempt[0])} · attempt {position.attempt[1][:8]}")
    return " · ".join(parts)


def lineage_budget_line(state: RunState, forks: tuple[str, ...]) -> Text | None:
    """``⑂ forked from RUN at seq N · 2 forks · budget 3 of 5 requests · …`` (``None`` when none applies)."""
    parts: list[Text] = []
    origin = state.forked_from
    if origin:
        parts.append(safe(f"⑂ forked from {origin.get('runId')} at seq {origin.get('seq')}", "magenta"))
    if forks:
        shown = ", ".join(forks[:2]) + (f" and {len(forks) - 2} more" if len(forks) > 2 else "")
        parts.append(safe(f"forks: {shown}", "magenta"))
    if state.budget:
        parts.append(Text("budget ", style="dim") + safe(spent_line(state.spent, state.budget)))
    if not parts:
        return None
    return Text("  ") + Text(" · ").join(parts)


def notification_id(entry: SessionEntry) -> str | None:
    """The ``notificationId`` of a notification entry (``None`` for any other entry)."""
    message = entry.message
    if message.get("role") != "custom" or message.get("customType") != NOTIFICATION_TYPE:
        return None
    details = message.get("details")
    return str(details.get("notificationId")) if isinstance(details, dict) else None
