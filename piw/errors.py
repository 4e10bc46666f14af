"""The piw error tree: one base, a handful of families, messages that say what to do next.

    PiwError                      base; the CLI turns it into ``Error: …`` and an exit code
    ├── UsageError                bad arguments or input given on the command line (exit 2)
    │   ├── InputInvalid          ``--input`` is not valid JSON or fails the workflow's input model
    │   ├── AnswerInvalid         an answer does not fit the checkpoint's choices or answer model, or the run
    │   │   │                     is not waiting for one; nothing was recorded
    │   │   └── RequestChanged    a decision named a request digest other than the open request's (stale)
    │   └── AnswerTokenRefused    a channel's answer link or button was already used, expired, or belongs to
    │                             a wait that is over (``docs/channels.md``)
    ├── DefinitionError           a workflow definition is malformed (helper arguments, graph shape)
    ├── LoadError                 a workflow file cannot be found, imported or does not bind ``workflow``
    │   └── ImportTimeout         importing a workflow file ran past its deadline (an endless loop at import)
    ├── RunNotFound               no run bundle with that id
    ├── TraceCorrupt              a trace line other than the torn tail fails to parse
    ├── StoreError                a bundle cannot be created or read (layout, paths, locks)
    │   ├── RunLocked             another process holds the run's writer lock
    │   ├── BundleLinked          a run bundle is, or holds, a symbolic link; nothing is written through it
    │   ├── ArtifactDamaged       an artifact is missing or no longer matches its sha256
    │   ├── HomeUnavailable       ``PIW_HOME`` cannot be created, or cannot be written (read-only)
    │   ├── StorageFull           the disk filled while a run was written; the run is parked
    │   ├── StateSchemaMismatch   ``piw.sqlite`` was written by an incompatible piw, or a PostgreSQL schema is
    │   │                         outside this piw's window (``piw db migrate``, or another piw version)
    │   ├── StoreBusy             the run database could not be read or written just now (busy, locked)
    │   │   └── DatabaseBusy      another process held ``piw.sqlite`` locked past the wait limit (exit 75)
    │   └── DatabaseUnavailable   the configured PostgreSQL cannot be reached or used (URL shown redacted), or
    │                             psycopg (``piw[postgres]``) is not installed
    ├── ClaimLost                 the writer no longer holds the run's claim; nothing was written
    ├── IdempotencyConflict       a repeated command (same key) with a different request; nothing was changed
    │   ├── ContinuationExists    the checkpoint was already answered differently (one continuation each)
    │   └── DecisionResolved      the decision was already resolved with another answer (or timed out)
    ├── ContinuationNotStarted    an answer was recorded but its continuation could not start (it stays queued)
    ├── RunInterrupted            a foreground run was interrupted (Ctrl-C, SIGTERM); it is parked (exit 130)
    ├── ResumeRefused             a run cannot be resumed
    │   ├── SourceChanged         the workflow source or definition changed since the run started
    │   └── RunFinished           the run already has a terminal event
    ├── NodeFailure               raised inside node execution; becomes a ``node_failed`` event
    │   ├── OutputInvalid         a node output cannot be stored as JSON
    │   ├── Cancelled             the attempt was cancelled, parked or hit its deadline
    │   ├── AttemptInactive       an update or submission arrived for an attempt that is not active
    │   └── ShellLineTooLong      a shell node's update line passed its byte limit; the action fails
    ├── UpdateRejected            an update failed validation or limits; nothing was written
    ├── ProviderError             provider configuration or selection problems
    │   ├── NeedsKey              an ``$ENV`` key reference is unset
    │   └── ScriptExhausted       the scripted provider received more requests than it has replies
    ├── ToolServerError           an agent step names an MCP server that ``config.toml`` does not configure, or
    │                             the ``mcp`` SDK (``piw[mcp]``) is not installed (``docs/tools-mcp.md``)
    ├── TelemetryError            an OTLP endpoint is malformed, its collector refused the spans, or ``piw[otel]``
    │                             is not installed (``docs/telemetry.md``)
    ├── CaseError                 ``piw test``: a test case cannot be recorded or used (exit 2)
    │   └── BrokenCase            a case folder's file or field is malformed, its workflow is missing, or its
    │                             recorded replies ran out; names the file and the field
    └── NotConfirmed              a run over ``--confirm-above`` was declined at the prompt (exit 1), or could
                                  not be asked (stdin not a terminal, no ``--yes``: exit 2); nothing started
    OutcomeUnknown (ResumeRefused) a ``once`` effect was interrupted; only ``piw resolve`` continues the run
    NotOutcomeUnknown (UsageError) ``piw resolve`` on a run whose outcome is not unknown; nothing changed
    ScheduleExists (UsageError)   ``piw schedule add`` with a name that exists; nothing stored
    ScheduleNotFound (UsageError) no schedule with that name
    RunHeld (UsageError)          ``piw rm`` of a run that is still held (running, waiting, parked)
    ScriptUnstable (DefinitionError) ``piw validate``: a script's leaf keys differ between two runs (time,
                                  randomness, set order); names the call site (``docs/dynamic-workflows.md``)
    DuplicateRun                  ``piw run --detach`` of a file and input whose run is still live; names that
                                  run, nothing started (``--allow-duplicate`` starts a second; exit 1)

Exit codes live with the CLI; this module only classifies.
"""

