"""A project with the shipped triage example, a real run of it, and that run recorded as a ``piw test`` case."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.cli import Cli
from tests.support.paths import REPO

EXAMPLES = REPO / "workflows" / "examples"


def triage_project(cli: Cli) -> Path:
    """The test's working folder as a project: ``workflows/triage.workflow.py`` and its replies beside it."""
    folder = cli.cwd / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("triage.workflow.py", "triage.replies.json"):
        shutil.copy(EXAMPLES / name, folder / name)
    return cli.cwd


def recorded_triage(cli: Cli, name: str = "bug") -> Path:
    """Run the triage example on the scripted provider, record the run as case ``name``; the case folder."""
    triage_project(cli)
    done = cli("run", "workflows/triage.workflow.py", "--provider", "scripted", "--json")
    assert done.returncode == 0, done.stderr
    recorded = cli("test", "record", "latest", "--name", name)
    assert recorded.returncode == 0, recorded.stderr
    return cli.cwd / "piw-tests" / name


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")
