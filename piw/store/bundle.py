"""Run bundles on disk: ``PIW_HOME``, run ids, bundle creation, cached state and the writer lock.

The trace is authoritative; ``state.json`` and ``manifest.json`` are caches refreshed after each commit and
checked by readers (``docs/bundle-format.md`` §4, §7). Everything piw creates is private: directories 0700, files 0600.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piw.errors import BundleLinked, RunLocked, RunNotFound, StoreError, UsageError
from piw.store.artifacts import ArtifactStore
from piw.store.artifacts import resolve as resolve_artifacts
from piw.store.fold import RunState, fold, fold_more, state_from_json, state_to_json
from piw.store.home import RUN_ID_PATTERN, is_bundle_dir
from piw.store.home import home_path as home_path  # re-exported: callers of piw.store.bundle keep working
from piw.store.home import piw_home as piw_home
from piw.store.home import tighten as tighten
from piw.store.place import runs_home, sync_mirror
from piw.store.state_json import decode_state, iter_state_json
from piw.store.trace import TraceEvent, TraceRead, decode_event, read_trace
from piw.store.trace import last_seq as trace_last_seq
from piw.wire import RUN_BUNDLE_SCHEMA, dumps_line

if TYPE_CHECKING:
    from piw.wire_models import Manifest


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with mode 0700, and tighten it if it already exists.

    Tightening only removes group and other bits: a folder its owner made read-only stays read-only."""
    if not path.exists():
        path.mkdir(mode=0o700, parents=True)
        os.chmod(path, 0o700)
    else:
        tighten(path)
    return path


def runs_dir(home: Path) -> Path:
    return ensure_private_dir(home / "runs")


