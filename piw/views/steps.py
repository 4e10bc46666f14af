"""The steps view: one row per attempt — node, outcome, duration, and the output (clipped) or the error.

The attempt in progress is the last row, marked running, so the table answers "what has happened and what is
happening" in one place. Outputs are clipped; ``piw inspect RUN --json`` holds them in full.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from rich.console import Console
from rich.text import Text

from piw.store.replay import RunState, StepRecord
from piw.views.base import (
    OUTCOME_MARKS,
    STATUS_STYLES,
    View,
    compact,
    fmt_duration,
    ms_between,
    node_label,
    safe,
    short_id,
)
from piw.views.table import Column, table_lines

COLUMNS = (
    Column("#", 3, 5, priority=1, right=True),
    Column("node", 8, 20, priority=9),
    Column("outcome", 9, 11, priority=8),
    Column("took", 6, 8, priority=5, right=True),
    Column("attempt", 8, 8, priority=2),
    Column("output / error", 10, 400, priority=7, flex=True),
)


def _outcome(outcome: str) -> Text:
    return Text(f"{OUTCOME_MARKS.get(outcome, '·')} {outcome}", style=STATUS_STYLES.get(outcome, ""))


def _row(number: int, step: StepRecord) -> list[Text | str]:
    detail = safe(compact(step.output, 400)) if step.outcome == "ok" else safe(step.error or "", "red")
    return [
        str(number),
        Text(node_label(step.node_id)),
        _outcome(step.outcome),
        fmt_duration(step.duration_ms),
        short_id(step.attempt_id),
        detail,
    ]


class StepsView(View):
    def __init__(self, state: RunState, now: datetime) -> None:
        self.state, self.now = state, now

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        state = self.state
        if not state.steps and state.current is None:
            yield Text("No steps yet.", style="dim")
            return
        yield from table_lines(COLUMNS, self._rows(), width)

    def count(self) -> int:
        """Rows in the table: one per finished attempt, plus the attempt in progress."""
        return len(self.state.steps) + (self.state.current is not None)

    def header(self, width: int) -> Text:
        return next(table_lines(COLUMNS, (), width))

    def row_lines(self, start: int, stop: int, width: int) -> list[Text]:
        """Rows ``start..stop`` (0-based) without the header, so a pager never builds the whole table."""
        rows = self._rows(start, stop)
        return list(table_lines(COLUMNS, rows, width))[1:]

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
            elapsed = fmt_duration(ms_between(current.started_at, self.now))
            yield [str(len(self.state.steps) + 1), Text(node_label(current.node_id)), _outcome("running"),
                   elapsed, short_id(current.attempt_id), detail]  # fmt: skip


def steps_view(state: RunState, now: datetime) -> StepsView:
    return StepsView(state, now)
