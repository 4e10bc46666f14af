"""Schedules held by a backlog, said wherever runs are listed (``piw runs``), before anything is spent on them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from piw.store.db.schedules import ScheduleRow


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
    return [held_line(row) for row in rows if row.held]


def held_line(row: ScheduleRow) -> str:
    """The warning of a schedule held by its backlog (``piw schedule show``, ``piw runs``, the host)."""
    held = row.held or {}
    return (
        f"schedule {row.name} is held: {held.get('count')} missed fires exceed --max-backlog {row.max_backlog}, "
        f"so none ran (nothing spent); 'piw schedule resume {row.name}' continues from now."
    )
