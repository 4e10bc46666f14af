"""Writing workflow files and reading what a run leaves: the shapes of the run fixtures and a run's trace."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

WorkflowMaker = Callable[[str, str], Path]
"""``make_workflow(name, source)``: writes ``NAME.workflow.py`` and returns its path."""

RunWorkflow = Callable[..., Any]
"""``run_workflow(path, raw_input, ...)``: starts a run in process and returns its ``RunState``."""


def bundle_dir(home: Path, run_id: str) -> Path:
    return home / "runs" / run_id


def trace_lines(home: Path, run_id: str) -> list[dict[str, Any]]:
    """Every line of a run's trace as parsed JSON (the file must be fully valid)."""
    data = (bundle_dir(home, run_id) / "trace.ndjson").read_text(encoding="utf-8")
    return [json.loads(line) for line in data.splitlines()]


def only_run_id(home: Path) -> str:
    """The id of the single run bundle in ``home``."""
    runs = [p.name for p in (home / "runs").iterdir() if not p.name.startswith(".")]
    assert len(runs) == 1, runs
    return runs[0]
