"""Answering checkpoints and deciding human gates: validation, the one winning answer, the continuation.

``piw answer RUN JSON`` and ``piw decide RUN CHOICE [--text T]`` (and the terminal prompt of a foreground run)
all come here. An answer is checked against what the waiting run recorded (its choices and text limits, or the
checkpoint's answer model) before anything is written; then the answer book records the first valid answer and
the continuation it starts, in one transaction, so a checkpoint has exactly one continuation whatever races
(``docs/design/persistence.md`` §8, §10.3). A model can never get here: the ``workflow`` tool has no answer action, and
executors never call this module.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import shlex
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from piw.errors import (
    AnswerInvalid,
    ContinuationExists,
    DecisionResolved,
    PiwError,
    RequestChanged,
    RunNotFound,
    UsageError,
)
from piw.run.continuation import ContinuationSpec
from piw.run.decision_book import new_decision
from piw.run.launch import LaunchOptions
from piw.store.bundle import new_run_id, open_bundle
from piw.store.db.decisions import AnswerRecord
from piw.store.db.holders import runner_id
from piw.store.db.queue import RunQueue
from piw.store.db.rows import NewRun
from piw.store.db.run_database import RunDatabase, open_run_database
from piw.store.fold import RunState, fold
from piw.store.trace import iter_trace
from piw.wire import digest, format_time
from piw.workflow.answer_example import example_text
from piw.workflow.budget import BUDGET_WAIT, parse_budget_answer
from piw.workflow.gates import check_answer, is_gate_request

Provenance = Literal["human", "timeout", "cancel"]


@dataclass(frozen=True)
class Wait:
    """What a waiting run waits for: a human decision (its open request) or a plain checkpoint (its summary)."""

    run_id: str
    workflow_name: str
    node_id: str
    kind: Literal["human_decision", "checkpoint", "budget"]
    output: Any
    """The gate's recorded request (``kind == "human_decision"``) or the checkpoint's summary."""
    answer_schema: dict[str, Any] | None = None
    """The checkpoint's declared answer model as JSON schema (from the definition snapshot), if any."""

    @property
    def decision_id(self) -> str | None:
        return str(self.output["decisionId"]) if self.kind == "human_decision" else None

    @property
    def request_sha256(self) -> str | None:
        return str(self.output.get("requestSha256")) if self.kind == "human_decision" else None

    def example(self) -> str:
        """An answer this wait accepts, as JSON text: one that fits the checkpoint's answer model, a decision's
        first choice, or a top-up of one request."""
        if self.kind == "budget":
            return json.dumps({"topUp": {"modelRequests": 1}})
        if self.kind == "human_decision":
            choices = self.output.get("choices") if isinstance(self.output, dict) else None
            first = (
                choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
            )
            return json.dumps({"choice": str(first.get("id", "…"))}, ensure_ascii=False)
        return example_text(self.answer_schema)

    def answer_command(self) -> str:
        return f"piw answer {self.run_id} {shlex.quote(self.example())}"


def read_wait(home: Path, run_id: str) -> tuple[Wait, RunState]:
    """The wait of a run that ended ``waiting``; ``AnswerInvalid`` (nothing to answer) otherwise."""
    bundle = open_bundle(home, run_id)
    state = fold(bundle.read_trace().events)
    if not state.run_id:
        raise AnswerInvalid(f"Run {run_id} never started; there is nothing to answer.")
    if state.status != "waiting" or not state.waiting_on:
        hint = (
            " It is still running; wait for it to stop at the checkpoint."
            if state.status == "running"
            else ""
        )
        raise AnswerInvalid(f"Run {run_id} is not waiting for an answer ({state.status}).{hint}")
    output = bundle.resolve(state.final_output)
    if state.waiting_on == BUDGET_WAIT:
        return Wait(run_id, state.workflow_name, BUDGET_WAIT, "budget", output), state
    node = bundle.read_snapshot().get("nodes", {}).get(state.waiting_on, {})
    if is_gate_request(output) and "humanDecision" in node:
        return Wait(run_id, state.workflow_name, state.waiting_on, "human_decision", output), state
    schema = node.get("answer", {}).get("schema") if isinstance(node.get("answer"), dict) else None
    return Wait(run_id, state.workflow_name, state.waiting_on, "checkpoint", output, schema), state


