"""The run store of database mode: the trace, the conversation and the artifacts as PostgreSQL rows.

:class:`PgRunStore` is :class:`~piw.store.run_store.RunStore` over rows (``docs/many-machines.md``):

- **One fenced statement per event.** The append updates the run's ``run_queue`` row — only while it still holds
  this claim's token and generation, its lease is unexpired on the database clock, and its head is ``seq − 1`` —
  sets the head to ``seq``, renews the lease, and inserts the line (the exact NDJSON bytes) in the same statement.
  Zero rows means the claim is gone: one more row read names the reason and ``ClaimLost`` is raised. Nothing is
  ever appended without the fence, and no ``seq`` can repeat or be skipped.
- **Artifacts and session entries** follow the same pattern: an event that names new artifacts inserts them in
  one transaction with its fenced statement (rolled back when the fence refuses); a session entry is fenced on
  ``session_seq``.
- **Durability maps onto ``synchronous_commit``** (``docs/guarantees.md``): under ``effects`` a line commits
  synchronously when it is an effect point or run-scoped, otherwise asynchronously (visible at once, flushed by
  the WAL writer); ``sync_required`` before an effect flushes what is pending with one synchronous commit, which
  makes every earlier line durable. ``always``: every line synchronous; ``flush``: every line asynchronous.
- **Commit outcome unknown** (the connection drops while committing): the row at ``seq`` is read on a new
  connection; the same bytes mean it committed, none mean it did not and the same fenced statement is sent again
  (safe by construction), other bytes mean another holder wrote there (``ClaimLost``). Never a blind re-append.
- **The fence** of :meth:`PgRunStore.fence` is the holder's own check (its lease); the database fences every
  write itself, so there is no writer lock.

Each committed line is then written to the run's mirror (``piw.store.pg.mirror``), which readers read.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from piw.errors import ArtifactDamaged, ClaimLost, DatabaseUnavailable, PiwError, RunLocked
from piw.store.artifacts import ArtifactStore
from piw.store.bundle import Bundle, create_bundle, json_bytes
from piw.store.db.deadline import holder_clock
from piw.store.pg.mirror import SESSION, TRACE, Mirrors, MirrorWriter, autocommit
from piw.store.session import SessionLog
from piw.store.trace import Durability, TraceEvent, TraceRead, decode_event

if TYPE_CHECKING:
    from piw.store.fence import Fence
    from piw.wire_models import Manifest

log = logging.getLogger(__name__)

RETRIES = 5
HOLD_S = 0.005
"""How long a ride-along line may wait for the next statement to carry it (the writer's idle flusher sends it
then): a loop of compute steps sends one statement per few dozen lines instead of one per line, and another host
sees a line at most this much later."""
HOLD_LINES = 64
"""At most this many lines wait; the next one sends them."""
"""How often an append whose outcome is unknown (a dropped connection) is resolved and retried before it fails."""

_FENCE = """
    UPDATE run_queue SET {head} = %(seq)s, claim_expires_at = now_ms() + %(lease)s, updated_at = now_ms()
     WHERE run_id = %(run)s AND claim_token = %(token)s AND claim_generation = %(gen)s
       AND status IN ('starting', 'running') AND claim_expires_at > now_ms() AND {head} = %(first)s - 1
       AND set_config('synchronous_commit', %(commit)s, true) IS NOT NULL
    RETURNING run_id, status, pause_requested, cancel_requested"""
_FLAGS = (
    " RETURNING (SELECT status FROM f), (SELECT pause_requested FROM f), (SELECT cancel_requested FROM f)"
)
APPEND_TRACE = (
    "WITH f AS (" + _FENCE.format(head="trace_seq") + ") "
    "INSERT INTO trace_events (run_id, seq, generation, type, line) "
    "SELECT f.run_id, l.seq, %(gen)s, l.type, l.line FROM f, "
    "unnest(%(seqs)s::bigint[], %(types)s::text[], %(lines)s::bytea[]) AS l(seq, type, line)" + _FLAGS
)
"""The fenced append of the lines ``first`` … ``seq`` (held ride-along lines, then the line that sends them):
one statement, so they commit together or not at all."""
APPEND_SESSION = (
    "WITH f AS (" + _FENCE.format(head="session_seq") + ") "
    "INSERT INTO session_entries (run_id, seq, generation, line) SELECT run_id, %(seq)s, %(gen)s, %(line)s FROM f"
    + _FLAGS
)
PUT_ARTIFACT = (
    "INSERT INTO artifacts (run_id, sha256, media_type, bytes) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
)


def lease_ms() -> int:
    """The lease an append renews, read when it is used (a test may shorten it)."""
    from piw.store.db import rows

    return int(rows.LEASE_MS)


def _event_type(line: bytes) -> str:
    """The ``type`` column: read from the line (the writer encodes ``type`` as a plain string)."""
    start = line.find(b'"type":"')
    if start < 0:
        return ""
    start += 8
    return line[start : line.find(b'"', start)].decode("utf-8", "replace")


def _is_connection_error(exc: BaseException) -> bool:
    """A lost connection or an unreachable server: the outcome of what was being committed is unknown."""
    import psycopg

    if isinstance(exc, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable):
        return False
    return isinstance(exc, DatabaseUnavailable | psycopg.OperationalError | psycopg.InterfaceError)


class _Appender:
    """The fenced appends of one line file (the trace or the conversation) of one run."""

    def __init__(self, store: PgRunStore, name: str, table: str, statement: str, seq: int) -> None:
        self.store = store
        self.name = name
        self.table = table
        self.statement = statement
        self.seq = seq
        """The head this process last committed (or read)."""

    def append(
        self, lines: list[bytes], commit: str, artifacts: list[tuple[str, bytes]] | None = None
    ) -> int:
        """Append ``lines`` (the trace: one or more; the conversation: one) in one fenced statement; the last seq."""
        store = self.store
        first, seq = self.seq + 1, self.seq + len(lines)
        token, generation = store.claim_of()
        params: dict[str, Any] = {
            "run": store.run_id,
            "token": token,
            "gen": generation,
            "first": first,
            "seq": seq,
            "lease": lease_ms(),
            "commit": commit,
        }
        if self.table == "trace_events":
            params.update(
                seqs=list(range(first, seq + 1)), types=[_event_type(line) for line in lines], lines=lines
            )
        else:
            (params["line"],) = lines
        line = lines[-1]
        sent = holder_clock()  # the append renews the lease: the holder's own deadline moves from here
        for attempt in range(RETRIES):
            try:
                inserted = self._send(params, artifacts)
            except Exception as exc:
                if not _is_connection_error(exc) or attempt == RETRIES - 1:
                    raise
                log.warning(
                    "run %s: commit outcome unknown at seq %d (%s): resolving", store.run_id, seq, exc
                )
                time.sleep(min(0.05 * 2**attempt, 1.0))
                outcome = self._resolve(seq, line)
                if outcome is None:
                    continue  # it did not commit: the same fenced statement again
                inserted = outcome
            if inserted is None:
                raise ClaimLost(self.store.refusal(seq, self.name))
            self.seq = seq
            renewed = getattr(store._claim, "renewed", None)  # a Lease (piw.store.db.deadline)
            if renewed is not None:
                renewed(sent)
            store.confirmed(inserted)
            return seq
        raise AssertionError("unreachable")

    def _send(self, params: dict[str, Any], artifacts: list[tuple[str, bytes]] | None) -> Flags | None:
        """The row's status and flags as the append left them (it rides on the append), or ``None``: refused."""
        with autocommit(self.store.db) as conn:
            if not artifacts:
                return _flags(conn.execute(self.statement, params).fetchone())
            try:
                with conn.transaction(), conn.cursor() as cursor:
                    cursor.executemany(
                        PUT_ARTIFACT, [(params["run"], sha, "text/plain", data) for sha, data in artifacts]
                    )
                    found = _flags(cursor.execute(self.statement, params).fetchone())
                    if found is not None:
                        return found
                    raise _Refused  # the artifacts go with the refused line
            except _Refused:
                return None

    def _resolve(self, seq: int, line: bytes) -> Flags | None:
        """After a lost connection: the flags when the row at ``seq`` is ours (it committed), ``None`` when there
        is none (send again); another line there means another holder wrote: ``ClaimLost``."""
        try:
            with autocommit(self.store.db) as conn:
                found = conn.execute(
                    f"SELECT line FROM {self.table} WHERE run_id = %s AND seq = %s", (self.store.run_id, seq)
                ).fetchone()
        except Exception as exc:
            if _is_connection_error(exc):
                return None  # still unreachable: resolve again on the next try
            raise
        if found is None:
            return None
        if bytes(found[0]) == line:
            return Flags("running", False, False)  # (the flags are read again at the next append)
        raise ClaimLost("seq_conflict")


