"""The steps view: one row per attempt — node, outcome, duration, and the output (clipped) or the error.

The attempt in progress is the last row, marked running, so the table answers "what has happened and what is
happening" in one place. Outputs are clipped; ``piw inspect RUN --json`` holds them in full. A failure ends with
the workflow line that raised (``at flow.workflow.py:7``); filtered to one node (``--node``) or with ``--verbose``,
each failed attempt is followed by its whole traceback (workflow frames only).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from datetime import datetime

from rich.console import Console
from rich.text import Text

from piw.store.fold import RunState, StepRecord
from piw.terminal import single_line
from piw.views.base import (
    View,
    compact,
    elapsed,
    fmt_duration,
    marked,
    node_label,
    safe,
    short_id,
    status_style,
)
from piw.views.failure import traceback_lines, where
from piw.views.phases import leaf_cards, script_phases
from piw.views.row_cache import RowSource, cached_table, layout_key
from piw.views.table import Column, layout, table_lines, table_plain

COLUMNS = (
    Column("#", 3, 5, priority=1, right=True),
    Column("node", 8, 20, priority=9),
    Column("outcome", 9, 11, priority=8),
    Column("took", 6, 8, priority=5, right=True),
    Column("attempt", 8, 8, priority=2),
    Column("output / error", 10, 400, priority=7, flex=True),
)


def _columns(rows: int) -> tuple[Column, ...]:
    """:data:`COLUMNS`, with ``#`` wide enough for the last row number (a run of 100,000 steps has six digits;
    clipped, every row from there on read ``1000…``)."""
    digits = len(str(rows))
    if digits <= COLUMNS[0].max:
        return COLUMNS
    return (Column("#", 3, digits, priority=1, right=True), *COLUMNS[1:])


@functools.lru_cache(maxsize=64)
def _plain_outcome(outcome: str) -> str:
    """The outcome cell as plain text (remembered: it is one of a handful on every row of a long run)."""
    return marked(outcome)


def _outcome(outcome: str) -> Text:
    return Text(_plain_outcome(outcome), style=status_style(outcome))


def _detail(step: StepRecord) -> Text:
    if step.outcome == "ok":
        return safe(compact(step.output, 400))
    text = safe(step.error or "", "red")
    location = where(step.traceback)
    if location:
        text.append(f"  at {location}", style="dim")
    return text


def _row(number: int, step: StepRecord) -> list[Text | str]:
    return [
        str(number),
        Text(node_label(step.node_id)),
        _outcome(step.outcome),
        fmt_duration(step.duration_ms),
        short_id(step.attempt_id),
        _detail(step),
    ]


class StepsView(View):
    """``node`` keeps only that node's attempts; with ``node`` or ``verbose`` a failure's traceback follows it."""

    def __init__(
        self,
        state: RunState,
        now: datetime,
        *,
        node: str | None = None,
        verbose: bool = False,
        source: RowSource | None = None,
    ) -> None:
        self.state, self.now, self.node, self.verbose = state, now, node, verbose
        self.source = source
        """Where ``state`` was folded from, for the rendered-row cache (``None``: no cache is read or left)."""

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        state = self.state
        if not state.steps and state.current is None:
            yield Text("No steps yet.", style="dim")
            return
        columns = _columns(self.count())
        if self.node is None and not self.verbose:
            yield from table_lines(columns, self._rows(), width)
            yield from self._running_leaves()
            return
        if self.node is not None and not self._has_node():
            yield Text(f"No steps of node {node_label(self.node)}.", style="dim")
            return
        for line in table_lines(columns, self._detailed_rows(), width):
            if line.cell_len <= width:
                yield line
            else:  # a traceback line: wrapped, because showing it whole is why it is there
                yield from line.wrap(console, width, overflow="fold")

    def plain_lines(self, width: int) -> Iterator[str] | None:
        """The same lines as :meth:`lines`, as plain text (no styles) for a console that is not a terminal.

        Only the plain table (no ``node``, not ``verbose``) has this fast path (``None`` otherwise): the
        detailed one wraps tracebacks.
        """
        if self.node is not None or self.verbose:
            return None
        return self._plain_lines(width)

    def _plain_lines(self, width: int) -> Iterator[str]:
        state = self.state
        if not state.steps and state.current is None:
            yield "No steps yet."
            return
        yield from table_plain(_columns(self.count()), self._plain_rows(), width)
        yield from (line.plain[:width] for line in self._running_leaves())

    def plain_blocks(self, width: int) -> Iterator[bytes | memoryview] | None:
        """:meth:`plain_lines` as UTF-8 blocks, the finished attempts' rows from the bundle's rendered-row cache
        when it has them (:mod:`piw.views.row_cache`); ``None`` where :meth:`plain_lines` is ``None``."""
        if self.node is not None or self.verbose:
            return None
        state = self.state
        if not state.steps and state.current is None:
            return iter((b"No steps yet.\n",))
        columns = _columns(self.count())
        header = next(table_plain(columns, (), width))
        key = layout_key("steps", layout(columns, width))

        def settled(start: int, _cached: object) -> Iterator[str]:
            return itertools.islice(table_plain(columns, self._plain_steps(start), width), 1, None)

        running = itertools.chain(
            itertools.islice(table_plain(columns, self._plain_running(), width), 1, None),
            (line.plain[:width] for line in self._running_leaves()),
        )
        return cached_table(self.source, "steps", key, header, len(state.steps), settled, running)

    def _plain_rows(self) -> Iterator[list[str]]:
        yield from self._plain_steps(0)
        yield from self._plain_running()

    def _plain_steps(self, start: int) -> Iterator[list[str]]:
        """The plain rows of the finished attempts from index ``start`` on (a lazy list is read by index then, so
        only the checkpoint segments after ``start`` are decoded)."""
        steps = self.state.steps
        records = iter(steps) if start == 0 else (steps[i] for i in range(start, len(steps)))
        for number, step in enumerate(records, start=start + 1):
            outcome = step.outcome
            if outcome == "ok":
                detail = compact(step.output, 400)  # one sanitized line already
            else:
                location = where(step.traceback)
                detail = single_line(step.error or "") + (f"  at {location}" if location else "")
            yield [
                str(number),
                node_label(step.node_id),
                _plain_outcome(outcome),
                fmt_duration(step.duration_ms),
                short_id(step.attempt_id),
                detail,
            ]

    def _plain_running(self) -> Iterator[list[str]]:
        current = self.state.current
        if current is not None:
            yield [
                str(len(self.state.steps) + 1),
                node_label(current.node_id),
                _plain_outcome("running"),
                elapsed(current.started_at, self.now),
                short_id(current.attempt_id),
                single_line(current.status_detail or ""),
            ]

    def _has_node(self) -> bool:
        current = self.state.current
        return any(step.node_id == self.node for step in self.state.steps) or (
            current is not None and current.node_id == self.node
        )

    def _detailed_rows(self) -> Iterator[list[Text | str] | Text]:
        """The rows of ``node`` (or all), each failure followed by its traceback lines."""
        for number, step in enumerate(self.state.steps, start=1):
            if self.node is not None and step.node_id != self.node:
                continue
            yield _row(number, step)
            if step.outcome != "ok" and (step.traceback or self.node is not None):
                yield from traceback_lines(step.traceback, step.error, indent="      ")
            if step.children and (phases := script_phases(self.state, step.attempt_id)):
                yield from leaf_cards(step.node_id, step.children, phases, indent="      ")
        current = self.state.current
        if current is not None and (self.node is None or current.node_id == self.node):
            yield from self._rows(len(self.state.steps))
            yield from self._running_leaves()

    def _running_leaves(self) -> Iterator[Text]:
        """The leaves of the script attempt in progress, as step cards under a heading per phase
        (``docs/dynamic-workflows.md``): nothing for any other attempt."""
        current = self.state.current
        if current is None:
            return
        phases = script_phases(self.state, current.attempt_id)
        if phases:
            yield from leaf_cards(current.node_id, current.children, phases, indent="      ")

    def count(self) -> int:
        """Rows in the table: one per finished attempt, plus the attempt in progress."""
        return len(self.state.steps) + (self.state.current is not None)

    def header(self, width: int) -> Text:
        return next(table_lines(_columns(self.count()), (), width))

    def row_lines(self, start: int, stop: int, width: int) -> list[Text]:
        """Rows ``start..stop`` (0-based) without the header, so a pager never builds the whole table."""
        rows = self._rows(start, stop)
        return list(table_lines(_columns(self.count()), rows, width))[1:]

    def _rows(self, start: int = 0, stop: int | None = None) -> Iterator[list[Text | str]]:
        steps = self.state.steps
        end = len(steps) if stop is None else min(stop, len(steps))
        for number in range(start, end):
            yield _row(number + 1, steps[number])
        if (stop is not None and stop <= len(steps)) or start > len(steps):
            return
        current = self.state.current
        if current is not None:
            detail = safe(current.status_detail or "", "dim")
            yield [
                str(len(self.state.steps) + 1),
                Text(node_label(current.node_id)),
                _outcome("running"),
                elapsed(current.started_at, self.now),
                short_id(current.attempt_id),
                detail,
            ]


def steps_view(
    state: RunState,
    now: datetime,
    *,
    node: str | None = None,
    verbose: bool = False,
    source: RowSource | None = None,
) -> StepsView:
    return StepsView(state, now, node=node, verbose=verbose, source=source)