def who_answers() -> str:
    """``user@host`` of the person at this terminal (recorded as ``answered_by``)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment: still record the host
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class AnswerClaim:
    """One attempt to answer: what the book records when it wins, and what a repeat is compared with."""

    spec: ContinuationSpec
    fingerprint: str
    """``sha256:`` of the canonical answer (a decision: choice and texts; a checkpoint: the answer JSON)."""
    scope: Literal["run.answer", "decision.answer"]
    key: str
    """The idempotency key: the decision id, or the waiting run's id for a plain checkpoint."""
    provenance: Provenance = "human"
    answered_by: str = ""
    decision_id: str | None = None
    request_sha256: str | None = None
    workflow_name: str = ""
    opened: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The open request (a decision), recorded if the gate opened before the database held decisions."""


@dataclass(frozen=True)
class AnswerReceipt:
    """The winning answer as recorded: the continuation it started, and whether this call adopted it."""

    spec: ContinuationSpec
    adopted: bool
    provenance: str = "human"

    @property
    def continuation_run_id(self) -> str:
        return self.spec.run_id

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.spec.parent_run_id,
            "nodeId": self.spec.node_id,
            "continuationRunId": self.spec.run_id,
            "answer": self.spec.answer,
            "humanDecision": self.spec.human_decision,
            "adopted": self.adopted,
        }


def _fingerprint(value: Any) -> str:
    return digest(value)


def claim_decision(
    wait: Wait,
    choice: str,
    texts: Mapping[str, str],
    *,
    provenance: Provenance = "human",
    answered_by: str | None = None,
    seen_sha256: str | None = None,
    now_iso: str,
) -> AnswerClaim:
    """Check a decision answer against the open request; ``AnswerInvalid`` names what to fix."""
    if wait.kind != "human_decision":
        raise AnswerInvalid(
            f"Run {wait.run_id} waits at checkpoint {wait.node_id}, which is not a decision. Answer it with: "
            f"{wait.answer_command()}"
        )
    if seen_sha256 is not None and seen_sha256 != wait.request_sha256:
        raise RequestChanged(
            f"The request of decision {wait.node_id} is {wait.request_sha256}, not {seen_sha256}; look at it again "
            f"with 'piw inspect {wait.run_id}' before deciding."
        )
    try:
        answer = check_answer(wait.output, choice, texts, provenance)
    except ValueError as exc:
        raise AnswerInvalid(str(exc)) from None
    by = answered_by or who_answers()
    receipt = {
        "decisionId": wait.decision_id,
        "choice": choice,
        "provenance": provenance,
        "answeredBy": by,
        "requestSha256": wait.request_sha256,
        "resolvedAt": now_iso,
    }
    texts_given = {key: value for key, value in answer.items() if key not in ("choice", "provenance")}
    spec = ContinuationSpec(new_run_id(wait.workflow_name), wait.run_id, wait.node_id, answer, receipt)
    assert wait.decision_id is not None
    return AnswerClaim(
        spec=spec,
        fingerprint=_fingerprint({"choice": choice, "texts": texts_given}),
        scope="decision.answer",
        key=wait.decision_id,
        provenance=provenance,
        answered_by=by,
        decision_id=wait.decision_id,
        request_sha256=wait.request_sha256,
        workflow_name=wait.workflow_name,
        opened=wait.output,
    )


def parse_answer_json(text: str, wait: Wait | None = None) -> Any:
    """The answer's JSON; ``AnswerInvalid`` shows an answer ``wait`` accepts (``{"ok": true}`` without one)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        example = wait.example() if wait is not None else example_text(None)
        raise AnswerInvalid(
            f"The answer is not valid JSON ({exc.msg} at position {exc.pos}); quote it, e.g. {shlex.quote(example)}."
        ) from None


def claim_answer(
    wait: Wait,
    value: Any,
    answer_model: type[BaseModel] | None,
    *,
    answered_by: str | None = None,
    now_iso: str,
) -> AnswerClaim:
    """``piw answer``: a decision answered as JSON ``{"choice": …, <text inputs>}``, or a checkpoint's answer.

    A run waiting on its budget takes a top-up, ``{"topUp": {"costUsd": 1.0}}``; a top-up is refused for any
    other wait.
    """
    if wait.kind == "budget":
        try:
            answer = parse_budget_answer(value)
        except UsageError as exc:
            raise AnswerInvalid(str(exc).replace("piw cancel RUN", f"piw cancel {wait.run_id}")) from None
        return _run_answer(wait, BUDGET_WAIT, answer, answered_by)
    if isinstance(value, dict) and set(value) == {"topUp"}:
        raise AnswerInvalid(
            f"Run {wait.run_id} is not waiting on its budget (it waits at {wait.node_id}); a top-up only answers a "
            "run stopped by its budget."
        )
    if wait.kind == "human_decision":
        if not isinstance(value, dict) or not isinstance(value.get("choice"), str):
            raise AnswerInvalid(
                f'Decision {wait.node_id} takes {{"choice": ..., <text inputs>}}; or use '
                f"'piw decide {wait.run_id} CHOICE'."
            )
        if "provenance" in value:
            raise AnswerInvalid("An answer cannot set 'provenance'; piw records who answered and how.")
        texts = {key: item for key, item in value.items() if key != "choice"}
        bad = next((key for key, item in texts.items() if not isinstance(item, str)), None)
        if bad is not None:
            raise AnswerInvalid(f"Text input {bad!r} must be a string.")
        return claim_decision(wait, value["choice"], texts, answered_by=answered_by, now_iso=now_iso)
    answer = value
    if answer_model is not None:
        try:
            answer = answer_model.model_validate(value).model_dump(mode="json")
        except ValidationError as exc:
            first = exc.errors()[0]
            path = ".".join(str(part) for part in first.get("loc", ())) or "answer"
            raise AnswerInvalid(
                f"The answer does not fit checkpoint {wait.node_id}: {path}: {first.get('msg', 'invalid')}; "
                f"e.g. {shlex.quote(wait.example())}."
            ) from None
    try:
        json.dumps(answer, allow_nan=False)
    except ValueError:
        raise AnswerInvalid("The answer must be JSON without NaN or Infinity.") from None
    return _run_answer(wait, wait.node_id, answer, answered_by)