def slugify(name: str) -> str:
    """The run id slug: lowercase, runs of other characters → ``-``, trimmed, at most 40 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-")
    return slug or "workflow"


def new_run_id(workflow_name: str, now: datetime | None = None) -> str:
    """``<UTC timestamp with ms>Z-<slug>-<8 hex>``: lexical order is chronological."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    stamp = moment.strftime("%Y%m%dT%H%M%S") + f"{moment.microsecond // 1000:03d}Z"
    return f"{stamp}-{slugify(workflow_name)}-{secrets.token_hex(4)}"


def check_run_id(run_id: str) -> str:
    """Validate a run id read from a user or a file."""
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise UsageError(f"{run_id!r} is not a valid run id; list runs with 'piw runs'.")
    return run_id


def write_private_file(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Atomically replace ``path`` with ``data`` (temp file in the same directory, mode 0600, ``os.replace``)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def json_bytes(value: Any) -> bytes:
    return (dumps_line(value) + "\n").encode("utf-8")


def encode_state(state: RunState) -> bytes:
    """``state.json``'s bytes: one compact line, the steps encoded straight from their records.

    Ten times faster than ``json`` on a long run. Every value in a state was folded from decoded trace lines,
    so it is plain JSON data; a float of magnitude under 1e-4 or from 1e16 up may be spelled differently from
    ``json`` (``0.00001`` for ``1e-05``): the same number, and this file is only a cache.
    """
    try:
        return b"".join(iter_state_json(state)) + b"\n"
    except TypeError:
        return json_bytes(state_to_json(state))


@dataclass(frozen=True)
class Bundle:
    """The paths of one run bundle."""

    run_id: str
    path: Path

    @property
    def trace_path(self) -> Path:
        return self.path / "trace.ndjson"

    @property
    def state_path(self) -> Path:
        return self.path / "state.json"

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def workflow_path(self) -> Path:
        return self.path / "workflow.json"

    @property
    def session_path(self) -> Path:
        return self.path / "session" / "entries.ndjson"

    @property
    def artifacts(self) -> ArtifactStore:
        return ArtifactStore(self.path)

    def read_manifest(self) -> dict[str, Any]:
        """``manifest.json``; when it is lost, rebuilt (in memory) from the trace's ``run_started``, since the
        manifest is only a cache of the trace and an intact run must not vanish with it."""
        try:
            data: dict[str, Any] = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return self.recover_manifest()
        except (OSError, ValueError) as exc:
            raise StoreError(f"Run {self.run_id} has no readable manifest.json ({exc}).") from exc
        if data.get("schema") != RUN_BUNDLE_SCHEMA:
            raise StoreError(f"Run {self.run_id} has an unknown bundle schema {data.get('schema')!r}.")
        return data

    def recover_manifest(self) -> dict[str, Any]:
        """The manifest a run's first trace line implies (status from the fold is the reader's business)."""
        from piw.wire_models import Manifest  # pydantic, loaded only when a manifest must be rebuilt

        first = first_event(self.trace_path)
        if first is None or first.type != "run_started":
            raise StoreError(
                f"Run {self.run_id} has no manifest.json and its trace holds no run_started; it never started."
            )
        payload = first.payload
        manifest = Manifest(
            run_id=self.run_id,
            workflow_name=str(payload.get("workflowName", "")),
            run_title=payload.get("runTitle"),
            workflow_source=payload.get("workflowSource") or {},
            workflow_sources=payload.get("workflowSources"),
            definition_digest=str(payload.get("definitionDigest", "")),
            started_at=first.at,
            forked_from=payload.get("forkedFrom"),
        )
        return manifest.to_wire()

    def read_snapshot(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.workflow_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreError(f"Run {self.run_id} has no readable workflow.json ({exc}).") from exc
        return data

    def read_trace(self) -> TraceRead:
        return read_trace(self.trace_path)

    def write_state(self, state: RunState) -> None:
        write_private_file(self.state_path, encode_state(state))

    def write_manifest(self, manifest: Manifest) -> None:
        write_private_file(self.manifest_path, json_bytes(manifest.to_wire()))

    def resolve(self, value: Any) -> Any:
        """Load artifact refs inside a persisted value."""
        # (the artifact store is opened only when a ref is met)
        return resolve_artifacts(value, lambda ref: self.artifacts.read(ref))


def create_bundle(home: Path, run_id: str, snapshot: dict[str, Any], manifest: Manifest) -> Bundle:
    """Create a bundle directory with its immutable snapshot and first manifest (``run_started`` comes next)."""
    check_run_id(run_id)
    path = runs_dir(home) / run_id
    path.mkdir(mode=0o700)
    (path / "session").mkdir(mode=0o700)
    write_private_file(path / "workflow.json", json_bytes(snapshot), fsync=True)
    bundle = Bundle(run_id, path)
    bundle.write_manifest(manifest)
    return bundle


def copy_artifacts(source: Bundle, target: Bundle) -> int:
    """Copy every artifact of ``source`` into ``target`` (content-addressed, so existing files are kept).

    A fork's adopted events name the parent's artifacts by bundle-relative path; they are copied, durable,
    before the first line that names them. Returns the number of files copied.
    """
    folder = source.path / "artifacts"
    if not folder.is_dir():
        return 0
    destination = ensure_private_dir(target.path / "artifacts")
    copied = 0
    for item in sorted(folder.iterdir()):
        if item.name.startswith(".") or not item.is_file() or (destination / item.name).exists():
            continue
        write_private_file(destination / item.name, item.read_bytes(), fsync=True)
        copied += 1
    return copied


def open_bundle(home: Path, run_id: str) -> Bundle:
    """The bundle of an existing run, or ``RunNotFound``; in database mode its mirror, brought up to date first.

    One that is or holds a symbolic link is refused (:func:`refuse_linked`), so no command changes a run through a
    link."""
    check_run_id(run_id)
    sync_mirror(home, run_id)
    home = runs_home(home)
    path = home / "runs" / run_id
    if not is_bundle_dir(path):
        raise RunNotFound(f"No run {run_id!r} in {home / 'runs'}; list runs with 'piw runs'.")
    return refuse_linked(Bundle(run_id, path))


LINKED_FOLDERS = ("session", "artifacts")
"""Folders of a bundle whose entries are checked too (their files are appended to, copied or read back)."""


def refuse_linked(bundle: Bundle) -> Bundle:
    """``bundle`` itself, or :class:`BundleLinked` when its folder, or anything in it, is a symbolic link.

    piw never creates links in a bundle; one that holds them was copied or made by hand, and writing through it
    would append to, replace or lock a file anywhere the link points (``piw cancel`` followed a linked run folder
    out of ``PIW_HOME``). Every writer gets its bundle from :func:`open_bundle` or takes :class:`WriterLock`, and
    both check here (``docs/guarantees.md``, "Hostile workflow files"). ``runs/`` itself may be a link (a home
    whose runs live on another disk); only what is inside a bundle is checked.
    """
    link = _first_link(bundle.path)
    if link is not None:
        try:
            target = f" (to {os.readlink(link)})"
        except OSError:
            target = ""
        raise BundleLinked(
            f"Run {bundle.run_id}: {link} is a symbolic link{target}; piw does not write through links in a run "
            "bundle, so nothing was changed. Replace it with the real folder or file, or remove the run."
        )
    return bundle


def _first_link(folder: Path) -> Path | None:
    """The first symbolic link among ``folder``, its entries and those of its :data:`LINKED_FOLDERS`."""
    if folder.is_symlink():
        return folder
    try:
        with os.scandir(folder) as entries:
            found = [
                (entry.name, entry.is_symlink(), entry.is_dir(follow_symlinks=False)) for entry in entries
            ]
    except OSError:
        return None
    for name, linked, is_dir in sorted(found):
        if linked:
            return folder / name
        if is_dir and name in LINKED_FOLDERS:
            inner = _first_link(folder / name)
            if inner is not None:
                return inner
    return None


def discard_incomplete(bundle: Bundle) -> None:
    """Remove a bundle whose ``run_started`` never committed (input that never started a run)."""
    shutil.rmtree(bundle.path, ignore_errors=True)


INCOMPLETE_MIN_AGE_S = 60.0
"""An incomplete bundle younger than this may still be being created (mkdir → snapshot → manifest → lock)."""


def set_aside_incomplete(home: Path, now: float | None = None) -> list[Path]:
    """Move bundles that never committed ``run_started`` to ``runs/.incomplete-<runId>-<ms>/``.

    A run killed before its first trace line leaves such a bundle; readers skip it and no claimer will ever
    retry it, so the next writer on this home sets it aside (kept, not deleted: it may hold the input's
    snapshot). Only bundles nobody holds and that are older than :data:`INCOMPLETE_MIN_AGE_S` are touched.
    """
    root = home / "runs"
    moment = time.time() if now is None else now
    moved: list[Path] = []
    try:
        names = [entry.name for entry in os.scandir(root)]
    except OSError:
        return moved
    folder = os.fspath(root)
    for name in names:
        if name.startswith(".") or RUN_ID_PATTERN.fullmatch(name) is None:
            continue
        try:
            # One stat per bundle, with a plain string path: every run start scans a home that keeps every run it
            # ever had. A started run's trace is never empty (a torn first line is left alone).
            if os.stat(os.path.join(folder, name, "trace.ndjson")).st_size > 0:
                continue
        except FileNotFoundError:
            pass
        except OSError:
            continue
        entry = root / name
        if not is_bundle_dir(entry):
            continue
        try:
            if moment - entry.stat().st_mtime < INCOMPLETE_MIN_AGE_S:
                continue
            lock = WriterLock(Bundle(entry.name, entry)).acquire()
        except (OSError, RunLocked, BundleLinked):
            continue
        try:
            if first_event(entry / "trace.ndjson") is None:  # checked again under the lock
                target = root / f".incomplete-{entry.name}-{int(moment * 1000)}"
                os.rename(entry, target)
                moved.append(target)
        except OSError:
            pass
        finally:
            lock.release()
    return moved


def first_event(trace_path: Path) -> TraceEvent | None:
    """The trace's first committed event, or ``None`` (no file, no complete first line, or a torn one)."""
    try:
        with trace_path.open("rb") as handle:
            line = handle.readline(1 << 24)
    except OSError:
        return None
    if not line.endswith(b"\n"):
        return None
    try:
        return decode_event(line[:-1], 1)
    except (ValueError, UnicodeDecodeError):
        return None


def _cache_is_current(bundle: Bundle) -> bool:
    """``state.json`` was written after the trace last changed (a trace edited since, even in place, is not)."""
    try:
        return bundle.trace_path.stat().st_mtime_ns <= bundle.state_path.stat().st_mtime_ns
    except OSError:
        return False


def current_state(bundle: Bundle, *, lazy_steps: bool = False) -> RunState | None:
    """``state.json`` when it is current — written after the trace last changed, naming this run, its
    ``traceSeq`` the seq of the trace's last line — else ``None``. Reads only the cache and the trace's end;
    ``lazy_steps`` as in :func:`~piw.store.state_json.decode_state` (a reader that may never look at a step)."""
    if not _cache_is_current(bundle):
        return None
    try:
        cached = decode_state(bundle.state_path.read_bytes(), lazy_steps=lazy_steps)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if cached.run_id != bundle.run_id or cached.trace_seq != trace_last_seq(bundle.trace_path):
        return None
    return cached


def load_state(bundle: Bundle, events: list[TraceEvent] | None = None) -> RunState:
    """State from ``state.json`` when it is trustworthy, plus the trace tail; otherwise a full refold.

    Without ``events``, a ``state.json`` written after the trace last changed whose ``traceSeq`` is the seq of
    the trace's last line is returned without parsing the trace at all (only its last lines are read), which is
    what makes ``piw runs`` cheap on many or long finished runs. A trace changed after its cache (appended to,
    or damaged in place) is parsed as before, so damage is still reported.
    """
    if events is None:
        current = current_state(bundle)
        if current is not None:
            return current
        events = bundle.read_trace().events
    last_seq = events[-1].seq if events else 0
    try:
        cached = state_from_json(json.loads(bundle.state_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return fold(events)
    if cached.run_id != bundle.run_id or cached.trace_seq > last_seq:
        return fold(events)
    return fold_more(cached, events[cached.trace_seq :])


def list_bundles(home: Path) -> Iterator[Bundle]:
    """Bundles with a trace (a lost manifest is recovered from it), newest first."""
    root = runs_home(home) / "runs"
    if not root.is_dir():
        return
    for entry in sorted(root.iterdir(), reverse=True):
        if is_bundle_dir(entry) and (entry / "trace.ndjson").is_file():
            yield Bundle(entry.name, entry)


class WriterLock:
    """An exclusive ``flock`` on the bundle directory, held by the one process that writes the run.

    The claim in the run database (``docs/detached.md``, "What the database holds") decides who may write; this lock
    closes the gap between the claim's check and the write: a new holder takes the lock before its first write,
    so a stale holder that passed its check still writes alone, and its next check fails. The run store's fence
    (``piw.store.file_store``) checks the lock, then the claim, before every write to the bundle.
    """

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self._fd = -1

    def acquire(self) -> WriterLock:
        """Take the lock; a bundle that is or holds a symbolic link is refused before and after taking it."""
        refuse_linked(self.bundle)
        fd = os.open(self.bundle.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLocked(
                f"Run {self.bundle.run_id} is being written by another piw process; wait for it or stop it."
            ) from None
        self._fd = fd
        try:
            refuse_linked(self.bundle)  # a link made between the first check and the lock
        except BundleLinked:
            self.release()
            raise
        return self

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def run_is_live(bundle: Bundle) -> bool:
    """True when some process holds the run's writer lock (a read-only probe: it takes a shared lock briefly)."""
    try:
        fd = os.open(bundle.path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
