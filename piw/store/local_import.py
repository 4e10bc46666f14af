"""``piw import BUNDLE`` into a SQLite home: the bundle copied into ``runs/`` whole (``docs/cli.md``, "Retention").

The way back for a run ``piw gc --export`` archived: the folder is copied under a hidden temporary name and renamed
into place, so a crash leaves either no run or the whole run; the runs index picks it up on the next listing.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from piw.errors import UsageError
from piw.store.bundle import Bundle, ensure_private_dir


def import_local(home: Path, bundle: Bundle) -> Path:
    """Copy ``bundle`` into ``home``'s ``runs/`` (refused when that run exists); the new bundle's path."""
    runs = ensure_private_dir(home / "runs")
    target = runs / bundle.run_id
    if target.exists():
        raise UsageError(
            f"Run {bundle.run_id} is already in {runs}; remove it first with 'piw rm {bundle.run_id}'."
        )
    staging = runs / f".import-{bundle.run_id}-{time.time_ns() // 1_000_000}"
    shutil.copytree(bundle.path, staging, symlinks=True)
    for folder, _dirs, files in os.walk(staging):
        os.chmod(folder, 0o700)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o600)
    os.rename(staging, target)
    return target
