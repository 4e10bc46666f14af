"""Run listings: a summary row per bundle, newest first, from the replayed state.

The SQLite ``runs`` index (``persistence.md`` §10) will cache these rows; until then bundles are folded directly
(``state.json`` accelerates it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.errors import PiwError, TraceCorrupt
from piw.store.bundle import list_bundles, load_state, run_is_live
from piw.store.damage import Damage, line_damage
from piw.store.replay import fold
from piw.store.trace import read_trace_prefix


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    workflow_name: str
    run_title: str | None
    status: str
    started_at: str | None
    finished_at: str | None
    current_node: str | None
    notice: str | None = None
    """Set when the bundle is damaged; the row then shows what the readable prefix of its trace says."""
    damage: Damage | None = None
    interrupted: bool = False
    """``running`` with no process writing it: it crashed or was interrupted, and ``piw resume`` continues it."""
    cost: float | None = None
    """USD summed over the run's model requests, when every part of it is known (``RunState.usage.cost``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "workflowName": self.workflow_name,
            "runTitle": self.run_title,
            "status": self.status,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "currentNode": self.current_node,
            "damage": self.damage.to_json() if self.damage else None,
        }


def run_summaries(home: Path, status: str | None = None, limit: int | None = None) -> Iterator[RunSummary]:
    """Summaries of every run, newest first; a damaged trace gives its readable prefix with the damage."""
    count = 0
    for bundle in list_bundles(home):
        damage: Damage | None = None
        try:
            state = load_state(bundle)
        except TraceCorrupt:
            read, corrupt = read_trace_prefix(bundle.trace_path)
            state = fold(read.events)
            if corrupt is not None:
                damage = line_damage(bundle.trace_path.name, corrupt.line)
        except PiwError:
            continue
        if not state.run_id:
            continue  # never started (killed before run_started): incomplete, readers skip it
        if status is not None and state.status != status:
            continue
        yield RunSummary(
            run_id=state.run_id,
            workflow_name=state.workflow_name,
            run_title=state.run_title,
            status=state.status,
            started_at=state.started_at,
            finished_at=state.finished_at,
            current_node=state.current.node_id if state.current else None,
            notice=damage.notice if damage else None,
            damage=damage,
            interrupted=damage is None and state.status == "running" and not run_is_live(bundle),
            cost=_cost(state.usage),
        )
        count += 1
        if limit is not None and count >= limit:
            return


def _cost(usage: dict[str, Any] | None) -> float | None:
    cost = (usage or {}).get("cost")
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