@dataclass(frozen=True)
class Flags:
    """What an append read of the run's row while it held the row lock: its status and the request flags."""

    status: str
    pause_requested: bool
    cancel_requested: bool


def _flags(row: Any) -> Flags | None:
    if row is None or row[0] is None:
        return None
    return Flags(str(row[0]), bool(row[1]), bool(row[2]))


class _Refused(Exception):
    """Rolls the artifacts of a refused append back (raised inside its transaction)."""


class PgRunStore:
    """:class:`~piw.store.run_store.RunStore` over one run's rows, with a local mirror for readers."""

    def __init__(self, db: Any, mirrors: Mirrors, bundle: Bundle, durability: Durability = "effects") -> None:
        self.db = db
        self.mirrors = mirrors
        self.bundle = bundle
        self.run_id = bundle.run_id
        self.durability = durability
        self._claim: Fence | None = None
        self._mirror: MirrorWriter | None = None
        self._trace: _Appender | None = None
        self._session: _Appender | None = None
        self._pending: list[tuple[str, bytes]] = []
        """Artifacts put since the last append: inserted in the same transaction as the line that names them."""
        self._held: list[bytes] = []
        """Ride-along lines appended but not yet sent: the next statement carries them (:data:`HOLD_S`)."""
        self._held_due: float | None = None
        self._lock = threading.RLock()
        """The writer and the conversation log append from different threads; held lines keep their order."""
        self._required = False
        """An asynchronous line that is not a ride-along is pending: an effect must flush it first."""
        self._unflushed = False
        self._read_at: tuple[int, int] | None = None
        self._artifacts = ArtifactStore(bundle.path, fsync=lambda fd: None)
        self._created = False

    # ---- who may write -----------------------------------------------------------------------------------

    def acquire(self, claim: Fence | None = None) -> PgRunStore:
        if claim is None or getattr(claim, "claim", None) is None:
            raise PiwError(
                f"Run {self.run_id}: a database-mode run is written only under a claim of its queue row."
            )
        self._claim = claim
        self._mirror = MirrorWriter(self.mirrors, self.run_id).open(create=self._created)
        trace_seq, session_seq = self._heads()
        self._trace = _Appender(self, TRACE, "trace_events", APPEND_TRACE, trace_seq)
        self._session = _Appender(self, SESSION, "session_entries", APPEND_SESSION, session_seq)
        return self

    def claim_of(self) -> tuple[str, int]:
        claim = getattr(self._claim, "claim", None)
        if claim is None:
            raise RunLocked(f"Run {self.run_id}: not taken for writing.")
        return str(claim.token), int(claim.generation)

    def confirmed(self, flags: Flags) -> None:
        """An append just passed the fence on the database and read the flags: the holder need not read them
        again at this step boundary (``Lease.appended``)."""
        appended = getattr(self._claim, "appended", None)
        if appended is not None:
            appended(flags.status, flags.pause_requested, flags.cancel_requested)

    def fence(self) -> None:
        if self._claim is None or self._trace is None:
            raise RunLocked(f"Run {self.run_id}: not taken for writing.")
        self._claim.fence()

    def release(self) -> None:
        if self._held and self._claim is not None:
            try:
                self.send_held()
            except Exception as exc:  # the claim went: they are lost like any uncommitted line
                log.warning("run %s: %d held trace lines not sent: %s", self.run_id, len(self._held), exc)
        self._held, self._held_due = [], None
        self._claim = None
        if self._mirror is not None:
            self._mirror.close()
            self._mirror = None

    def refusal(self, seq: int, name: str) -> str:
        """Why a fenced append of ``seq`` found no row to update (one row read)."""
        token, generation = self.claim_of()
        column = "trace_seq" if name == TRACE else "session_seq"
        with autocommit(self.db) as conn:
            row = conn.execute(
                f"SELECT claim_token, claim_generation, status, claim_expires_at > now_ms(), {column} "
                "FROM run_queue WHERE run_id = %s",
                (self.run_id,),
            ).fetchone()
        if row is None:
            return "row_missing"
        if row[1] != generation:
            return "generation_changed"
        if row[0] != token:
            return "token_changed"
        if row[2] not in ("starting", "running"):
            return "status_changed"
        if not row[3]:
            return "expired"
        return "seq_conflict" if row[4] != seq - 1 else "refused"

    # ---- the trace -----------------------------------------------------------------------------------------

    def _commit_mode(self, sync: bool, ride_along: bool) -> str:
        if self.durability == "always" or (self.durability == "effects" and sync):
            return "on"
        return "off"

    def append(self, line: bytes, *, sync: bool = False, ride_along: bool = False) -> None:
        if self._trace is None:
            raise RunLocked(f"Run {self.run_id}: not taken for writing.")
        commit = self._commit_mode(sync, ride_along)
        line = line.removesuffix(b"\n")  # (a row holds the line without its newline)
        with self._lock:
            if commit == "off" and ride_along and not self._pending and len(self._held) < HOLD_LINES:
                if not self._held:
                    self._held_due = time.monotonic() + HOLD_S
                self._held.append(line)  # it rides with the next statement (or the idle flush)
                return
            self._send([*self._held, line], commit, ride_along)

    def _send(self, lines: list[bytes], commit: str, ride_along: bool) -> None:
        """One fenced statement for the held lines and ``lines``' last (``lines`` starts with the held ones)."""
        assert self._trace is not None
        artifacts, self._pending = self._pending, []
        try:
            seq = self._trace.append(lines, commit, artifacts)
        except BaseException:
            self._pending = artifacts + self._pending
            raise
        self._held, self._held_due = [], None
        if commit == "on":
            self._required = self._unflushed = False
        else:
            self._unflushed = True
            self._required = self._required or not ride_along
        first = seq - len(lines) + 1
        for offset, sent in enumerate(lines):
            self._write_mirror(TRACE, first + offset, sent)
        from piw.store.pg.notify import notifier

        notifier(self.db).touch(self.run_id, urgent=any(sent.find(b'"scope":"run"') >= 0 for sent in lines))

    def held_due(self) -> float | None:
        return self._held_due

    def send_held(self) -> None:
        with self._lock:
            if self._held:
                self._send(list(self._held), "off", True)

    def _write_mirror(self, name: str, seq: int, line: bytes) -> None:
        if self._mirror is None:
            return
        try:
            self._mirror.append(name, seq, line)
        except Exception as exc:  # a cache: readers rebuild it from the rows
            log.warning("run %s: mirror not written: %s", self.run_id, exc)

    def sync(self) -> None:
        with self._lock:
            if self._held:  # one statement sends them and, synchronous, makes everything before durable too
                self._send(list(self._held), "off" if self.durability == "flush" else "on", True)
            if self._unflushed and self.durability != "flush":
                self._flush()

    def sync_required(self) -> None:
        """Before an effect: what it depends on is made durable. Held lines are ride-along (a step started, a
        compute step's result): nothing depends on them, so they wait for the next statement, as a file's
        ride-along lines wait for the next fsync; the idle flush sends them within :data:`HOLD_S` meanwhile."""
        with self._lock:
            if self._required and self.durability != "flush":
                if self._held:
                    self._send(list(self._held), "on", True)
                else:
                    self._flush()

    def _flush(self) -> None:
        """One synchronous commit: it flushes the WAL up to itself, so every earlier asynchronous line too."""
        with autocommit(self.db) as conn:
            conn.execute("SELECT pg_current_xact_id()")
        self._required = self._unflushed = False

    def close(self) -> None:
        self.send_held()  # rows need no closing; the mirror goes with release()

    def _heads(self) -> tuple[int, int]:
        with autocommit(self.db) as conn:
            row = conn.execute(
                "SELECT trace_seq, session_seq FROM run_queue WHERE run_id = %s", (self.run_id,)
            ).fetchone()
        return (int(row[0]), int(row[1])) if row is not None else (0, 0)

    def read_trace(self, from_seq: int = 1) -> TraceRead:
        """The committed trace from PostgreSQL (never the mirror): rows are whole, so there is no torn tail."""
        self.send_held()
        events: list[TraceEvent] = []
        size = 0
        for seq, line in self._rows(from_seq):
            events.append(decode_event(line, seq))
            size += len(line) + 1
        head = events[-1].seq if events else max(0, from_seq - 1)
        self._read_at = (size, head)
        return TraceRead(events, size, 0, b"")

    def _rows(self, from_seq: int) -> Iterator[tuple[int, bytes]]:
        name = f"piw_trace_{self.run_id[-8:]}"
        with self.db.connection() as conn, conn.transaction(), conn.cursor(name=name, binary=True) as cursor:
            cursor.itersize = 2000
            cursor.execute(
                "SELECT seq, line FROM trace_events WHERE run_id = %s AND seq >= %s ORDER BY seq",
                (self.run_id, from_seq),
            )
            for seq, line in cursor:
                yield int(seq), bytes(line)

    def iter_trace(self, from_seq: int = 1) -> Iterator[TraceEvent]:
        self.send_held()
        for seq, line in self._rows(from_seq):
            yield decode_event(line, seq)

    def head(self) -> int:
        self.send_held()
        return self._heads()[0]

    def unchanged(self, valid_bytes: int, tail: bytes) -> bool:
        return not tail and self._read_at is not None and self._read_at == (valid_bytes, self.head())

    def repair_tail(self, valid_bytes: int, torn_bytes: int) -> int:
        return 0  # a row commits whole: there is never a torn tail to cut

    def discard(self) -> None:
        with autocommit(self.db) as conn:
            conn.execute(
                "DELETE FROM run_bundles WHERE run_id = %s AND NOT EXISTS "
                "(SELECT 1 FROM trace_events WHERE run_id = %s)",
                (self.run_id, self.run_id),
            )
        self.mirrors.discard(self.run_id)

    # ---- the conversation and artifacts ------------------------------------------------------------------

    def open_session(self) -> SessionLog:
        return SessionLog(
            self.bundle.session_path, self.durability, fence=self.fence, appender=_SessionSink(self)
        )

    def append_session(self, line: bytes, sync: bool) -> None:
        if self._session is None:
            raise RunLocked(f"Run {self.run_id}: not taken for writing.")
        body = line.rstrip(b"\n")
        commit = "on" if self.durability == "always" or (self.durability == "effects" and sync) else "off"
        with self._lock:
            self.send_held()  # the trace lines before it commit first, as their order says
            seq = self._session.append([body], commit)
            if commit == "off":
                self._unflushed = self._required = True
            self._write_mirror(SESSION, seq, body)

    def put_artifact(self, text: str) -> dict[str, Any]:
        ref = self._artifacts.write(text)
        self._pending.append((str(ref["sha256"]), text.encode("utf-8")))
        return ref

    def get_artifact(self, ref: dict[str, Any]) -> str:
        try:
            return self._artifacts.read(ref)
        except ArtifactDamaged:
            sha = str(ref.get("sha256", ""))
            if not sha or not self.mirrors.fetch_artifact(self.run_id, sha):
                raise
            return self._artifacts.read(ref)

    def copy_artifacts(self, source: Bundle) -> int:
        self.fence()
        folder = source.path / "artifacts"
        if not folder.is_dir():
            return 0
        items = [
            (item.name.removeprefix("sha256-").removesuffix(".txt"), item.read_bytes())
            for item in sorted(folder.iterdir())
            if item.is_file() and item.name.startswith("sha256-")
        ]
        items = [(sha, data) for sha, data in items if hashlib.sha256(data).hexdigest() == sha]
        with autocommit(self.db) as conn, conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(PUT_ARTIFACT, [(self.run_id, sha, "text/plain", data) for sha, data in items])
        for _sha, data in items:
            self._artifacts.write(data.decode("utf-8"))
        return len(items)


