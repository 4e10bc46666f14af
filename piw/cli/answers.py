"""``piw answer`` and ``piw decide``: answer a waiting run, then follow its continuation in the foreground.

Bad input (an answer that does not fit, a second different answer, blank required text) is one ``Error:`` line
and exit 2 with nothing recorded; so is a continuation that could not run: an agent step ahead with no provider
to use (the provider, model and script default to the ones the waiting run was started with, as for
``piw resume``). A valid answer is recorded first — the first valid answer wins, in one database transaction with
the continuation's queue row — then its continuation runs here like ``piw resume`` (the live view, the same exit
codes), or, with ``--detach``, waits queued for a host; one that fails to start after that is created queued for
a host, and the command says so (``docs/cli.md``). An identical repeat adopts the recorded answer and continues
(or reports) the same continuation. Before recording, the run's decision is swept: a deadline that has passed
wins, as the workflow declared.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.follow_flags import FollowFlags, follow_flags
from piw.cli.foreground import (
    Following,
)
from piw.errors import ContinuationNotStarted, PiwError, RunLocked, UsageError
from piw.store.runref import resolve_run_id
from piw.terminal import json_text, single_line

if TYPE_CHECKING:
    from piw.run.answers import AnswerClaim, AnswerReceipt, Wait
    from piw.run.continuation import ContinuationSpec
    from piw.store.fold import RunState
    from piw.workflow.loader import LoadedWorkflow

# The engine and the loader are imported inside the commands, so ``piw --help`` never loads them.

DetachOption = Annotated[
    bool,
    typer.Option("--detach", help="Queue the continuation for a detached host instead of running it here."),
]


def _loaded(home: Path, state: RunState) -> LoadedWorkflow:
    from piw.service.answering import loaded_workflow

    return loaded_workflow(home, state)


def _announce(receipt: AnswerReceipt, as_json: bool) -> None:
    if as_json:
        return
    spec = receipt.spec
    answer = spec.answer
    what = (
        f"{answer['choice']} ({receipt.provenance})"
        if isinstance(answer, dict) and isinstance(spec.human_decision, dict)
        else "the answer"
    )
    verb = "Already answered with" if receipt.adopted else "Recorded"
    make_console().print(
        f"{verb} {single_line(what)} for run {spec.parent_run_id} at {single_line(spec.node_id)}; "
        f"continuing as run {spec.run_id}."
    )


@dataclass(frozen=True)
class Answering:
    """One ``piw answer``/``piw decide``: the waiting run, the answer's claim and how its continuation runs."""

    home: Path
    state: RunState
    workflow: LoadedWorkflow
    claim: AnswerClaim
    repeat: str
    """The command that repeats this answer (it runs a continuation that did not start)."""


def _continue(answering: Answering, following: Following, detach: bool) -> int:
    """Check, record the answer, then follow its continuation here (``--detach``: leave it queued for a host)."""
    from piw.run.runner import continue_run
    from piw.service.answering import preflight, record

    home, claim = answering.home, answering.claim
    preflight(home, answering.state, answering.workflow, claim, following.launch)
    receipt = record(home, claim, answering.state, detach=detach, launch=following.launch)
    as_json = following.as_json
    spec = receipt.spec
    if detach:
        return _queued(receipt, as_json)
    if receipt.adopted and _live_elsewhere(home, spec.run_id):
        return _elsewhere(receipt, as_json)
    _announce(receipt, as_json)
    extra = {
        "continuedFrom": {
            "runId": spec.parent_run_id,
            "nodeId": spec.node_id,
            **({"humanDecision": spec.human_decision} if spec.human_decision else {}),
        },
        "adopted": receipt.adopted,
    }
    try:
        return following.follow(lambda options: continue_run(spec, home, options), extra)
    except RunLocked:
        if receipt.adopted:  # the winner's process took the continuation an instant before us
            return _elsewhere(receipt, as_json)
        raise
    except (PiwError, OSError, KeyboardInterrupt) as exc:
        _unstarted(answering, spec, exc)
        raise


def _unstarted(answering: Answering, spec: ContinuationSpec, exc: BaseException) -> None:
    """The answer is recorded but its continuation did not start: it is created queued for a host (parked when
    interrupted), and ``ContinuationNotStarted`` says so (exit 1, 130 when interrupted; never 2, which means
    nothing was recorded). A continuation that started is left as its run left it."""
    from piw.run.answers import has_started, leave_unstarted

    home, run_id = answering.home, spec.run_id
    if has_started(home, run_id):
        return
    interrupted = isinstance(exc, KeyboardInterrupt)
    reason = "Interrupted." if interrupted else single_line(str(exc)) or type(exc).__name__
    code = 130 if interrupted else int(getattr(exc, "exit_code", 1))
    code = 1 if code == 2 else code
    if not leave_unstarted(home, spec, reason, interrupted=interrupted):
        then = f"repeat {answering.repeat} to start it"
    elif interrupted:
        then = f"it is parked; continue it with 'piw resume {run_id}'"
    else:
        then = f"it is queued: 'piw host' runs it, or 'piw resume {run_id}' runs it here"
    raise ContinuationNotStarted(
        f"{reason} The answer is recorded, but its continuation run {run_id} did not start; {then}.", code
    ) from None


