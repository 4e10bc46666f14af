"""The updates view: the current value of every ``(type, key)`` pair, then the full publication history.

Current values come from the replayed state (bounded: at most 1,024 pairs per run). The history streams the
trace page by page, so a run with a million updates is shown without holding them; each row is the generic one
of ``docs/design/updates-progress.md`` §8 (seq, time, node, attempt, type, key, data clipped to 60 characters).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from rich.console import Console
from rich.text import Text

from piw.store.fold import RunState, UpdateRecord
from piw.store.trace import TraceEvent
from piw.views.base import View, compact, fmt_clock, node_label, safe, short_id
from piw.views.table import Column, table_lines

DATA_LIMIT = 60


class EventSource(Protocol):
    """A re-iterable stream of trace events (each iteration reads the trace again from the start)."""

    def __iter__(self) -> Iterator[TraceEvent]: ...


CURRENT = (
    Column("type", 8, 24, priority=8),
    Column("key", 6, 28, priority=9),
    Column("node", 6, 20, priority=3),
    Column("seq", 4, 7, priority=2, right=True),
    Column("value", 10, DATA_LIMIT, priority=7, flex=True),
)
HISTORY = (
    Column("seq", 4, 7, priority=6, right=True),
    Column("at", 12, 12, priority=2),
    Column("node", 6, 20, priority=4),
    Column("attempt", 8, 8, priority=1),
    Column("type", 8, 24, priority=8),
    Column("key", 6, 28, priority=9),
    Column("data", 10, DATA_LIMIT, priority=7, flex=True),
)


def _current_rows(records: Iterable[UpdateRecord]) -> Iterator[list[Text | str]]:
    for record in records:
        yield [
            safe(record.type),
            safe(record.key),
            Text(node_label(record.node_id)),
            str(record.seq),
            safe(compact(record.data, DATA_LIMIT)),
        ]


def _history_rows(events: Iterable[TraceEvent]) -> Iterator[list[Text | str]]:
    for event in events:
        if event.type != "update_published":
            continue
        payload = event.payload
        node = Text(node_label(event.node_id or ""))
        kind, key = safe(str(payload.get("type", ""))), safe(str(payload.get("key", "")))
        data = safe(compact(payload.get("data"), DATA_LIMIT))
        yield [str(event.seq), fmt_clock(event.at), node, short_id(event.attempt_id), kind, key, data]


def current_lines(state: RunState, width: int) -> list[Text]:
    """``Current values (N)`` and its table, or the one-line "nothing published" message."""
    records = state.sorted_updates()
    if not records:
        return [Text("No updates published.", style="dim")]
    return [
        Text(f"Current values ({len(records)})", style="bold"),
        *table_lines(CURRENT, _current_rows(records), width),
    ]


def history_header(width: int) -> Text:
    return next(table_lines(HISTORY, (), width))


def history_rows(events: Iterable[TraceEvent], width: int) -> list[Text]:
    """The history rows of the ``update_published`` events among ``events`` (no header)."""
    return list(table_lines(HISTORY, _history_rows(events), width))[1:]


class UpdatesView(View):
    def __init__(self, state: RunState, events: EventSource) -> None:
        self.state, self.events = state, events

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        records = self.state.sorted_updates()
        if not records:
            yield Text("No updates published.", style="dim")
            return
        yield Text(f"Current values ({len(records)})", style="bold")
        yield from table_lines(CURRENT, _current_rows(records), width)
        yield Text("")
        yield Text("History", style="bold")
        yield from table_lines(HISTORY, _history_rows(self.events), width)


def updates_view(state: RunState, events: EventSource) -> UpdatesView:
    return UpdatesView(state, events)
