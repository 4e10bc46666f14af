"""The agent executor: runs one attempt of an ``agent`` node in submit or assistant mode.

The executor owns what lives as long as the run: the provider (built on first use, closed when the run ends)
and the settings. Each attempt runs as an :class:`~piw.agent_steps.attempt.AttemptRun`; a reattached one is
recovered from its durable evidence first (:mod:`piw.agent_steps.recovery`), and ``ctx.run_agent`` children run
through :mod:`piw.agent_steps.children`.
"""

from __future__ import annotations

from piw.agent_steps.attempt import AgentSettings, AttemptRun, open_step
from piw.agent_steps.children import ChildRunner
from piw.agent_steps.recovery import matching_prompts, recover
from piw.providers.base import Provider
from piw.run.executors import Attempt, NodeOutcome
from piw.store.session import SessionLog, current_branch
from piw.workflow.definition import AgentNode


class AgentExecutor:
    """Executes ``agent`` nodes for the engine."""

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self._provider: Provider | None = None

    @property
    def provider(self) -> Provider:
        if self._provider is None:
            self._provider = self.settings.provider_factory()
        return self._provider

    def _run_provider(self) -> Provider:
        return self.provider

    def close(self) -> None:
        """Release the provider when the run ends (the ``llamacpp`` provider stops its server)."""
        provider, self._provider = self._provider, None
        close = getattr(provider, "close", None)
        if callable(close):
            close()

    def child_runner(self, attempt: Attempt) -> ChildRunner:
        """The ``ctx.run_agent`` of an action attempt (``docs/design/agent-steps.md`` §10)."""
        return ChildRunner(self.settings, self._run_provider, attempt, self.settings.max_concurrent_children)

    def can_reattach(self, session: SessionLog, run_id: str, node_id: str, attempt_id: str) -> bool:
        """True when the attempt's step prompt is already in the conversation (``docs/design/persistence.md`` §9)."""
        return bool(matching_prompts(current_branch(session.entries), run_id, node_id, attempt_id))

    def execute(self, attempt: Attempt) -> NodeOutcome:
        if attempt.reattached:
            node = attempt.gnode.node
            assert isinstance(node, AgentNode)
            return recover(self.settings, self._run_provider, attempt, node)
        opened = open_step(attempt)
        if isinstance(opened, NodeOutcome):
            return opened
        run = AttemptRun(self.settings, self._run_provider, attempt, opened.node, opened.contract)
        return run.run(opened.prompt)