from __future__ import annotations

from typing import Any


class PiwError(Exception):
    """Base of every error piw raises on purpose."""

    exit_code: int = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(PiwError):
    """Bad command-line arguments or input."""


class InputInvalid(UsageError):
    """The run input is not valid JSON or does not match the workflow's input model."""


class AnswerInvalid(UsageError):
    """An answer does not fit the checkpoint, or the run is not waiting for it; nothing was recorded."""


class DefinitionError(PiwError):
    """A workflow definition is malformed; the message names the file, node and reason."""


class LoadError(PiwError):
    """A workflow cannot be found or imported."""


class ImportTimeout(LoadError):
    """Importing a workflow file took longer than its deadline (``PIW_IMPORT_TIMEOUT``, ``import_timeout_s``)."""


class RunNotFound(PiwError):
    """No run bundle exists for the requested run id."""


class TraceCorrupt(PiwError):
    """A trace line other than the last one is damaged; the file is left untouched."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


class StoreError(PiwError):
    """A run bundle cannot be created, read or locked."""


class RunLocked(StoreError):
    """Another process is writing this run."""


class BundleLinked(StoreError):
    """A run bundle is a symbolic link or holds one (``trace.ndjson``, ``state.json``, …): piw writes nothing
    through it, inside or outside ``PIW_HOME`` (``docs/guarantees.md``, "Hostile workflow files")."""


class HomeUnavailable(StoreError):
    """``PIW_HOME`` cannot be created or written (read-only filesystem, permissions); read-only commands still
    work on an existing one."""


class StorageFull(StoreError):
    """The disk (or quota) filled while a run was written; the run is parked and resumes once there is space."""

    exit_code = 75  # EX_TEMPFAIL: try again later


class ArtifactDamaged(StoreError):
    """An artifact a run refers to is missing or its content no longer matches its sha256; ``path`` names it."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class StateSchemaMismatch(StoreError):
    """The SQLite database has an unknown schema; back it up and move it aside."""


class StoreBusy(StoreError):
    """The run database could not be read or written just now (busy, locked, failing); a lease retries it.

    Raised from the database's own error (its ``__cause__``), so a full disk or a read-only home is still told
    apart from it (``piw.store.storage``)."""


class DatabaseBusy(StoreBusy):
    """Another process held ``piw.sqlite`` locked for longer than piw waits (``PIW_DB_BUSY_WAIT_S``); nothing was
    changed by the command that gave up."""

    exit_code = 75  # EX_TEMPFAIL: try again later


class DatabaseUnavailable(StoreError):
    """The configured PostgreSQL database cannot be reached or used; the message shows its URL redacted."""


class ClaimLost(PiwError):
    """The writer lost its claim on the run; nothing more may be written."""

    def __init__(self, reason: str) -> None:
        if reason == "missing":  # no row at all: the database was deleted or replaced, nobody took the run
            message = (
                "Claim lost (missing): the run's row is gone from piw.sqlite (was the database deleted or "
                "replaced?); nothing more was written."
            )
        else:
            message = f"Claim lost ({reason}); another process now owns this run."
        super().__init__(message)
        self.reason = reason


class IdempotencyConflict(PiwError):
    """The same command key was used before with a different request; the stored receipt stands."""


class ContinuationExists(IdempotencyConflict):
    """The checkpoint already has its one continuation, started by a different answer."""

    def __init__(self, message: str, continuation_run_id: str = "") -> None:
        super().__init__(message)
        self.continuation_run_id = continuation_run_id


class DecisionResolved(IdempotencyConflict):
    """The decision already has its winner (a person or the timeout policy); the first valid answer wins."""


