"""The rows of the viewer's runs list: status, title, age, current node and cost, with filter and search.

Rows come from :func:`piw.store.history.run_summaries` (the runs index will back it); filtering and searching
are pure functions of the rows, so the screen only arranges them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from piw.progress import format_remaining, parse_instant
from piw.store.history import RunSummary, run_summaries
from piw.store.state import RUN_STATUSES
from piw.terminal import single_line

STATUS_FILTERS: tuple[str | None, ...] = (None, *RUN_STATUSES)
"""What ``f`` cycles through on the runs list: every run, then one status at a time."""


@dataclass(frozen=True)
class RunRow:
    """One run as the list shows it; every string is already sanitised for the terminal."""

    run_id: str
    status: str
    title: str
    workflow: str
    started_at: str | None
    current_node: str
    cost: float | None
    notice: str | None
    interrupted: bool

    def age(self, now: datetime) -> str:
        """How long ago the run started: ``12s``, ``5m``, ``1.5h``, ``3.0d`` (``—`` when unknown)."""
        started = parse_instant(self.started_at) if self.started_at else None
        if started is None:
            return "—"
        return format_remaining(max(0.0, (now - started).total_seconds() * 1000))

    def cost_text(self) -> str:
        return f"${self.cost:.4f}" if self.cost is not None else "—"

    def status_text(self) -> str:
        if self.notice:
            return f"{self.status} ⚠"
        return f"{self.status} ?" if self.interrupted else self.status

    def haystack(self) -> str:
        return " ".join((self.run_id, self.title, self.workflow, self.current_node, self.status)).lower()


def row_of(summary: RunSummary) -> RunRow:
    title = summary.run_title or summary.workflow_name or ""
    return RunRow(
        run_id=single_line(summary.run_id),
        status=single_line(summary.status),
        title=single_line(title),
        workflow=single_line(summary.workflow_name),
        started_at=summary.started_at,
        current_node=single_line((summary.current_node or "").replace("/", " › ")),
        cost=summary.cost,
        notice=summary.notice,
        interrupted=summary.interrupted,
    )


def load_rows(home: Path) -> list[RunRow]:
    """Every readable run, newest first (a damaged one is listed with a notice, not hidden)."""
    return [row_of(summary) for summary in run_summaries(home)]


def select_rows(rows: Iterable[RunRow], status: str | None = None, search: str = "") -> list[RunRow]:
    """Rows with ``status`` (any when ``None``) whose id, title, workflow, node or status contains every word
    of ``search`` (case-insensitive)."""
    words = search.lower().split()
    return [
        row
        for row in rows
        if (status is None or row.status == status) and all(word in row.haystack() for word in words)
    ]
