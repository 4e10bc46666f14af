"""The agent executor factory a run is given, which imports the agent stack only for a workflow that needs it.

Providers, the agent loop and its display are a tenth of a second of imports (``python -X importtime``). A
workflow of compute, shell, notify and gate steps never asks for a model, so ``piw run`` of it no longer pays
for them; a workflow with an agent or action node gets the executor :mod:`piw.agent_steps.setup` wires, its
wiring made once (``piw.lazy``), with its checks at the same moment (before any bundle exists).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from piw.lazy import Lazy
from piw.run.launch import LaunchOptions
from piw.workflow.definition import ActionNode, AgentNode

if TYPE_CHECKING:
    from rich.console import Console

    from piw.agent_steps.display import StreamSink
    from piw.agent_steps.setup import AgentWiring
    from piw.run.executors import Executor
    from piw.workflow.loader import LoadedWorkflow


NO_LAUNCH_OPTIONS = LaunchOptions()
"""No ``--provider``, ``--model`` or ``--script``: the configured default provider."""


def needs_agent_executor(workflow: LoadedWorkflow) -> bool:
    """Whether any node may ask a model: an agent step, or an action (``ctx.run_agent``)."""
    return any(isinstance(gnode.node, AgentNode | ActionNode) for gnode in workflow.graph.nodes.values())


def agent_executor_factory(
    home: Path,
    console: Console,
    launch: LaunchOptions = NO_LAUNCH_OPTIONS,
    *,
    verbose: bool = False,
    sink: StreamSink | None = None,
    replay_from: str | None = None,
) -> Callable[[LoadedWorkflow], Executor | None]:
    """The factory a run calls with its loaded workflow: ``None`` for one that never asks a model, otherwise the
    executor :class:`piw.agent_steps.setup.AgentWiring` builds from ``launch`` (the provider, model and script of
    the command; imported and made for the first such workflow).

    ``replay_from`` (``piw fork --provider replay``) answers agent steps from that run's recorded replies.
    """

    def wire() -> AgentWiring:
        from piw.agent_steps.setup import AgentWiring

        return AgentWiring(home, console, launch, verbose=verbose, sink=sink, replay_from=replay_from)

    wiring = Lazy(wire)

    def build(workflow: LoadedWorkflow) -> Executor | None:
        if not needs_agent_executor(workflow):
            return None
        return wiring.get().executor_for(workflow)

    return build
