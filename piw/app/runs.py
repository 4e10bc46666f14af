"""The rows of the viewer's runs list: status, title, age, current node and cost, with filter and search.

Rows come from each bundle's ``state.json`` when it is current, else from a streamed fold (the SQLite runs index
will back this once writers fill it); filtering and searching
are pure functions of the rows, so the screen only arranges them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import orjson

from piw.app.reader import last_seq
from piw.progress import format_remaining, parse_instant
from piw.store import foldcache
from piw.store.bundle import Bundle, list_bundles
from piw.store.bundle import run_is_live as _holds_lock
from piw.store.db.index import indexed_rows
from piw.store.history import RunSummary
from piw.store.place import mirrors_at, refresh_mirrors, runs_home
from piw.store.state import RUN_STATUSES, RunState
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
        """USD spent: the run's ``usage.cost``, or its ``spent.cost`` when it has a budget."""
        return f"${self.cost:.4f}" if self.cost is not None else "—"

    def status_text(self) -> str:
        if self.notice:
            return f"{self.status} ⚠"
        return f"{self.status} ?" if self.interrupted else self.status

    def haystack(self) -> str:
        return " ".join((self.run_id, self.title, self.workflow, self.current_node, self.status)).lower()


def row_of(summary: RunSummary, *, forked: bool = False) -> RunRow:
    """A row of a summary; a forked run's title starts with ``⑂``."""
    title = ("⑂ " if forked else "") + (summary.run_title or summary.workflow_name or "")
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


def run_is_live(bundle: Bundle) -> bool:
    """Whether a process writes the run: its writer lock, or in database mode (a mirror) its queue row's claim."""
    if mirrors_at(bundle.path.parent.parent) is None:
        return _holds_lock(bundle)
    from piw.store.db.liveness import writer_is_live

    return writer_is_live(bundle)


def load_rows(home: Path) -> list[RunRow]:
    """Every run from the SQLite runs index (``piw.store.db.index``, reconciled against the bundles as
    ``piw runs`` does); when the index cannot be read, from the bundles themselves (:func:`bundle_rows`)."""
    try:
        refresh_mirrors(home)
        indexed = indexed_rows(home)
    except Exception:  # a cache: the bundles still say everything
        return bundle_rows(home)
    rows = []
    root = runs_home(home) / "runs"
    for item in indexed:
        summary = RunSummary(
            item.run_id,
            item.workflow_name,
            item.run_title,
            item.status,
            item.started_at,
            item.finished_at,
            item.current_node,
            notice=item.notice or (f"trace damaged at line {item.damage_line}" if item.damage_line else None),
            interrupted=item.status == "running" and not run_is_live(Bundle(item.run_id, root / item.run_id)),
            cost=item.cost if item.cost is not None else _cost(item.usage),
        )
        rows.append(row_of(summary, forked=_is_fork(home, item.run_id)))
    return rows


def _is_fork(home: Path, run_id: str) -> bool:
    """Whether the run's manifest names the run it was forked from (``piw fork``)."""
    try:
        manifest = orjson.loads((runs_home(home) / "runs" / run_id / "manifest.json").read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and isinstance(manifest.get("forkedFrom"), dict)


def bundle_rows(home: Path) -> list[RunRow]:
    """Every readable run, newest first (a damaged one is listed with a notice, not hidden).

    A bundle whose ``state.json`` agrees with the end of its trace is summarised from its row fields alone (msgspec
    skips the steps), so one huge run does not hold up the list; the others are folded from a streamed trace.
    """
    rows: list[RunRow | None] = []
    slow: set[str] = set()
    for bundle in list_bundles(home):
        head = _cached_head(bundle)
        if head is None:
            slow.add(bundle.run_id)
            rows.append(RunRow(bundle.run_id, "", "", "", None, "", None, None, False))
            continue
        rows.append(_settled_row(head, head.current_node, bundle))
    if slow:
        rows = [
            _folded_row(Bundle(row.run_id, runs_home(home) / "runs" / row.run_id))
            if row is not None and row.run_id in slow
            else row
            for row in rows
        ]
    return [row for row in rows if row is not None]


def _folded_row(bundle: Bundle) -> RunRow | None:
    """A row from the checkpoint reader's fold of the trace (streamed from the newest valid fold checkpoint,
    read-only, as the index folds a run); a trace damaged in the middle gives its valid prefix and a notice, an
    empty one no row."""
    found = foldcache.replay(bundle.path, bundle.run_id, write=False)
    state = found.state
    if not state.run_id:
        return None
    current = state.current.node_id if state.current else None
    return _settled_row(state, current, bundle, notice=found.notice)


def _settled_row(
    run: _Head | RunState, current_node: str | None, bundle: Bundle, notice: str | None = None
) -> RunRow:
    """The row of a run's head (``state.json``'s fields or a fold's state); a running one is interrupted when no
    process holds it."""
    live = run.status != "running" or run_is_live(bundle)
    summary = RunSummary(
        run.run_id,
        run.workflow_name,
        run.run_title,
        run.status,
        run.started_at,
        run.finished_at,
        current_node,
        notice=notice,
        interrupted=not live,
        cost=_cost(run.spent if run.budget else run.usage),
    )
    return row_of(summary, forked=bool(run.forked_from))


class _Head(msgspec.Struct, rename="camel"):
    """The fields of ``state.json`` a row shows; msgspec skips the rest (steps, outputs) without building them."""

    run_id: str
    trace_seq: int
    workflow_name: str = ""
    run_title: str | None = None
    status: str = "running"
    started_at: str | None = None
    finished_at: str | None = None
    current_node: str | None = None
    usage: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None
    spent: dict[str, Any] | None = None
    forked_from: dict[str, Any] | None = None


_HEAD = msgspec.json.Decoder(_Head)


def _cached_head(bundle: Bundle) -> _Head | None:
    """The row fields of ``state.json`` when its ``traceSeq`` is the trace's last seq (else ``None``)."""
    try:
        head = _HEAD.decode(bundle.state_path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    if head.run_id != bundle.run_id or last_seq(bundle) != head.trace_seq:
        return None
    return head


def _cost(usage: dict[str, Any] | None) -> float | None:
    cost = (usage or {}).get("cost")
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None


def select_rows(rows: Iterable[RunRow], status: str | None = None, search: str = "") -> list[RunRow]:
    """Rows with ``status`` (any when ``None``) whose id, title, workflow, node or status contains every word
    of ``search`` (case-insensitive)."""
    words = search.lower().split()
    return [
        row
        for row in rows
        if (status is None or row.status == status) and all(word in row.haystack() for word in words)
    ]
