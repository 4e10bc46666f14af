"""What a ``piw host`` on a database tells the others, and which runs it takes (``docs/many-machines.md``).

Routing (``multi-host.md`` §4.7): at start, and whenever its workflow files change, the host computes the serve key
of every workflow it can load (``--workflows`` folders, ``$PIW_HOME/workflows``, ``./.piw/workflows``, the
built-ins) and its queue claims only rows with those keys. A run whose recorded file path does not exist here is
resolved by its key among these files; resume still checks the hashes. Presence: the host's row in ``hosts`` (display
only, never read by a claim), refreshed every few seconds, removed when it stops cleanly.

In SQLite mode (one machine, every host sees the same files) none of this applies: :func:`open_presence` returns
``None``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from piw.store.db.rows import QueueRow
from piw.store.db.serve_keys import serve_key, serve_key_of

log = logging.getLogger(__name__)


class HostPresence:
    """Serve keys, the ``hosts`` row and key-based workflow resolution of one host in database mode."""

    def __init__(self, home: Path, queue: Any, registration: Any, folders: Sequence[Path]) -> None:
        self.home = home
        self.queue = queue
        self.registration = registration
        self.folders = [Path(folder) for folder in folders]
        self.served: dict[str, Path] = {}
        self._fingerprint: tuple[Any, ...] | None = None
        self._beat_due = 0.0
        self._keys_of: dict[tuple[str, int, int], str | None] = {}

    @property
    def serve_keys(self) -> list[str]:
        return sorted(self.served)

    def start(self) -> None:
        self.refresh(force=True)
        self.registration.register(self.serve_keys)
        self._beat_due = time.monotonic() + self._interval()

    def tick(self) -> None:
        """Each host pass: pick up changed workflow files; refresh the ``hosts`` row when due."""
        changed = self.refresh()
        if changed or time.monotonic() >= self._beat_due:
            self.registration.beat(self.serve_keys)
            self._beat_due = time.monotonic() + self._interval()

    def stop(self) -> None:
        self.registration.remove()

    def refresh(self, force: bool = False) -> bool:
        """Recompute the serve keys when a workflow file appeared, changed or went away, and take in the files that
        waiting runs name when they exist here with the right version; whether the keys changed."""
        before = set(self.served)
        fingerprint = self._files()
        if force or fingerprint != self._fingerprint:
            self._fingerprint = fingerprint
            self.served = served_workflows(self.home, self.folders)
        for key, path in self._named_by_waiting_runs().items():
            self.served.setdefault(key, path)
        self.queue.serve_keys = self.serve_keys  # the claim filter (piw.store.pg.queue)
        return force or set(self.served) != before

    def _named_by_waiting_runs(self) -> dict[str, Path]:
        """Files that ready rows this host does not serve name, which exist here with the row's version (a run
        queued on this machine from any folder), each file loaded once per change."""
        found: dict[str, Path] = {}
        try:
            pairs = self.registration.waiting_refs(self.serve_keys)
        except Exception as exc:  # display and convenience only: the next pass tries again
            log.debug("waiting runs not read: %s", exc)
            return found
        for key, reference in pairs:
            path = Path(reference)
            try:
                stat = path.stat()
            except OSError:
                continue
            mark = (str(path), stat.st_mtime_ns, stat.st_size)
            if mark not in self._keys_of:
                self._keys_of[mark] = key_of_file(path, self.home)
            if self._keys_of[mark] == key:
                found[key] = path
        return found

    def reference_for(self, row: QueueRow) -> str | None:
        """The file to load for ``row``: the one it was queued from when it exists here (its version is checked
        all the same), else the file served here with the run's key (the same version at another path)."""
        recorded = (row.workflow_source or {}).get("path") or row.workflow_ref
        if recorded and Path(str(recorded)).is_file():
            return str(recorded)
        found = self.served.get(serve_key(row.workflow_source, row.definition_digest))
        return None if found is None else str(found)

    def _files(self) -> tuple[Any, ...]:
        seen = []
        for path in workflow_files(self.home, self.folders):
            try:
                stat = path.stat()
            except OSError:
                continue
            seen.append((str(path), stat.st_mtime_ns, stat.st_size))
        return tuple(seen)

    @staticmethod
    def _interval() -> float:
        from piw.store.pg.hosts import HEARTBEAT_MS

        return HEARTBEAT_MS / 1000


def open_presence(
    home: Path, queue: Any, runner: str, concurrency: int, folders: Sequence[Path]
) -> HostPresence | None:
    """The host's presence in database mode (``None`` in SQLite mode)."""
    from piw.store.place import database_place

    place = database_place(home)
    if place is None:
        return None
    from piw import __version__
    from piw.store.pg.hosts import HostRegistration

    return HostPresence(home, queue, HostRegistration(place.db, runner, concurrency, __version__), folders)


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
