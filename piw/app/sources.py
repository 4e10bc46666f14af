"""Line sources: what each pane of the viewer draws, as pages of ``rich.text.Text`` lines for a width.

A pane asks its source for a sticky header, a row count and a page of rows; it never asks for everything at
once. Small views (state, graph, progress, the conversation) are drawn whole by the pure views of
:mod:`piw.views` and cached per width; the steps table and the trace are paged row by row (the trace through
the reader's offset index), so a run of a million events costs one page per screen. Sources hold no Textual
objects, which keeps them testable with a plain console.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from rich.console import Console
from rich.text import Text

from piw.app.reader import RunReader
from piw.app.runs import RunRow
from piw.store.fold import RunState, StepRecord
from piw.store.trace import TraceEvent
from piw.views.base import STATUS_STYLES, View, fit, safe
from piw.views.steps import StepsView
from piw.views.table import Column, layout, table_lines
from piw.views.trace import matches, trace_header, trace_rows
from piw.views.updates import current_lines, history_header, history_rows

SCAN_PAGE = 4_096


class LineSource(Protocol):
    """What a pane reads; rows are numbered from 0 below the header."""

    def header(self, console: Console, width: int) -> list[Text]: ...
    def count(self, console: Console, width: int) -> int: ...
    def rows(self, console: Console, width: int, start: int, stop: int) -> list[Text]: ...


class ViewSource:
    """A whole view, drawn once per width (for views that are small by nature)."""

    def __init__(self, view: View, empty: str = "") -> None:
        self.view, self.empty = view, empty
        self._cache: tuple[int, list[Text]] | None = None

    def _lines(self, console: Console, width: int) -> list[Text]:
        if self._cache is None or self._cache[0] != width:
            lines = [fit(line, width) for line in self.view.lines(console, width)]
            self._cache = (width, lines or [Text(self.empty, style="dim")])
        return self._cache[1]

    def header(self, console: Console, width: int) -> list[Text]:
        return []

    def count(self, console: Console, width: int) -> int:
        return len(self._lines(console, width))

    def rows(self, console: Console, width: int, start: int, stop: int) -> list[Text]:
        return self._lines(console, width)[start:stop]


class TextSource(ViewSource):
    """Fixed lines (a message such as ``Reading the trace… 40%``)."""

    def __init__(self, lines: Sequence[Text | str]) -> None:
        fixed = [line if isinstance(line, Text) else Text(line, style="dim") for line in lines]
        super().__init__(_Fixed(fixed))


class _Fixed(View):
    def __init__(self, lines: list[Text]) -> None:
        self._fixed = lines

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        yield from self._fixed


class StepsSource:
    """The steps table, a page of attempts at a time (``node`` keeps only that node's attempts)."""

    def __init__(self, state: RunState, view: StepsView, node: str | None = None) -> None:
        self.state, self.view, self.node = state, view, node
        self.numbers: list[int] | None = None
        if node is not None:
            self.numbers = [i for i, step in enumerate(state.steps) if _under(step.node_id, node)]
            if state.current is not None and _under(state.current.node_id, node):
                self.numbers.append(len(state.steps))

    def header(self, console: Console, width: int) -> list[Text]:
        if not self.count(console, width):
            return []
        return [self.view.header(width)]

    def count(self, console: Console, width: int) -> int:
        return self.view.count() if self.numbers is None else len(self.numbers)

    def rows(self, console: Console, width: int, start: int, stop: int) -> list[Text]:
        if not self.count(console, width):
            what = f" for {self.node}" if self.node else ""
            return [Text(f"No steps{what} yet.", style="dim")] if start == 0 else []
        if self.numbers is None:
            return self.view.row_lines(start, stop, width)
        return [self.view.row_lines(n, n + 1, width)[0] for n in self.numbers[start:stop]]

    def step(self, row: int) -> tuple[int, StepRecord | None]:
        """``(step number, record)`` of a row; the record is ``None`` for the attempt in progress."""
        number = row if self.numbers is None else (self.numbers[row] if row < len(self.numbers) else -1)
        steps = self.state.steps
        if 0 <= number < len(steps):
            return number + 1, steps[number]
        return number + 1, None


def _under(node_id: str, node: str) -> bool:
    return node_id == node or node_id.startswith(node + "/")


class SeqSource:
    """A table of trace events, paged by seq through the reader's index.

    ``seqs`` lists the events shown when they are not simply ``1..upto`` (a filter, or only updates); a filter
    is resolved by one scan of the prefix, page by page.
    """

    def __init__(
        self,
        reader: RunReader,
        upto: int,
        header: Callable[[int], Text],
        rows: Callable[[Iterable[TraceEvent], int], list[Text]],
        seqs: Sequence[int] | None = None,
        empty: str = "No trace events.",
    ) -> None:
        self.reader, self.upto, self._header, self._rows = reader, upto, header, rows
        self.seqs, self.empty = seqs, empty

    def seq_of(self, row: int) -> int | None:
        if self.seqs is None:
            return row + 1 if 0 <= row < self.upto else None
        return self.seqs[row] if 0 <= row < len(self.seqs) else None

    def row_of(self, seq: int) -> int:
        """The row showing ``seq``, or the last row before it."""
        if self.seqs is None:
            return max(0, min(seq, self.upto) - 1)
        return max(0, bisect_right(list(self.seqs), seq) - 1)

    def header(self, console: Console, width: int) -> list[Text]:
        return [self._header(width)] if self.count(console, width) else []

    def count(self, console: Console, width: int) -> int:
        return self.upto if self.seqs is None else len(self.seqs)

    def rows(self, console: Console, width: int, start: int, stop: int) -> list[Text]:
        if not self.count(console, width):
            return [Text(self.empty, style="dim")] if start == 0 else []
        if self.seqs is None:
            first, last = start + 1, min(stop, self.upto) + 1
            return self._rows(self.reader.events(first, last), width)
        wanted = list(self.seqs[start:stop])
        if not wanted:
            return []
        keep = set(wanted)
        events = (e for e in self.reader.events(wanted[0], wanted[-1] + 1) if e.seq in keep)
        return self._rows(events, width)


def matching_seqs(
    reader: RunReader, upto: int, node: str | None, attempt: str | None, kind: str | None = None
) -> array[int]:
    """Seqs ``<= upto`` of the events that match the node/attempt filter (and ``kind``, when given)."""
    found = array("q")
    if kind == "update_published":
        candidates: Iterable[TraceEvent] = _events_of(
            reader, [s for s in reader.index_data.update_seqs if s <= upto]
        )
    else:
        candidates = reader.events(1, upto + 1)
    for event in candidates:
        if (kind is None or event.type == kind) and matches(event, node, attempt):
            found.append(event.seq)
    return found


def _events_of(reader: RunReader, seqs: list[int]) -> Iterator[TraceEvent]:
    for start in range(0, len(seqs), SCAN_PAGE):
        page = seqs[start : start + SCAN_PAGE]
        keep = set(page)
        yield from (e for e in reader.events(page[0], page[-1] + 1) if e.seq in keep)


def trace_source(reader: RunReader, upto: int, node: str | None, attempt: str | None) -> SeqSource:
    seqs = matching_seqs(reader, upto, node, attempt) if (node or attempt) else None
    what = " and ".join(f"{k} {v}" for k, v in (("node", node), ("attempt", attempt)) if v)
    empty = f"No trace events for {safe(what).plain}." if what else "No trace events."
    return SeqSource(reader, upto, trace_header, lambda ev, w: trace_rows(ev, w), seqs, empty)


class UpdatesSource(SeqSource):
    """Current values (from the state) above the publication history (paged through the trace)."""

    def __init__(
        self, reader: RunReader, state: RunState, upto: int, node: str | None, attempt: str | None
    ) -> None:
        if node or attempt:
            seqs: Sequence[int] = matching_seqs(reader, upto, node, attempt, "update_published")
        else:
            seqs = [s for s in reader.index_data.update_seqs if s <= upto]
        super().__init__(reader, upto, history_header, history_rows, seqs, "No updates published.")
        self.state = state
        self._current: tuple[int, list[Text]] | None = None

    def _top(self, width: int) -> list[Text]:
        if self._current is None or self._current[0] != width:
            lines = current_lines(self.state, width)
            if self.state.updates:
                lines += [Text(""), Text("History", style="bold"), history_header(width)]
            self._current = (width, lines)
        return self._current[1]

    def header(self, console: Console, width: int) -> list[Text]:
        return []

    def count(self, console: Console, width: int) -> int:
        return len(self._top(width)) + (len(self.seqs or ()) if self.state.updates else 0)

    def rows(self, console: Console, width: int, start: int, stop: int) -> list[Text]:
        top = self._top(width)
        out = top[start:stop]
        if stop > len(top) and self.state.updates:
            first, last = max(0, start - len(top)), stop - len(top)
            out += super().rows(console, width, first, last)
        return out


RUN_COLUMNS = (
    Column("status", 9, 12, priority=9),
    Column("title", 10, 32, priority=8, flex=True),
    Column("age", 4, 6, priority=6, right=True),
    Column("current node", 8, 20, priority=5),
    Column("cost", 7, 9, priority=3, right=True),
    Column("run id", 14, 40, priority=4),
)
ID_SUFFIX = 9
"""``-`` and the eight hex digits that end every run id (docs/bundle-format.md §2): never cut."""
ID_MIN = 19 + 1 + ID_SUFFIX
"""The narrowest run id column: the start time, ``…``, the suffix (``20261203T072758281Z…-9b26d682``)."""


def run_columns(ids: Iterable[str]) -> tuple[Column, ...]:
    """:data:`RUN_COLUMNS` with the run id column as wide as the longest id (``ID_MIN`` at least): a narrow
    list leaves the column out rather than cutting an id's end."""
    longest = max((len(run_id) for run_id in ids), default=ID_MIN)
    return (*RUN_COLUMNS[:-1], Column("run id", min(ID_MIN, longest), longest, priority=4))


def id_cell(run_id: str, size: int) -> str:
    """``run_id`` in ``size`` cells: whole when it fits, else its middle (the workflow slug) gives way to ``…``
    and the start time and the suffix stay."""
    if len(run_id) <= size:
        return run_id
    keep = max(0, size - ID_SUFFIX - 1)
    return run_id[:keep] + "…" + run_id[-ID_SUFFIX:]


class RunsSource:
    """The runs list table."""

    def __init__(self, rows: list[RunRow], age: Callable[[RunRow], str]) -> None:
        self.items, self.age = rows, age
        self.columns = run_columns(row.run_id for row in rows)

    def header(self, console: Console, width: int) -> list[Text]:
        return [next(table_lines(self.columns, (), width))] if self.items else []

    def count(self, console: Console, width: int) -> int:
        return len(self.items) or 1

    def rows(self, console: Console, width: int, start: int, stop: int) -> list[Text]:
        if not self.items:
            return [Text("No runs match; press f to change the filter, / to search.", style="dim")]
        sizes = dict(layout(self.columns, width))
        id_size = sizes.get(len(self.columns) - 1, 0)
        cells = (self._cells(row, id_size) for row in self.items[start:stop])
        return list(table_lines(self.columns, cells, width))[1:]

    def _cells(self, row: RunRow, id_size: int) -> list[Text | str]:
        return [
            Text(row.status_text(), style=STATUS_STYLES.get(row.status, "")),
            Text(row.title),
            self.age(row),
            Text(row.current_node),
            row.cost_text(),
            Text(id_cell(row.run_id, id_size), style="dim"),
        ]


def plain_rows(source: LineSource, console: Console, width: int) -> Iterator[str]:
    """Every row as plain text (search reads it page by page)."""
    total = source.count(console, width)
    for start in range(0, total, 512):
        for line in source.rows(console, width, start, min(total, start + 512)):
            yield line.plain


def describe(value: Any) -> str:
    return safe(str(value)).plain
