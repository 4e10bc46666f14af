"""The ``piw runs`` table: a run id is never wrapped or cut, whatever the width; other columns give way first.

People copy run ids from this table (or type a prefix of one), so the id column is as wide as the longest id and
never folds. The other columns shrink, with an ellipsis, and then disappear, in this order: current node,
started, title. The status column stays; only an id and its status are printed when nothing else fits. A damaged
run's title is marked ``⚠`` and its notice follows the table on a line of its own, never clipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.text import Text

from piw.store.disk_use import human_bytes
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
    size: str


def _started(at: str | None) -> str:
    """``2026-12-01 10:35:34``: the start time to the second (the full instant is in ``--json``)."""
    if not at:
        return ""
    return single_line(at.replace("T", " ")[:19])


def _place(row: RunSummary) -> str:
    """The current node, then the phase a script works in (``orchestrate › verify``, docs/dynamic-workflows.md)."""
    node = row.current_node or ""
    return f"{node} › {row.current_phase}" if node and row.current_phase else node


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
                node=safe_text(single_line(_place(row))),
                size="" if row.size_bytes is None else human_bytes(row.size_bytes),
            )
        )
    return rows


@dataclass(frozen=True)
class _Layout:
    """Which columns show, and how wide each is (the id and status columns are always whole)."""

    id_width: int
    status_width: int
    size_width: int | None
    title_width: int | None
    started_width: int | None
    node_width: int | None


def _layout(rows: Sequence[_Row], width: int) -> _Layout:
    """Widths for ``width`` columns: id and status whole, then title, started and current node as they fit."""
    id_width = max(len("run id"), *(len(row.run_id) for row in rows))
    status_width = max(len("status"), *(len(row.status) for row in rows))
    started_width = max(len("started"), *(len(row.started) for row in rows))
    title_width = max(len("title"), *(row.title.cell_len for row in rows))
    node_width = max(len("current node"), *(row.node.cell_len for row in rows))
    sized = any(row.size for row in rows)
    size_width = max(len("size"), *(len(row.size) for row in rows)) if sized else None
    fixed = id_width + GAP + status_width + (GAP + size_width if size_width else 0)
    room = width - fixed
    show_title = room >= GAP + min(MIN_TITLE, title_width)
    show_started = show_title and room >= 2 * GAP + min(MIN_TITLE, title_width) + started_width
    show_node = show_started and room >= 3 * GAP + min(MIN_TITLE, title_width) + started_width + MIN_NODE
    spare = room - GAP * (show_title + show_started + show_node) - (started_width if show_started else 0)
    if show_node:  # the title keeps at least twice the node's share
        node_width = min(node_width, max(MIN_NODE, spare // 3))
    title_width = min(title_width, spare - (node_width if show_node else 0))
    return _Layout(
        id_width,
        status_width,
        size_width,
        title_width if show_title else None,
        started_width if show_started else None,
        node_width if show_node else None,
    )


def _cell(value: str, size: int) -> str:
    """``value`` in ``size`` cells: clipped with an ellipsis (as rich's ``overflow="ellipsis"``), then padded."""
    length = len(value) if value.isascii() else cell_len(value)
    if length > size:
        value = set_cell_size(value, size - 1) + "…" if size > 0 else ""
        length = cell_len(value)
    return value + " " * (size - length)


def runs_lines(summaries: Sequence[RunSummary], width: int) -> Iterator[str]:
    """The table as plain lines, header first: widths are known before the first row, so each row is one join.

    (A rich ``Table`` measured and rendered every cell: 1.1 s for 1,000 runs, against a 0.04 s index read.)
    """
    rows = _rows(summaries)
    layout = _layout(rows, width)
    widths = [
        layout.id_width,
        layout.status_width,
        layout.size_width,
        layout.title_width,
        layout.started_width,
        layout.node_width,
    ]
    shown = [i for i, size in enumerate(widths) if size is not None]
    gap = " " * GAP
    header = ("run id", "status", "size", "title", "started", "current node")
    yield gap.join(_cell(header[i], widths[i] or 0) for i in shown).rstrip()
    for row in rows:
        cells = (row.run_id, row.status, row.size, row.title.plain, row.started, row.node.plain)
        yield gap.join(_cell(cells[i], widths[i] or 0) for i in shown).rstrip()


def print_runs(console: Console, summaries: Sequence[RunSummary]) -> None:
    """Print the table at the console's width; only an id and status wider than the console go past it."""
    lines = runs_lines(summaries, console.width)
    if console.is_terminal:
        console.print(Text(next(lines), style="bold"), crop=False, overflow="ignore")
        console.print(Text("\n".join(lines)), crop=False, overflow="ignore", no_wrap=True)
    else:  # nothing to style: the text itself
        console.file.write("\n".join(lines) + "\n")
        console.file.flush()
    for (
        row
    ) in summaries:  # a damage notice is never clipped with the title: it says what the row is built from
        if row.notice:
            console.print(safe_text(f"⚠ {row.run_id}: {single_line(row.notice)}"), soft_wrap=True)
    if any(row.wait is not None and row.wait.overdue for row in summaries):
        console.print(
            "An overdue decision takes its timeout choice the next time 'piw host' runs; "
            "decide it first with 'piw decide RUN_ID CHOICE'.",
            soft_wrap=True,
        )
