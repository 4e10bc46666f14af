"""Answering a waiting run from any client: the checks before recording, the recording, and the detached form.

``piw answer``/``piw decide`` (``piw.cli.answers``) and ``piw serve``'s answer routes (``piw.serve``) both come
here, so an answer over HTTP is checked, swept, recorded and refused exactly as one typed in a terminal
(``docs/serve.md``, ``docs/checkpoints.md``): the workflow as it is now must still be the run's, the continuation's
provider must be usable, a passed deadline wins first, and the first valid answer wins in one transaction.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piw.run.launch import LaunchOptions

if TYPE_CHECKING:
    from piw.run.answers import AnswerClaim, AnswerReceipt, Wait
    from piw.store.fold import RunState
    from piw.workflow.loader import LoadedWorkflow


def loaded_workflow(home: Path, state: RunState) -> LoadedWorkflow:
    """The run's workflow as it is now; an answer to a changed workflow is refused before it is recorded."""
    from piw.run.resume import check_source
    from piw.run.runner import load_run_workflow

    workflow = load_run_workflow(state, home)
    check_source(workflow, state)
    return workflow


def preflight(
    home: Path, state: RunState, workflow: LoadedWorkflow, claim: AnswerClaim, launch: LaunchOptions
) -> None:
    """Everything the continuation needs that can be checked now, before the answer is recorded: the provider of
    an agent step ahead, and the durability setting (a refusal here records nothing)."""
    from rich.console import Console

    from piw.agent_steps.factory import agent_executor_factory
    from piw.run.continuation import check_continuation
    from piw.run.runner import configured_durability
    from piw.store.bundle import open_bundle
    from piw.store.db.run_database import open_run_database
    from piw.store.trace import resolve_durability

    if open_run_database(home).decisions.continuation_of(state.run_id) is not None:
        return  # answered already: this repeat is adopted or refused, and what it continues was checked then
    factory = agent_executor_factory(home, Console(file=io.StringIO()), launch)
    check_continuation(workflow, open_bundle(home, state.run_id), state, claim.spec, factory)
    resolve_durability(configured_durability(home))


def record(
    home: Path, claim: AnswerClaim, state: RunState, *, detach: bool, launch: LaunchOptions
) -> AnswerReceipt:
    """Sweep this run's due decision first (a passed deadline wins, as declared), then record the answer."""
    from piw.run.answers import record_answer
    from piw.run.sweeper import sweep_timeouts
    from piw.store.db.run_database import open_run_database

    database = open_run_database(home)
    sweep_timeouts(home, database, run_id=state.run_id)
    receipt, _ = record_answer(home, database, claim, state, foreground=not detach, launch=launch)
    return receipt


def answer_model(workflow: LoadedWorkflow, wait: Wait) -> Any:
    """The checkpoint's declared answer model (``None`` for a gate, a budget wait, or no model)."""
    from piw.workflow.definition import CheckpointNode

    gnode = workflow.graph.nodes.get(wait.node_id)
    node = gnode.node if gnode is not None else None
    return node.answer if isinstance(node, CheckpointNode) else None


def answer_detached(home: Path, run_id: str, value: Any, *, answered_by: str) -> AnswerReceipt:
    """``piw answer RUN JSON --detach`` without a terminal: check, record, leave the continuation for a host."""
    from piw.run.answers import claim_answer, now_text, read_wait

    wait, state = read_wait(home, run_id)
    workflow = loaded_workflow(home, state)
    claim = claim_answer(
        wait, value, answer_model(workflow, wait), answered_by=answered_by, now_iso=now_text()
    )
    return _submit(home, state, workflow, claim)


def decide_detached(
    home: Path,
    run_id: str,
    choice: str,
    text: str | Mapping[str, str] | None,
    *,
    seen_sha256: str | None,
    answered_by: str,
) -> AnswerReceipt:
    """``piw decide RUN CHOICE [--text T] --request-sha256 D --detach`` without a terminal.

    ``text`` is the one text a choice takes, or its text fields by name."""
    from piw.run.answers import claim_decision, now_text, parse_texts, read_wait

    wait, state = read_wait(home, run_id)
    if isinstance(text, str):
        texts = parse_texts([text], wait, choice) if wait.kind == "human_decision" else {}
    else:
        texts = dict(text or {})
    claim = claim_decision(
        wait, choice, texts, answered_by=answered_by, seen_sha256=seen_sha256, now_iso=now_text()
    )
    return _submit(home, state, loaded_workflow(home, state), claim)


def _submit(home: Path, state: RunState, workflow: LoadedWorkflow, claim: AnswerClaim) -> AnswerReceipt:
    from piw.run.runner import recorded_launch

    launch = recorded_launch(
        home, state.run_id
    )  # what the waiting run was started with, as 'piw resume' uses
    preflight(home, state, workflow, claim, launch)
    return record(home, claim, state, detach=True, launch=launch)
