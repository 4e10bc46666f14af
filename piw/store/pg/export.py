"""``piw export`` and ``piw import``: a run as a standard bundle, in and out of the database (docs/many-machines.md).

- :func:`export_run` writes any run — a SQLite-mode bundle or a database-mode run's rows — as a standard bundle
  (``docs/bundle-format.md``): ``workflow.json``, ``manifest.json``, ``trace.ndjson``, ``session/entries.ndjson``,
  ``artifacts/`` and a fresh ``state.json``. The trace, the conversation and the artifacts are the exact bytes the
  run committed, so an exported database run reads — and folds — exactly like the same run made in SQLite mode.
  From the database it reads the rows, never the mirror.
- :func:`import_bundle` moves a local run (parked, interrupted or finished, and nobody writing it) into the
  database: one transaction inserts its queue row, its definition, every line, entry and artifact, and sets the
  heads, so the run is there whole or not at all. A host or ``piw resume`` then continues an unfinished one; the
  local bundle is left as it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.errors import PiwError, RunNotFound, UsageError
from piw.store.bundle import (
    Bundle,
    encode_state,
    ensure_private_dir,
    json_bytes,
    open_bundle,
    run_is_live,
    write_private_file,
)
from piw.store.db.dialect import dumps
from piw.store.fold import RunState, fold
from piw.store.trace import decode_event, iter_lines, read_trace


@dataclass(frozen=True)
class RunFiles:
    """The authoritative parts of one run, as bytes."""

    run_id: str
    workflow: bytes
    manifest: bytes
    trace: list[bytes]
    """Each line without its newline."""
    session: list[bytes]
    artifacts: dict[str, bytes]
    """sha256 → bytes."""

    def state(self) -> RunState:
        return fold([decode_event(line, seq) for seq, line in enumerate(self.trace, 1)])


def _valid_lines(data: bytes) -> list[bytes]:
    """The complete lines of a bundle file's valid prefix (a torn tail was never committed)."""
    return [line for _, line in iter_lines(data)]


def _artifact_files(folder: Path) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    if folder.is_dir():
        for item in sorted(folder.iterdir()):
            if item.is_file() and item.name.startswith("sha256-") and item.name.endswith(".txt"):
                found[item.name.removeprefix("sha256-").removesuffix(".txt")] = item.read_bytes()
    return found


def bundle_files(bundle: Bundle) -> RunFiles:
    """A bundle's parts: the valid prefix of its trace (checked: ``TraceCorrupt`` for a damaged middle line)."""
    read = read_trace(bundle.trace_path)
    data = bundle.trace_path.read_bytes() if bundle.trace_path.exists() else b""
    trace = _valid_lines(data[: read.valid_bytes])
    try:
        session_data = bundle.session_path.read_bytes()
    except FileNotFoundError:
        session_data = b""
    return RunFiles(
        bundle.run_id,
        bundle.workflow_path.read_bytes(),
        json_bytes(bundle.read_manifest()),
        trace,
        _valid_lines(session_data),
        _artifact_files(bundle.path / "artifacts"),
    )


