"""Schedules held by a backlog, said wherever runs are listed (``piw runs``), before anything is spent on them."""

from __future__ import annotations

from pathlib import Path


def backlog_warnings(home: Path) -> list[str]:
    """One line per schedule held by a backlog of missed fires beyond its ``--max-backlog``."""
    from piw.errors import PiwError
    from piw.schedule.book import open_schedules

    try:
        rows = open_schedules(home).all()
    except PiwError:
        return []  # a home that cannot be read here lists its runs all the same
    if not any(row.held for row in rows):
        return []
    from piw.run.schedule_duty import held_line

    return [held_line(row) for row in rows if row.held]
