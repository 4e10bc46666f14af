"""The agent executor factory a run is given, which imports the agent stack only for a workflow that needs it.

Providers, the agent loop and its display are a tenth of a second of imports (``python -X importtime``). A
workflow of compute, shell, notify and gate steps never asks for a model, so ``piw run`` of it no longer pays
for them; a workflow with an agent or action node gets exactly the factory of :mod:`piw.agent_steps.setup`, built
once, with its checks at the same moment (before any bundle exists).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from piw.workflow.definition import ActionNode, AgentNode

if TYPE_CHECKING:
    from rich.console import Console

    from piw.agent_steps.display import StreamSink
    from piw.run.executors import Executor
    from piw.workflow.loader import LoadedWorkflow


def needs_agent_executor(workflow: LoadedWorkflow) -> bool:
    """Whether any node may ask a model: an agent step, or an action (``ctx.run_agent``)."""
    return any(isinstance(gnode.node, AgentNode | ActionNode) for gnode in workflow.graph.nodes.values())


def agent_executor_factory(
    home: Path,
    console: Console,
    *,
    verbose: bool = False,
    provider: str | None = None,
    model: str | None = None,
    script: str | None = None,
    sink: StreamSink | None = None,
    replay_from: str | None = None,
) -> Callable[[LoadedWorkflow], Executor | None]:
    """:func:`piw.agent_steps.setup.agent_executor_factory`, imported and built the first time a workflow needs it."""
    built: list[Callable[[LoadedWorkflow], Executor | None]] = []

    def build(workflow: LoadedWorkflow) -> Executor | None:
        if not needs_agent_executor(workflow):
            return None
        if not built:
            from piw.agent_steps import setup

            wire = setup.agent_executor_factory
            built.append(wire(home, console, verbose=verbose, provider=provider, model=model, script=script,
                              sink=sink, replay_from=replay_from))  # fmt: skip
        return built[0](workflow)

    return build
