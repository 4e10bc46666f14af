"""Run lineage: the forks of a run, found from the manifests of the runs started after it.

A fork records its parent in ``run_started.forkedFrom`` and in its manifest; the parent bundle is never written,
so "which runs were forked from this one" is answered by reading the manifests of newer runs (run ids sort
chronologically, so older ones cannot be forks of it).
"""

from __future__ import annotations

import json
from pathlib import Path

from piw.store.place import runs_home
from piw.store.runref import run_ids


def forks_of(home: Path, run_id: str) -> list[str]:
    """Ids of the runs forked from ``run_id``, oldest first."""
    found: list[str] = []
    root = runs_home(home) / "runs"
    for candidate in reversed(run_ids(home)):
        if candidate <= run_id:
            continue
        try:
            manifest = json.loads((root / candidate / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        forked = manifest.get("forkedFrom") if isinstance(manifest, dict) else None
        if isinstance(forked, dict) and forked.get("runId") == run_id:
            found.append(candidate)
    return found