def _run_answer(wait: Wait, node_id: str, answer: Any, answered_by: str | None) -> AnswerClaim:
    """The claim of a checkpoint's answer or a budget top-up: one per run (``run.answer``, keyed by the run)."""
    spec = ContinuationSpec(new_run_id(wait.workflow_name), wait.run_id, node_id, answer)
    return AnswerClaim(
        spec=spec,
        fingerprint=_fingerprint(answer),
        scope="run.answer",
        key=wait.run_id,
        answered_by=answered_by or who_answers(),
        workflow_name=wait.workflow_name,
    )


def parse_texts(values: list[str], wait: Wait, choice: str) -> dict[str, str]:
    """``--text T`` fills the choice's one text input; with several, each is ``--text NAME=VALUE``."""
    if not values:
        return {}
    choices = wait.output.get("choices", []) if isinstance(wait.output, dict) else []
    picked = next((item for item in choices if isinstance(item, dict) and item.get("id") == choice), None)
    names = [str(item.get("name")) for item in (picked or {}).get("inputs", [])]
    if picked is not None and len(names) == 1:
        if len(values) > 1:
            raise AnswerInvalid(f"Choice {choice!r} takes one text ({names[0]}); pass --text once.")
        return {names[0]: values[0]}
    if picked is not None and not names:
        raise AnswerInvalid(f"Choice {choice!r} takes no text; drop --text.")
    texts: dict[str, str] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep:
            raise AnswerInvalid(
                f"Choice {choice!r} has several text fields ({', '.join(names)}); use --text NAME=VALUE."
            )
        texts[name] = text
    return texts


def now_text() -> str:
    return format_time(datetime.now(UTC))


def existing_run(home: Path, run_id: str) -> bool:
    try:
        open_bundle(home, run_id)
    except RunNotFound:
        return False
    return True


# ---- recording the winner -----------------------------------------------------------------------------------


FOREGROUND_HOLD_MS = 60_000
"""How long hosts leave a continuation queued for the foreground process that answered to claim it."""


def continuation_row(
    home: Path,
    queue: RunQueue,
    parent: RunState,
    spec: ContinuationSpec,
    *,
    foreground: bool = False,
    launch: LaunchOptions | None = None,
) -> NewRun:
    """The continuation's queue row: the parent's workflow, and the answer it continues with as its input.

    Its options are the parent's, with ``launch`` (the provider, model and script the answering command resolved)
    in place of the parent's launch options, so a host or a later ``piw resume`` of the continuation uses them.

    A foreground answer claims it by name right away. Until then the row is held for that process (its runner id
    in ``affinity_runner_id``, hosts kept off until ``available_at``), so an identical repeat from another process
    reports it instead of racing the winner for it (:func:`held_for_another_answerer`); once the hold passes, or
    as soon as that process is gone, a host or a repeat may take it.
    """
    from piw.run.runner import workflow_path_of

    source = parent.workflow_source or {}
    row = queue.get(parent.run_id)
    return NewRun(
        run_id=spec.run_id,
        workflow_ref=str(workflow_path_of(source, parent.workflow_name, home)),
        workflow_source=source,
        definition_digest=parent.definition_digest,
        input={"continuation": spec.to_json()},
        options=_continued_options(dict(row.options) if row is not None else {}, launch),
        parent_run_id=parent.run_id,
        available_at=queue.clock() + FOREGROUND_HOLD_MS if foreground else None,
        affinity_runner_id=runner_id() if foreground else None,
    )


