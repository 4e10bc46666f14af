"""Which workflow versions this host can serve: the serve key of every workflow file it can load
(``docs/many-machines.md``, "Routing by workflow version"). The keys themselves are the store's
(:mod:`piw.store.db.serve_keys`); loading files to compute them is the host's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from piw.run.runner import tools_known
from piw.store.db.serve_keys import serve_key
from piw.workflow.loader import SUFFIX, LoadedWorkflow, load_workflow, search_paths

log = logging.getLogger(__name__)


def serve_key_of(workflow: LoadedWorkflow) -> str:
    return serve_key(workflow.source, workflow.digest)


def workflow_files(home: Path, folders: Iterable[Path] = ()) -> list[Path]:
    """Every workflow file a host looks at: ``--workflows`` folders first, then the discovery paths
    (``./.piw/workflows``, ``$PIW_HOME/workflows``, the built-ins, the examples), every version (no name shadows
    another here: each file serves its own key)."""
    paths: list[Path] = []
    for folder in [*folders, *(folder for _, folder in search_paths(home))]:
        if Path(folder).is_dir():
            paths.extend(sorted(Path(folder).glob(f"*{SUFFIX}")))
    return paths


def key_of_file(path: Path, home: Path) -> str | None:
    """The serve key of the workflow in ``path``, or ``None`` when it does not load (with a warning: its runs are
    simply not served here)."""
    try:
        return serve_key_of(load_workflow(path, home, tools_known()))
    except Exception as exc:
        log.warning("workflow %s is not served: %s", path, exc)
        return None


def served_workflows(home: Path, folders: Iterable[Path] = ()) -> dict[str, Path]:
    """Serve key → workflow file of every workflow this host can load (:func:`workflow_files`)."""
    keys: dict[str, Path] = {}
    for path in workflow_files(home, folders):
        key = key_of_file(path, home)
        if key is not None:
            keys.setdefault(key, path)
    return keys
