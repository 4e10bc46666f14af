"""Run listings: a summary row per bundle, newest first, from the replayed state.

The SQLite ``runs`` index (``persistence.md`` §10) will cache these rows; until then bundles are folded directly
(``state.json`` accelerates it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.errors import PiwError
from piw.store.bundle import Bundle, list_bundles, load_state, run_is_live


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
    """Set when the bundle could not be replayed (e.g. a damaged trace); the row then comes from the manifest."""
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
        }


def run_summaries(home: Path, status: str | None = None, limit: int | None = None) -> Iterator[RunSummary]:
    """Summaries of every readable run, newest first; unreadable bundles are skipped."""
    count = 0
    for bundle in list_bundles(home):
        try:
            state = load_state(bundle)
        except PiwError:
            damaged = _from_manifest(bundle)
            if damaged is not None and (status is None or damaged.status == status):
                yield damaged
                count += 1
                if limit is not None and count >= limit:
                    return
            continue
        if not state.run_id:
            continue
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
            interrupted=state.status == "running" and not run_is_live(bundle),
            cost=_cost(state.usage),
        )
        count += 1
        if limit is not None and count >= limit:
            return


def _cost(usage: dict[str, Any] | None) -> float | None:
    cost = (usage or {}).get("cost")
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None


def _from_manifest(bundle: Bundle) -> RunSummary | None:
    """A row for a bundle whose trace cannot be replayed, so the run is listed with a notice, not hidden."""
    try:
        manifest = bundle.read_manifest()
    except PiwError:
        return None
    return RunSummary(
        run_id=bundle.run_id,
        workflow_name=str(manifest.get("workflowName", "")),
        run_title=manifest.get("runTitle"),
        status=str(manifest.get("status", "running")),
        started_at=manifest.get("startedAt"),
        finished_at=manifest.get("finishedAt"),
        current_node=None,
        notice="trace damaged; see 'piw inspect'",
    )
