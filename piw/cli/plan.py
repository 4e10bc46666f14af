"""``piw run WORKFLOW --plan`` and ``piw show WORKFLOW --plan``: the projected spend of a run, printed before (and
instead of) any model request (``docs/planning.md``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piw.cli.console import make_console
from piw.terminal import json_text

if TYPE_CHECKING:
    from piw.planning.figures import Projection
    from piw.workflow.loader import LoadedWorkflow


def projection_of(
    workflow: str | LoadedWorkflow,
    home: Path,
    raw_input: Any,
    provider: str | None = None,
    model: str | None = None,
    script: str | None = None,
) -> Projection:
    """The projection of a run of ``workflow`` with ``raw_input`` here (loads the file; sends nothing)."""
    from piw.planning.project import project
    from piw.planning.setting import plan_setting
    from piw.run.runner import tools_known
    from piw.workflow.loader import load_workflow

    loaded = load_workflow(workflow, home, tools_known()) if isinstance(workflow, str) else workflow
    return project(loaded, plan_setting(loaded, home, raw_input, provider, model, script))


def print_plan(projection: Projection, as_json: bool) -> int:
    """Print it as text or ``--json``; exit 0."""
    from piw.planning.render import render

    if as_json:
        sys.stdout.write(json_text(projection.to_json()) + "\n")
        return 0
    console = make_console()
    for line in render(projection):
        console.out(line, highlight=False)
    return 0
