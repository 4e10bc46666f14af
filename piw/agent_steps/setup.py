"""Wiring agent steps for a run: provider selection, the offline script convention and the display.

Selection happens when the workflow is loaded, before any bundle exists, so a missing key or an unknown
provider is one clear error and no run is left behind.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from piw.agent_steps.attempt import AgentSettings
from piw.agent_steps.display import AgentDisplay, StreamSink
from piw.agent_steps.executor import AgentExecutor
from piw.agent_steps.loop import LoopListener
from piw.config.mcp_servers import check_servers
from piw.config.settings import PiwConfig, load_config, resolve_api_key, resolve_headers
from piw.errors import ProviderError
from piw.providers import guard_base_url
from piw.providers.base import Provider
from piw.providers.cassette import cassette_mode
from piw.providers.factory import build_provider
from piw.providers.recorded import RECORDED_PROVIDER, RecordedRunProvider
from piw.providers.scripted import check_script_keys, load_script
from piw.providers.selection import ProviderSelection, select_provider
from piw.redaction import redacting_listeners, redactor_for
from piw.run.executors import Executor
from piw.run.launch import LaunchOptions
from piw.store.bundle import open_bundle
from piw.workflow.definition import ActionNode, AgentNode
from piw.workflow.loader import LoadedWorkflow


def replies_beside(workflow: LoadedWorkflow) -> Path | None:
    """``NAME.replies.json`` next to the workflow file (the offline demo convention)."""
    name = workflow.path.name.removesuffix(".workflow.py")
    candidate = workflow.path.with_name(f"{name}.replies.json")
    return candidate if candidate.is_file() else None


def _needs_replies(provider: str, workflow: LoadedWorkflow) -> str:
    name = workflow.path.name.removesuffix(".workflow.py")
    beside = workflow.path.with_name(f"{name}.replies.json")
    return (
        f"The scripted provider {provider!r} needs replies for the agent steps of {name}: put them in {beside} "
        "(NAME.replies.json beside NAME.workflow.py is found on its own), or pass --script FILE."
    )


def check_replies(workflow: LoadedWorkflow, path: Path) -> None:
    """A per-node replies file may only name this workflow's agent steps (or children of its actions)."""
    nodes = workflow.graph.nodes
    agents = [node_id for node_id, gnode in nodes.items() if isinstance(gnode.node, AgentNode)]
    actions = [node_id for node_id, gnode in nodes.items() if isinstance(gnode.node, ActionNode)]
    check_script_keys(load_script(path), agents, actions, source=str(path))


def check_requestable(selection: ProviderSelection) -> None:
    """Fail at selection time, not on the first request, when no request could ever be made.

    An unset ``$NAME`` key or header raises ``NeedsKey`` and a refused base URL a ``ProviderError`` here, so
    the error comes before any bundle exists instead of leaving a run stuck in its first agent step. Adapters
    still resolve and guard on every request; this only moves the first failure earlier.
    """
    settings = selection.settings
    if settings.api == "scripted" or cassette_mode() == "replay":
        return
    resolve_api_key(settings)
    resolve_headers(settings)
    if settings.base_url:
        guard_base_url(settings.base_url)


class AgentWiring:
    """The agent side of a foreground run: its display, and the executor each workflow that needs one gets.

    Made once per run command by :func:`piw.agent_steps.factory.agent_executor_factory`, the first time a
    workflow may ask a model. ``replay_from`` (``piw fork --provider replay``) answers agent steps from that
    run's recorded replies.
    """

    def __init__(
        self,
        home: Path,
        console: Console,
        launch: LaunchOptions,
        *,
        verbose: bool = False,
        sink: StreamSink | None = None,
        replay_from: str | None = None,
    ) -> None:
        self.home = home
        self.launch = launch
        self.replay_from = replay_from
        display = AgentDisplay(console, verbose=verbose, sink=sink)
        # live deltas and tool output are redacted before they are shown (docs/guarantees.md, "Redaction")
        self.listeners = redacting_listeners([display], redactor_for(home))

    def executor_for(self, workflow: LoadedWorkflow) -> Executor | None:
        """The agent executor of ``workflow`` (one with an agent or action node), or ``None`` when a workflow of
        actions only has no usable provider (its actions then cannot call ``ctx.run_agent``)."""
        home, listeners, launch = self.home, self.listeners, self.launch
        needs_agent = any(isinstance(gnode.node, AgentNode) for gnode in workflow.graph.nodes.values())
        if launch.provider == RECORDED_PROVIDER:
            return AgentExecutor(
                agent_settings(load_config(home), _recorded(home, self.replay_from), listeners)
            )
        try:
            config = load_config(home)
            check_servers(servers_named(workflow), config.mcp, config.agent.backend)
            selection = select_provider(config, launch.provider, launch.model)
            check_requestable(selection)
        except ProviderError:
            if needs_agent:
                raise
            return None
        script_path = Path(launch.script) if launch.script else None
        scripted = selection.settings.api == "scripted"
        if script_path is None and scripted and selection.settings.script is None:
            script_path = replies_beside(workflow)
            if script_path is None and needs_agent:
                raise ProviderError(_needs_replies(selection.provider, workflow))
        if script_path is not None and not script_path.is_file():
            raise ProviderError(f"Script file {script_path} does not exist.")
        instance = build_provider(selection, config, home, script=script_path)
        configured = home / selection.settings.script if selection.settings.script else None
        replies = script_path or configured
        if scripted and replies is not None:
            check_replies(workflow, replies)
        settings = agent_settings(config, instance, listeners, selection)
        if config.agent.backend == "pi-rpc":
            from piw.agent_steps.pi_rpc import build_pi_rpc_executor

            return build_pi_rpc_executor(selection, config, workflow, settings)
        return AgentExecutor(settings)


def servers_named(workflow: LoadedWorkflow) -> dict[str, list[str]]:
    """Node id → the MCP servers its ``tools=(mcp(...), ...)`` name (agent steps only)."""
    return {
        node_id: [ref.server for ref in gnode.node.mcp]
        for node_id, gnode in workflow.graph.nodes.items()
        if isinstance(gnode.node, AgentNode) and gnode.node.mcp
    }


def agent_settings(
    config: PiwConfig,
    instance: Provider,
    listeners: list[LoopListener],
    selection: ProviderSelection | None = None,
) -> AgentSettings:
    model_settings = selection.model_settings if selection else None
    return AgentSettings(
        provider_factory=lambda: instance,
        max_turns=config.agent.max_turns,
        max_rejections=config.agent.max_rejections,
        system_prompt=config.agent.system_prompt,
        model_max_tokens=model_settings.max_tokens if model_settings else None,
        tool_env=tuple(config.agent.tool_env),
        listeners=list(listeners),
        mcp_servers=dict(config.mcp),
    )


def _recorded(home: Path, replay_from: str | None) -> Provider:
    """The ``replay`` provider of a fork: answers from the parent run's recorded replies."""
    if replay_from is None:
        raise ProviderError(
            "The replay provider answers from a recorded run; use it as 'piw fork RUN --at SEQ --provider replay'."
        )
    return RecordedRunProvider(open_bundle(home, replay_from))
