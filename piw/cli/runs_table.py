"""The ``piw runs`` table: a run id is never wrapped or cut, whatever the width; other columns give way first.

People copy run ids from this table (or type a prefix of one), so the id column is as wide as the longest id and
never folds. The other columns shrink, with an ellipsis, and then disappear, in this order: current node,
started, title. The status column stays; only an id and its status are printed when nothing else fits. A damaged
run's title is marked ``⚠`` and its notice follows the table on a line of its own, never clipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

from piw.store.history import RunSummary
from piw.terminal import safe_text, single_line

GAP = 2
MIN_TITLE = 10
MIN_NODE = len("current node")


@dataclass(frozen=True)
class _Row:
    run_id: str
    status: str
    title: Text
    started: str
    node: Text


def _started(at: str | None) -> str:
    """``2026-12-01 10:35:34``: the start time to the second (the full instant is in ``--json``)."""
    if not at:
        return ""
    return single_line(at.replace("T", " ")[:19])


def _rows(summaries: Sequence[RunSummary]) -> list[_Row]:
    rows = []
    for row in summaries:
        title = single_line(row.run_title or row.workflow_name) + ("  ⚠" if row.notice else "")
        rows.append(
            _Row(
                run_id=row.run_id,
                status=row.display_status,
                title=safe_text(title),
                started=_started(row.started_at),
                node=safe_text(single_line(row.current_node or "")),
            )
        )
    return rows


def runs_table(summaries: Sequence[RunSummary], width: int) -> Table:
    """The table for ``width`` columns: id and status whole, then title, started and current node as they fit."""
    rows = _rows(summaries)
    id_width = max(len("run id"), *(len(row.run_id) for row in rows))
    status_width = max(len("status"), *(len(row.status) for row in rows))
    started_width = max(len("started"), *(len(row.started) for row in rows))
    title_width = max(len("title"), *(row.title.cell_len for row in rows))
    node_width = max(len("current node"), *(row.node.cell_len for row in rows))
    fixed = id_width + GAP + status_width
    room = width - fixed
    show_title = room >= GAP + min(MIN_TITLE, title_width)
    show_started = show_title and room >= 2 * GAP + min(MIN_TITLE, title_width) + started_width
    show_node = show_started and room >= 3 * GAP + min(MIN_TITLE, title_width) + started_width + MIN_NODE
    spare = room - GAP * (show_title + show_started + show_node) - (started_width if show_started else 0)
    if show_node:  # the title keeps at least twice the node's share
        node_width = min(node_width, max(MIN_NODE, spare // 3))
    title_width = min(title_width, spare - (node_width if show_node else 0))

    table = Table(box=None, pad_edge=False, padding=(0, GAP // 2), expand=False)
    table.add_column("run id", no_wrap=True, min_width=id_width, max_width=id_width)
    table.add_column("status", no_wrap=True, min_width=status_width, max_width=status_width)
    if show_title:
        table.add_column("title", no_wrap=True, overflow="ellipsis", max_width=title_width)
    if show_started:
        table.add_column("started", no_wrap=True, min_width=started_width, max_width=started_width)
    if show_node:
        table.add_column("current node", no_wrap=True, overflow="ellipsis", max_width=node_width)
    for row in rows:
        cells: list[str | Text] = [row.run_id, row.status]
        if show_title:
            cells.append(row.title)
        if show_started:
            cells.append(row.started)
        if show_node:
            cells.append(row.node)
        table.add_row(*cells)
    return table


def print_runs(console: Console, summaries: Sequence[RunSummary]) -> None:
    """Print the table at the console's width; only an id and status wider than the console go past it."""
    table = runs_table(summaries, console.width)
    least = sum(column.min_width or 0 for column in table.columns[:2]) + GAP
    console.print(table, width=max(console.width, least), crop=False)
    for (
        row
    ) in summaries:  # a damage notice is never clipped with the title: it says what the row is built from
        if row.notice:
            console.print(safe_text(f"⚠ {row.run_id}: {single_line(row.notice)}"), soft_wrap=True)