class _SessionSink:
    """What :class:`~piw.store.session.SessionLog` appends through in database mode: fenced rows, then the mirror."""

    def __init__(self, store: PgRunStore) -> None:
        self.store = store

    def append(self, line: bytes, *, sync: bool = False, ride_along: bool = False) -> None:
        self.store.append_session(line, sync)

    def sync(self) -> None:
        self.store.sync()

    def sync_required(self) -> None:
        self.store.sync_required()

    def close(self) -> None:
        pass


class PgRunStores:
    """:class:`~piw.store.run_store.RunStores` of one database, mirrored under ``PIW_HOME``."""

    def __init__(self, db: Any, mirrors: Mirrors, durability: Durability = "effects") -> None:
        self.db = db
        self.mirrors = mirrors
        self.durability = durability

    def create(self, run_id: str, snapshot: dict[str, Any], manifest: Manifest) -> PgRunStore:
        """Record the run's definition snapshot and first manifest (its queue row exists: it was claimed first),
        and create its mirror."""
        with autocommit(self.db) as conn:
            conn.execute(
                "INSERT INTO run_bundles (run_id, workflow_json, manifest_json) VALUES (%s, %s, %s) "
                "ON CONFLICT (run_id) DO UPDATE SET workflow_json = EXCLUDED.workflow_json, "
                "manifest_json = EXCLUDED.manifest_json",  # (created before, never started: again)
                (run_id, json_bytes(snapshot), json_bytes(manifest.to_wire())),
            )
        self.mirrors.discard(run_id)  # (a mirror left by an earlier database under the same root)
        bundle = create_bundle(self.mirrors.root, run_id, snapshot, manifest)
        store = PgRunStore(self.db, self.mirrors, bundle, self.durability)
        store._created = True
        return store

    def open(self, run_id: str) -> PgRunStore:
        bundle = self.mirrors.sync(run_id)
        return PgRunStore(self.db, self.mirrors, bundle, self.durability)

    def head(self, run_id: str) -> int:
        with autocommit(self.db) as conn:
            row = conn.execute("SELECT trace_seq FROM run_queue WHERE run_id = %s", (run_id,)).fetchone()
        return int(row[0]) if row is not None else 0