def _continued_options(options: dict[str, Any], launch: LaunchOptions | None) -> dict[str, Any]:
    if launch is None:
        return options
    kept = {key: value for key, value in options.items() if key not in ("provider", "model", "script")}
    return {**kept, **launch.recorded().to_json()}


def held_for_another_answerer(queue: RunQueue, run_id: str) -> bool:
    """Whether the continuation ``run_id`` waits for another live process, the one whose answer won, to claim it:
    an identical repeat then reports it and runs nothing (the winner is about to run it)."""
    row = queue.get(run_id)
    return row is not None and row.held_for_another(queue.clock(), runner_id())


def record_answer(
    home: Path,
    database: RunDatabase,
    claim: AnswerClaim,
    parent: RunState,
    *,
    foreground: bool = False,
    launch: LaunchOptions | None = None,
) -> tuple[AnswerReceipt, None]:
    """Record the first valid answer (one transaction); an identical repeat adopts the stored receipt.

    ``launch`` is recorded on the continuation's row (default: the parent's launch options).

    Raises ``DecisionResolved`` (a decision already won by another answer, or cancelled) or
    ``ContinuationExists`` (a checkpoint answered differently); nothing is recorded then.
    """
    spec = claim.spec
    receipt = {"continuation": spec.to_json(), "provenance": claim.provenance}
    decision = None
    if claim.decision_id is not None and claim.opened is not None:
        attempt = parent.results.get(spec.node_id)
        decision = new_decision(
            parent.run_id, spec.node_id, attempt.attempt_id if attempt else "", claim.opened
        )
    record = AnswerRecord(
        scope=claim.scope,
        key=claim.key,
        fingerprint=claim.fingerprint,
        receipt=receipt,
        continuation=continuation_row(
            home, database.queue, parent, spec, foreground=foreground, launch=launch
        ),
        decision=decision,
        response=spec.answer if claim.scope == "decision.answer" else None,
        provenance=claim.provenance,
        answered_by=claim.answered_by,
    )
    result = database.decisions.resolve_answer(record)
    if result.outcome == "won":
        return AnswerReceipt(spec, adopted=False, provenance=claim.provenance), None
    stored = (result.receipt or {}).get("continuation") or {}
    if result.outcome == "adopted":
        return AnswerReceipt(
            ContinuationSpec.from_json(stored), adopted=True, provenance=str(result.provenance or "human")
        ), None
    run_id, node_id = parent.run_id, spec.node_id
    if result.outcome == "cancelled":
        raise DecisionResolved(
            f"Run {run_id} was cancelled while waiting at {node_id}; it will not continue."
        )
    other = stored.get("runId", "?")
    if claim.scope == "decision.answer":
        raw = stored.get("answer")
        answer: dict[str, Any] = raw if isinstance(raw, dict) else {}
        how = f"{answer.get('choice', '?')}, {result.provenance or answer.get('provenance', '?')}"
        raise DecisionResolved(
            f"Decision {node_id} of run {run_id} was already resolved ({how}); its continuation is run {other}."
        )
    raise ContinuationExists(
        f"Run {run_id} was already answered differently; its continuation is run {other}.", str(other)
    )


# ---- a continuation that did not start ----------------------------------------------------------------------


def has_started(home: Path, run_id: str) -> bool:
    """Whether the run's bundle holds its ``run_started`` line (a continuation is created by its first line)."""
    try:
        bundle = open_bundle(home, run_id)
    except RunNotFound:
        return False
    try:
        first = next(iter_trace(bundle.trace_path), None)
    except (PiwError, OSError):
        return True  # damaged: the resume path reports it
    return first is not None and first.type == "run_started"


def leave_unstarted(home: Path, spec: ContinuationSpec, reason: str, *, interrupted: bool) -> bool:
    """The answer was recorded but its continuation did not start here: create it anyway, with no step run, so
    it is a run like any other (``piw runs``, ``piw inspect``, ``piw resume``), queued for a host — or, when the
    start was interrupted, parked as an interrupted foreground run is. ``False`` when not even that could be
    done; its queue row is then left for a repeat of the answer (never final, or no answer could continue it).
    """
    from piw.run.runner import ForegroundOptions, continue_run

    queue = open_run_database(home).queue
    try:
        continue_run(spec, home, ForegroundOptions(), begin=False)
    except Exception:
        row = queue.get(spec.run_id)
        if row is not None and row.is_final:
            queue.reopen(spec.run_id)  # released "failed" when run_started could not be written
        return False
    if interrupted:
        with contextlib.suppress(PiwError):  # taken by a host meanwhile: it is running
            claim = queue.claim_run(spec.run_id, runner_id())
            queue.park(claim, "interrupted", error=reason)
    return True
