"""The trace view: the raw events in order, optionally only one node's or one attempt's, streamed.

Each row is the envelope (seq, time, type, node, attempt) and a one-line summary of the payload; the payload
in full is in ``trace.ndjson`` itself. Filtering happens while streaming, so the view never holds the trace.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator

from rich.console import Console
from rich.text import Text

from piw.store.trace import TraceEvent
from piw.store.viewcache import CachedRows
from piw.terminal import single_line
from piw.views.base import View, compact, fmt_clock, fmt_duration, node_label, safe, short_id
from piw.views.row_cache import RowSource, cached_table, layout_key
from piw.views.table import Column, layout, table_lines, table_plain
from piw.views.updates import EventSource

COLUMNS = (
    Column("seq", 4, 7, priority=8, right=True),
    Column("at", 12, 12, priority=3),
    Column("type", 12, 22, priority=9),
    Column("node", 6, 16, priority=6),
    Column("attempt", 8, 8, priority=2),
    Column("payload", 10, 200, priority=7, flex=True),
)
_STYLES = {
    "node_failed": "red",
    "run_failed": "red",
    "run_timed_out": "red",
    "run_interrupted": "red",
    "node_finished": "green",
    "run_completed": "green",
    "node_started": "cyan",
}
_SUMMARY_KEYS = {
    "run_started": ("workflowName", "runTitle"),
    "node_started": ("nodeType", "statusDetail"),
    "node_finished": ("outcome", "durationMs", "output"),
    "node_failed": ("outcome", "durationMs", "error"),
    "agent_prompt_sent": ("deliveryKind", "completion", "prompt"),
    "update_published": ("type", "key", "data"),
    "notification_queued": ("kind", "notificationId"),
    "assistant_completion_recorded": ("adopted", "textPreview"),
}


def summary(event: TraceEvent) -> str:
    """The payload in one line: the telling values of known types joined by `` · ``, else the whole object."""
    payload = event.payload
    keys = _SUMMARY_KEYS.get(event.type)
    if keys is None:
        return compact(payload, 200) if payload else ""
    parts = []
    for key in keys:
        if key in payload:
            value = payload[key]
            if type(value) is str:
                parts.append(value)  # sanitized with the rest below (single_line maps each character alone)
            elif key == "durationMs" and isinstance(value, int | float):
                parts.append(fmt_duration(value))
            else:
                parts.append(compact(value))
    return compact(" · ".join(parts), 200)


def matches(event: TraceEvent, node: str | None, attempt: str | None) -> bool:
    """Node filter: the node itself or anything mounted under it; attempt filter: the id or a prefix of it."""
    if node is not None and not (event.node_id == node or (event.node_id or "").startswith(node + "/")):
        return False
    return attempt is None or (event.attempt_id or "").startswith(attempt)


def _rows(events: Iterable[TraceEvent], node: str | None, attempt: str | None) -> Iterator[list[Text | str]]:
    for event in events:
        if matches(event, node, attempt):
            kind = safe(event.type, _STYLES.get(event.type, ""))
            where = Text(node_label(event.node_id or ""))
            yield [
                str(event.seq),
                fmt_clock(event.at),
                kind,
                where,
                short_id(event.attempt_id),
                safe(summary(event)),
            ]


def _plain_rows(events: Iterable[TraceEvent], node: str | None, attempt: str | None) -> Iterator[list[str]]:
    """:func:`_rows` as plain strings (the same text, no styles; ``summary`` is one sanitized line already)."""
    if node is not None or attempt is not None:
        events = (event for event in events if matches(event, node, attempt))
    for event in events:
        yield [
            str(event.seq),
            fmt_clock(event.at),
            _type_label(event.type),
            node_label(event.node_id or ""),
            short_id(event.attempt_id),
            summary(event),
        ]


@functools.lru_cache(maxsize=256)
def _type_label(kind: str) -> str:
    """An event type as shown (a handful of types fill a long trace)."""
    return single_line(kind)


def trace_header(width: int) -> Text:
    """The trace table's header line at ``width`` (column widths never depend on the rows)."""
    return next(table_lines(COLUMNS, (), width))


def trace_rows(
    events: Iterable[TraceEvent], width: int, node: str | None = None, attempt: str | None = None
) -> list[Text]:
    """One line per matching event, no header: a page of the trace for a pager."""
    return list(table_lines(COLUMNS, _rows(events, node, attempt), width))[1:]


class TraceView(View):
    """``source`` and ``events_after`` (the events from a trace offset on, numbered from a ``seq``) let the plain
    table of the whole trace use the bundle's rendered-row cache (:mod:`piw.views.row_cache`)."""

    def __init__(
        self,
        events: EventSource,
        node: str | None = None,
        attempt: str | None = None,
        *,
        source: RowSource | None = None,
        events_after: Callable[[int, int], Iterable[TraceEvent]] | None = None,
    ) -> None:
        self.events, self.node, self.attempt = events, node, attempt
        self.source, self.events_after = source, events_after

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        rows = _rows(self.events, self.node, self.attempt)
        first = next(rows, None)
        if first is None:
            yield Text(self._nothing(), style="dim")
            return
        yield from table_lines(COLUMNS, itertools.chain((first,), rows), width)

    def plain_lines(self, width: int) -> Iterator[str]:
        """The same lines as :meth:`lines` as plain text, for output that is not a terminal: a million-event
        trace is written without building a rich ``Text`` per cell."""
        rows = _plain_rows(self.events, self.node, self.attempt)
        first = next(rows, None)
        if first is None:
            yield self._nothing()
            return
        yield from table_plain(COLUMNS, itertools.chain((first,), rows), width)

    def plain_blocks(self, width: int) -> Iterator[bytes | memoryview] | None:
        """:meth:`plain_lines` of the whole trace as UTF-8 blocks, the rows of the events a cache holds from the
        cache; ``None`` (use :meth:`plain_lines`) when filtered, or with nothing to check a cache against."""
        source, events_after = self.source, self.events_after
        unfiltered = self.node is None and self.attempt is None
        if not unfiltered or source is None or events_after is None or not source.seq:
            return None
        header = next(table_plain(COLUMNS, (), width))

        def settled(start: int, cached: CachedRows | None) -> Iterator[str]:
            if start == 0:
                events: Iterable[TraceEvent] = self.events
            elif cached is not None and start == cached.rows:
                events = events_after(cached.header.offset, start + 1)
            else:
                return iter(())
            return itertools.islice(table_plain(COLUMNS, _plain_rows(events, None, None), width), 1, None)

        key = layout_key("trace", layout(COLUMNS, width))
        return cached_table(source, "trace", key, header, source.seq, settled, iter(()))

    def _nothing(self) -> str:
        if self.node is not None or self.attempt is not None:
            what = " and ".join(
                f"{label} {value!r}"
                for label, value in (("node", self.node), ("attempt", self.attempt))
                if value
            )
            return f"No trace events for {safe(what).plain}."
        return "No trace events."


def trace_view(
    events: EventSource,
    node: str | None = None,
    attempt: str | None = None,
    *,
    source: RowSource | None = None,
    events_after: Callable[[int, int], Iterable[TraceEvent]] | None = None,
) -> TraceView:
    return TraceView(events, node, attempt, source=source, events_after=events_after)