def database_files(db: Any, run_id: str) -> RunFiles:
    """A database-mode run's parts, from its rows (``RunNotFound`` without them)."""
    from piw.store.pg.mirror import autocommit

    with autocommit(db) as conn:
        found = conn.execute(
            "SELECT workflow_json, manifest_json FROM run_bundles WHERE run_id = %s", (run_id,)
        ).fetchone()
        if found is None:
            raise RunNotFound(f"No run {run_id!r} in the database; list runs with 'piw runs'.")
        trace = conn.execute(
            "SELECT line FROM trace_events WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
        session = conn.execute(
            "SELECT line FROM session_entries WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
        artifacts = conn.execute(
            "SELECT sha256, bytes FROM artifacts WHERE run_id = %s ORDER BY sha256", (run_id,)
        ).fetchall()
    return RunFiles(
        run_id,
        bytes(found[0]),
        bytes(found[1]),
        [bytes(line) for (line,) in trace],
        [bytes(line) for (line,) in session],
        {sha: bytes(data) for sha, data in artifacts},
    )


def final_manifest(files: RunFiles, state: RunState) -> bytes:
    """The manifest as the run's writer leaves it: the recorded one with the fold's status, title and end."""
    manifest = json.loads(files.manifest)
    wanted = {"status": state.status, "runTitle": state.run_title, "finishedAt": state.finished_at}
    if all(manifest.get(key) == value for key, value in wanted.items()):
        return files.manifest
    from piw.wire_models import Manifest

    updated = Manifest.model_validate(manifest).model_copy(
        update={"status": state.status, "run_title": state.run_title, "finished_at": state.finished_at}
    )
    return json_bytes(updated.to_wire())


def write_bundle(files: RunFiles, target: Path) -> Path:
    """Write ``files`` as a standard bundle at ``target/<runId>`` (refused when it exists); its path."""
    path = ensure_private_dir(target) / files.run_id
    if path.exists():
        raise UsageError(f"{path} already exists; export into another folder or remove it first.")
    state = files.state()
    path.mkdir(mode=0o700)
    ensure_private_dir(path / "session")
    write_private_file(path / "workflow.json", files.workflow)
    write_private_file(path / "manifest.json", final_manifest(files, state))
    write_private_file(path / "trace.ndjson", b"".join(line + b"\n" for line in files.trace))
    write_private_file(path / "session" / "entries.ndjson", b"".join(line + b"\n" for line in files.session))
    if files.artifacts:
        folder = ensure_private_dir(path / "artifacts")
        for sha, data in sorted(files.artifacts.items()):
            write_private_file(folder / f"sha256-{sha}.txt", data)
    write_private_file(path / "state.json", encode_state(state))
    return path


def export_run(home: Path, run_id: str, target: Path) -> Path:
    """``piw export RUN DIR``: the run as a standard bundle under ``DIR`` (from the rows in database mode)."""
    from piw.store.place import database_place

    place = database_place(home)
    files = database_files(place.db, run_id) if place is not None else bundle_files(open_bundle(home, run_id))
    return write_bundle(files, target)


@dataclass(frozen=True)
class Imported:
    run_id: str
    status: str
    queue_status: str
    events: int


def import_bundle(home: Path, path: Path) -> Imported:
    """``piw import BUNDLE``: copy a local run into the database this command uses (see the module docstring)."""
    from piw.store.db.rows import FINAL_QUEUE_STATUS
    from piw.store.place import database_place

    place = database_place(home)
    bundle = _bundle_at(path)
    if run_is_live(bundle):
        raise UsageError(
            f"Run {bundle.run_id} is being written by a piw process; wait for it or stop it first."
        )
    files = bundle_files(bundle)
    state = files.state()
    if not state.run_id:
        raise UsageError(
            f"{path} holds no started run (its trace has no run_started); there is nothing to import."
        )
    if state.run_id != bundle.run_id:
        raise UsageError(
            f"{path} holds run {state.run_id}, not {bundle.run_id}; rename the folder to its run id."
        )
    queue_status = FINAL_QUEUE_STATUS.get(state.status, "parked") if state.is_terminal else "parked"
    if place is None:  # a SQLite home: the bundle copied in whole (a gc archive brought back)
        from piw.store.local_import import import_local

        import_local(home, bundle)
        return Imported(state.run_id, state.status, queue_status, len(files.trace))
    _insert(place, files, state, queue_status)
    return Imported(state.run_id, state.status, queue_status, len(files.trace))


def _bundle_at(path: Path) -> Bundle:
    path = path.expanduser().resolve()
    if not (path / "trace.ndjson").is_file() or not (path / "workflow.json").is_file():
        raise UsageError(
            f"{path} is not a run bundle (no trace.ndjson and workflow.json); name a run's folder."
        )
    return Bundle(path.name, path)


def _insert(place: Any, files: RunFiles, state: RunState, queue_status: str) -> None:
    """Insert the run whole, in one transaction; ``UsageError`` when the database already has it."""
    from piw.store.db.rows import NewRun
    from piw.store.pg.mirror import autocommit

    source = state.workflow_source or {}
    row = NewRun(
        run_id=state.run_id,
        workflow_ref=str(source.get("path") or source.get("id") or state.workflow_name),
        workflow_source=source,
        definition_digest=state.definition_digest,
        input=None,
        origin_session_id=(state.origin_session or {}).get("id"),
    )
    events = [decode_event(line, seq) for seq, line in enumerate(files.trace, 1)]
    park_reason = "interrupted" if queue_status == "parked" else None
    with autocommit(place.db) as conn, conn.transaction(), conn.cursor() as cursor:
        cursor.execute(
            "INSERT INTO run_queue (run_id, status, workflow_ref, workflow_source_json, definition_digest, "
            "origin_session_id, park_reason, trace_seq, session_seq, created_at, updated_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, now_ms(), now_ms()) ON CONFLICT DO NOTHING",
            (
                row.run_id,
                queue_status,
                row.workflow_ref,
                dumps(source),  # (its serve_key: the schema's trigger hashes it, as for every new row)
                row.definition_digest,
                row.origin_session_id,
                park_reason,
                len(files.trace),
                len(files.session),
            ),
        )
        if cursor.rowcount != 1:
            raise UsageError(f"Run {state.run_id} is already in the database {place.setting.redacted()}.")
        cursor.execute(
            "INSERT INTO run_bundles (run_id, workflow_json, manifest_json) VALUES (%s, %s, %s)",
            (row.run_id, files.workflow, final_manifest(files, state)),
        )
        cursor.executemany(
            "INSERT INTO trace_events (run_id, seq, generation, type, line) VALUES (%s, %s, 0, %s, %s)",
            [
                (row.run_id, event.seq, event.type, line)
                for event, line in zip(events, files.trace, strict=True)
            ],
        )
        cursor.executemany(
            "INSERT INTO session_entries (run_id, seq, generation, line) VALUES (%s, %s, 0, %s)",
            [(row.run_id, seq, line) for seq, line in enumerate(files.session, 1)],
        )
        cursor.executemany(
            "INSERT INTO artifacts (run_id, sha256, media_type, bytes) VALUES (%s, %s, 'text/plain', %s)",
            [(row.run_id, sha, data) for sha, data in sorted(files.artifacts.items())],
        )


__all__ = ["Imported", "PiwError", "RunFiles", "export_run", "import_bundle"]
