"""Running a case's workflow once, in this process, with a given provider: what the run did.

``piw test`` runs each case through the same library call as ``piw run`` (:func:`piw.run.runner.start_run`),
offline in a throwaway ``PIW_HOME`` with the recorded replies, or live (``--live``) with a configured provider in
the real one. What the run did is read back through the fold (``RunState``) and the bundle (``docs/testing.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piw.cases.files import CASE_FILE, Case, shown
from piw.cases.places import Places
from piw.errors import BrokenCase, LoadError
from piw.store.bundle import Bundle, open_bundle

if TYPE_CHECKING:
    from piw.providers.base import Provider
    from piw.store.fold import RunState
    from piw.workflow.budget import Budget
    from piw.workflow.loader import LoadedWorkflow


@dataclass(frozen=True)
class NodeResult:
    outcome: str
    output: Any
    error: str | None = None


@dataclass
class Observed:
    """What one run of a case did, paths and ids put back as placeholders (comparable with ``expected.json``)."""

    run_id: str
    status: str
    route: list[str]
    nodes: dict[str, NodeResult]
    final_output: Any
    error: str | None
    usage: dict[str, Any] | None
    snapshot: dict[str, Any]
    bundle: Bundle
    workflow: LoadedWorkflow | None = None
    state: RunState | None = field(default=None, repr=False)


def workflow_file(case: Case) -> Path:
    """The case's workflow file; a missing one breaks the case (naming ``case.json`` and the field)."""
    ref = case.case.workflow
    if ref.builtin is not None:
        from piw.workflow.loader import SUFFIX, builtins_dir

        path = builtins_dir() / f"{ref.builtin}{SUFFIX}"
        if not path.is_file():
            raise BrokenCase(
                shown(case.folder / CASE_FILE), "workflow.builtin", f"no built-in {ref.builtin!r}"
            )
        return path
    path = case.project / str(ref.path)
    if not path.is_file():
        raise BrokenCase(
            shown(case.folder / CASE_FILE),
            "workflow.path",
            f"no workflow file {ref.path} in the project {case.project}",
        )
    return path


def run_once(
    case: Case,
    home: Path,
    provider: Provider,
    *,
    durability: str | None = None,
    budget: Budget | None = None,
    settings: Callable[[Provider], Any] | None = None,
) -> Observed:
    """Run the case's workflow with ``provider`` answering its agent steps; what it did."""
    from piw.agent_steps.executor import AgentExecutor
    from piw.agent_steps.factory import needs_agent_executor
    from piw.run.runner import ForegroundOptions, start_run

    path = workflow_file(case)
    places = Places(case.project, home)
    loaded: list[LoadedWorkflow] = []

    def factory(workflow: LoadedWorkflow) -> AgentExecutor | None:
        loaded.append(workflow)
        if not needs_agent_executor(workflow):
            return None
        return AgentExecutor(settings(provider) if settings else _offline_settings(provider))

    options = ForegroundOptions(agent_executor_factory=factory, durability=durability, budget=budget)
    try:
        state = start_run(str(path), home, places.specialize_value(case.case.input), None, options)
    except LoadError as exc:
        raise BrokenCase(shown(case.folder / CASE_FILE), "workflow", exc.message) from None
    from piw.store.db.idempotency import Adopted

    assert not isinstance(state, Adopted)  # (no idempotency key)
    return observe(open_bundle(home, state.run_id), state, Places(case.project, home, state.run_id), loaded)


def _offline_settings(provider: Provider) -> Any:
    from piw.agent_steps.attempt import AgentSettings

    return AgentSettings(provider_factory=lambda: provider)


def observe(bundle: Bundle, state: RunState, places: Places, loaded: list[LoadedWorkflow]) -> Observed:
    nodes = {
        node_id: NodeResult(
            record.outcome,
            places.generalize_value(bundle.resolve(record.output)),
            bundle.resolve(record.error),
        )
        for node_id, record in state.results.items()
    }
    return Observed(
        run_id=state.run_id,
        status=state.status,
        route=[step.node_id for step in state.steps],
        nodes=nodes,
        final_output=places.generalize_value(bundle.resolve(state.final_output)),
        error=bundle.resolve(state.error),
        usage=state.usage,
        snapshot=bundle.read_snapshot(),
        bundle=bundle,
        workflow=loaded[0] if loaded else None,
        state=state,
    )