class ContinuationNotStarted(PiwError):
    """An answer was recorded, then its continuation could not start here: it stays queued with the reason.

    Exit 1 (130 when interrupted), never 2: exit 2 means nothing was recorded (``docs/cli.md``).
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class RunInterrupted(PiwError):
    """The foreground run was interrupted (Ctrl-C or SIGTERM); it is parked and can be resumed."""

    exit_code = 130


class ResumeRefused(PiwError):
    """The run cannot be resumed."""


class SourceChanged(ResumeRefused):
    """The workflow changed since the run started; completed steps cannot be replayed."""


class RunFinished(ResumeRefused):
    """The run already ended; there is nothing to resume."""


class NodeFailure(PiwError):
    """A failure inside one node attempt; the engine records it as ``node_failed``."""

    outcome: str = "failed"


class OutputInvalid(NodeFailure):
    """A node returned a value that cannot be stored as JSON (an author bug)."""


class Cancelled(NodeFailure):
    """The attempt was cancelled, parked or ran past its deadline."""

    outcome = "cancelled"


class AttemptInactive(NodeFailure):
    """An update or submission named an attempt that is no longer active."""

    def __init__(self, node_id: str, attempt_id: str) -> None:
        super().__init__(f"attempt {attempt_id} of step {node_id} is not active")
        self.node_id = node_id
        self.attempt_id = attempt_id


class ShellLineTooLong(NodeFailure):
    """A line (or a pending unterminated buffer) passed the byte limit; the action fails.

    ``lines`` holds the complete lines framed before the offending one in the same chunk, so the executor can
    hand them to the parser first, exactly as if they had arrived in an earlier read.
    """

    def __init__(self, stream: str, limit: int, lines: tuple[Any, ...] = ()) -> None:
        # ``lines`` are ``piw.updates.shell_lines.ShellLine``s; not named here, so this module imports nothing of piw
        super().__init__(f"shell {stream} update line exceeded {limit} bytes")
        self.stream = stream
        self.limit = limit
        self.lines = lines


class UpdateRejected(PiwError):
    """An update failed validation or limits; the message names the field and rule, never the data."""


class ProviderError(PiwError):
    """Provider configuration or selection problems (unknown provider, bad config)."""


class NeedsKey(ProviderError):
    """A configured ``$NAME`` key reference is not set in the environment."""

    def __init__(self, variable: str) -> None:
        super().__init__(
            f"Environment variable {variable} is not set; export it or change the provider's api_key."
        )
        self.variable = variable


class ScriptExhausted(ProviderError):
    """The scripted provider has no reply left for a request."""


class RequestChanged(AnswerInvalid):
    """A decision was answered with the digest of a request other than the open one (stale); nothing was recorded."""


class OutcomeUnknown(ResumeRefused):
    """An ``effect="once"`` action was interrupted mid-way: nobody knows whether it happened, so the run is parked
    with status ``unknown`` until a person answers ``piw resolve RUN done|retry|skip`` (``docs/effects.md``)."""


class NotOutcomeUnknown(UsageError):
    """``piw resolve`` named a run whose outcome is not unknown; nothing was changed."""


class ToolServerError(PiwError):
    """An MCP server a step names is not configured, or the ``mcp`` SDK is missing; nothing was started."""


class TelemetryError(PiwError):
    """OpenTelemetry export failed: a malformed endpoint, a collector that refused the spans, no ``piw[otel]``."""


class AnswerTokenRefused(UsageError):
    """A channel's answer token is unknown, used, expired or stale; nothing was recorded (``docs/channels.md``)."""


class CaseError(PiwError):
    """A run cannot be recorded as a test case, or a test case cannot be used (``docs/testing.md``)."""


class BrokenCase(CaseError):
    """A case folder cannot be run: one line naming the file and the field (``piw test`` exits 2)."""

    def __init__(self, file: str, field: str, reason: str) -> None:
        super().__init__(f"{file}: {field}: {reason}")
        self.file = file
        self.field = field
        self.reason = reason


class ScheduleExists(UsageError):
    """``piw schedule add`` with a name that is taken; nothing was stored."""


class ScheduleNotFound(UsageError):
    """No schedule has that name."""


class RunHeld(UsageError):
    """A run named for removal is not finished (running, waiting, parked, outcome unknown); nothing was removed."""


class NotConfirmed(PiwError):
    """A run whose projected cost is over ``--confirm-above`` / ``[budget] confirm_above`` did not start: the
    person declined (exit 1), or nobody could be asked (exit 2: stdin is not a terminal and ``--yes`` is not
    given). Nothing was created (``docs/planning.md``)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ScriptUnstable(DefinitionError):
    """A script's leaf keys (or a key's prompt) differ between two dry runs; the message names the call site."""


class DuplicateRun(PiwError):
    """``piw run FILE --detach`` while a run of the same file with the same input is still live (queued, running
    or parked): nothing was started; the message names the live run (``docs/dynamic-workflows.md``)."""

    exit_code = 1
