"""Run references people can type: a full id, any unique prefix, ``latest``, or ``-1``, ``-2``, … (newest first).

Every command that takes a run id resolves it here, so prefixes, ``latest`` and the "did you mean" hint behave
the same everywhere. Only directory names are read: resolving a reference never opens a trace.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from piw.errors import RunNotFound, UsageError
from piw.store.home import RUN_ID_PATTERN, is_bundle_dir
from piw.store.place import database_place

LATEST = "latest"
_NEGATIVE = re.compile(r"-([1-9][0-9]{0,5})")


def run_ids(home: Path) -> list[str]:
    """Ids of the complete bundles under ``home/runs``, newest first (run ids sort chronologically); in database
    mode every run of the database (``piw.store.place``)."""
    place = database_place(home)
    if place is not None:
        return list(place.mirrors.run_ids())
    root = home / "runs"
    if not root.is_dir():
        return []
    return sorted(
        (entry.name for entry in root.iterdir() if is_bundle_dir(entry)),
        reverse=True,
    )


def resolve_run_id(home: Path, ref: str) -> str:
    """The one run id that ``ref`` names; ``RunNotFound`` (with candidates or a suggestion) otherwise."""
    ref = ref.strip()
    position = 1 if ref == LATEST else _position(ref)
    if position is None and RUN_ID_PATTERN.fullmatch(ref) and _local_bundle(home, ref):
        return ref  # a whole id: one look at its folder, not a listing of every run (10,000 runs: ~0.2 s)
    ids = run_ids(home)
    if position is not None:
        if position > len(ids):
            have = f"there are only {len(ids)} runs" if ids else "there are no runs yet"
            raise RunNotFound(f"No run {ref!r}: {have}; list them with 'piw runs'.")
        return ids[position - 1]
    if not RUN_ID_PATTERN.fullmatch(ref):
        raise UsageError(
            f"{ref!r} is not a run id; give an id or a unique prefix of one, 'latest' or -1, -2, … "
            "(see 'piw runs')."
        )
    if ref in ids:
        return ref
    matches = [run_id for run_id in ids if run_id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:5]) + (f" and {len(matches) - 5} more" if len(matches) > 5 else "")
        raise UsageError(f"Run prefix {ref!r} is ambiguous: it matches {shown}; type more of the id.")
    close = difflib.get_close_matches(ref, ids, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]}?" if close else ""
    raise RunNotFound(f"No run {ref!r} in {home / 'runs'}.{hint} List runs with 'piw runs'.")


def _local_bundle(home: Path, run_id: str) -> bool:
    """Whether ``run_id`` is a complete bundle of this SQLite-mode home (what :func:`run_ids` would list)."""
    return database_place(home) is None and is_bundle_dir(home / "runs" / run_id)


def _position(ref: str) -> int | None:
    match = _NEGATIVE.fullmatch(ref)
    return int(match.group(1)) if match else None
