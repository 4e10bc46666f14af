"""Serve keys: which workflow version a queued run needs, so a host claims only runs it can load
(``docs/many-machines.md``, "Routing by workflow version"; ``multi-host.md`` §4.7).

A run's serve key is the SHA-256 of its workflow's identity *without the path*: a file's content hash (or a
built-in's id and revision) and the definition digest of its flattened graph, mounted children included. So a host
whose copy of the same file lives at another path serves the run, and a host with another version of it never claims
it. Resume still compares the hashes itself: a key only routes, it never lets a mismatch run.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from piw.workflow.loader import LoadedWorkflow

log = logging.getLogger(__name__)


def serve_key(source: dict[str, Any] | None, digest: str | None) -> str:
    """The serve key of a run of the workflow identified by ``source`` (its ``workflowSource``) and ``digest``."""
    identity = {key: value for key, value in (source or {}).items() if key != "path"}
    text = json.dumps(
        {"workflowSource": identity, "definitionDigest": digest}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def serve_key_of(workflow: LoadedWorkflow) -> str:
    return serve_key(workflow.source, workflow.digest)


def workflow_files(home: Path, folders: Iterable[Path] = ()) -> list[Path]:
    """Every workflow file a host looks at: ``--workflows`` folders first, then the discovery paths
    (``./.piw/workflows``, ``$PIW_HOME/workflows``, the built-ins, the examples), every version (no name shadows
    another here: each file serves its own key)."""
    from piw.workflow.loader import SUFFIX, search_paths

    paths: list[Path] = []
    for folder in [*folders, *(folder for _, folder in search_paths(home))]:
        if Path(folder).is_dir():
            paths.extend(sorted(Path(folder).glob(f"*{SUFFIX}")))
    return paths


def key_of_file(path: Path, home: Path) -> str | None:
    """The serve key of the workflow in ``path``, or ``None`` when it does not load (with a warning: its runs are
    simply not served here)."""
    from piw.run.runner import tools_known
    from piw.workflow.loader import load_workflow

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
