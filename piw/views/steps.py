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
from piw.terminal import single_line
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
from piw.views.table import Column, table_lines, table_plain

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

    def plain_lines(self, width: int) -> Iterator[str]:
        """The same lines as :meth:`lines`, as plain text (no styles) for a console that is not a terminal."""
        state = self.state
        if not state.steps and state.current is None:
            yield "No steps yet."
            return
        yield from table_plain(COLUMNS, self._plain_rows(), width)

    def _plain_rows(self) -> Iterator[list[str]]:
        for number, step in enumerate(self.state.steps, start=1):
            outcome = step.outcome
            detail = (
                single_line(compact(step.output, 400)) if outcome == "ok" else single_line(step.error or "")
            )
            mark = OUTCOME_MARKS.get(outcome, "·")
            yield [str(number), node_label(step.node_id), f"{mark} {outcome}", fmt_duration(step.duration_ms),
                   short_id(step.attempt_id), detail]  # fmt: skip
        current = self.state.current
        if current is not None:
            elapsed = fmt_duration(ms_between(current.started_at, self.now))
            yield [str(len(self.state.steps) + 1), node_label(current.node_id), f"{OUTCOME_MARKS['running']} running",
                   elapsed, short_id(current.attempt_id), single_line(current.status_detail or "")]  # fmt: skip

    def _rows(self) -> Iterator[list[Text | str]]:
        for number, step in enumerate(self.state.steps, start=1):
            yield _row(number, step)
        current = self.state.current
        if current is not None:
            detail = safe(current.status_detail or "", "dim")
            elapsed = fmt_duration(ms_between(current.started_at, self.now))
            yield [str(len(self.state.steps) + 1), Text(node_label(current.node_id)), _outcome("running"),
                   elapsed, short_id(current.attempt_id), detail]  # fmt: skip


def steps_view(state: RunState, now: datetime) -> StepsView:
    return StepsView(state, now)