def _live_elsewhere(home: Path, run_id: str) -> bool:
    """Another process runs the continuation, or is about to: the one whose answer won holds it until it claims it."""
    from piw.run.answers import held_for_another_answerer
    from piw.store.bundle import open_bundle, run_is_live
    from piw.store.db.run_database import open_run_database

    try:
        if run_is_live(open_bundle(home, run_id)):
            return True
    except PiwError:
        pass  # not created yet
    return held_for_another_answerer(open_run_database(home).queue, run_id)


def _elsewhere(receipt: AnswerReceipt, as_json: bool) -> int:
    """An identical repeat while the continuation runs in another process: report it, run nothing here."""
    spec = receipt.spec
    if as_json:
        payload = {
            "runId": spec.run_id,
            "status": "running",
            "finalOutput": None,
            "error": None,
            "continuedFrom": {"runId": spec.parent_run_id, "nodeId": spec.node_id},
            "adopted": True,
        }
        sys.stdout.write(json_text(payload) + "\n")
        return 0
    make_console().print(
        f"Already answered; its continuation run {spec.run_id} is running in another piw process "
        f"(follow it with 'piw watch {spec.run_id}')."
    )
    return 0


def _queued(receipt: AnswerReceipt, as_json: bool) -> int:
    """``--detach``: the continuation's row is queued for ``piw host``; nothing runs here."""
    spec = receipt.spec
    if as_json:
        payload = {
            "runId": spec.run_id,
            "status": "queued",
            "continuedFrom": {"runId": spec.parent_run_id, "nodeId": spec.node_id},
            "adopted": receipt.adopted,
        }
        sys.stdout.write(json_text(payload) + "\n")
        return 0
    verb = "Already answered" if receipt.adopted else "Recorded the answer"
    make_console().print(
        f"{verb} for run {spec.parent_run_id} at {single_line(spec.node_id)}; continuation run {spec.run_id} is "
        f"queued for a host ('piw host' runs it; 'piw watch {spec.run_id}' follows it)."
    )
    return 0


def _answer_model(workflow: LoadedWorkflow, wait: Wait) -> Any:
    from piw.service.answering import answer_model

    return answer_model(workflow, wait)


@app.command()
@follow_flags
def answer(
    run_id: Annotated[str, typer.Argument(help="The waiting run (id, unique prefix, latest, -1).")],
    answer_json: Annotated[
        str,
        typer.Argument(
            metavar="JSON",
            help='The answer as JSON (or @file); a decision takes {"choice": ..., <text inputs>}.',
        ),
    ],
    detach: DetachOption = False,
    *,
    flags: FollowFlags,
) -> int:
    """Answer a waiting checkpoint; its one continuation run follows the checkpoint's edge here."""
    from piw.run.answers import claim_answer, now_text, parse_answer_json, read_wait

    home = flags.home()
    run_id = resolve_run_id(home, run_id)
    text = answer_json
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"Cannot read the answer file {text[1:]} ({exc.strerror}).") from None
    wait, state = read_wait(home, run_id)
    value = parse_answer_json(text, wait)
    workflow = _loaded(home, state)
    claim = claim_answer(wait, value, _answer_model(workflow, wait), now_iso=now_text())
    launch = flags.launch_of(home, run_id)
    repeat = f"piw answer {run_id} {shlex.quote(answer_json)}"
    return _continue(
        Answering(home, state, workflow, claim, repeat),
        Following(flags.as_json, launch, flags.verbose),
        detach,
    )


@app.command()
@follow_flags
def decide(
    run_id: Annotated[str, typer.Argument(help="The run waiting for a decision (id, prefix, latest, -1).")],
    choice: Annotated[str, typer.Argument(help="One of the decision's choices.")],
    text: Annotated[
        list[str] | None,
        typer.Option("--text", help="The text a choice needs; NAME=VALUE when it has several fields."),
    ] = None,
    request_sha256: Annotated[
        str | None,
        typer.Option("--request-sha256", help="Refuse unless the request is the one with this digest."),
    ] = None,
    detach: DetachOption = False,
    *,
    flags: FollowFlags,
) -> int:
    """Decide a human_decision gate as a person; the continuation run follows the chosen edge here."""
    from piw.run.answers import claim_decision, now_text, parse_texts, read_wait

    home = flags.home()
    run_id = resolve_run_id(home, run_id)
    wait, state = read_wait(home, run_id)
    texts = parse_texts(list(text or []), wait, choice) if wait.kind == "human_decision" else {}
    claim = claim_decision(wait, choice, texts, seen_sha256=request_sha256, now_iso=now_text())
    workflow = _loaded(home, state)
    launch = flags.launch_of(home, run_id)
    repeat = shlex.join(
        ["piw", "decide", run_id, choice, *(part for value in text or [] for part in ("--text", value))]
    )
    return _continue(
        Answering(home, state, workflow, claim, repeat),
        Following(flags.as_json, launch, flags.verbose),
        detach,
    )
