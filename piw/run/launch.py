"""How a run was launched: the agent provider, model and replies script its command chose (never keys).

A run records them on its queue row (``run_queue.options``, ``docs/design/persistence.md`` §10.1), so ``piw resume``,
``piw answer``/``piw decide`` (a continuation), ``piw fork`` and a host executing a detached run build the agent
executor the run started with; :meth:`LaunchOptions.to_json` and :meth:`LaunchOptions.from_json` are that record.
The CLI makes them from its flags (:meth:`LaunchOptions.given`: ``--script`` alone means the scripted provider,
``docs/cli.md``), the run layer records and reads them, and the agent wiring builds a provider from them
(``piw.agent_steps.factory``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPTED = "scripted"
"""The built-in offline provider (``piw.providers.selection.SCRIPTED``; not imported, to keep the CLI light)."""


@dataclass(frozen=True)
class LaunchOptions:
    """``--provider``, ``--model`` and ``--script`` of a run command; ``None`` where not given."""

    provider: str | None = None
    model: str | None = None
    script: str | None = None
    """A replies file for the scripted provider."""

    @classmethod
    def given(cls, provider: str | None, model: str | None, script: str | None) -> LaunchOptions:
        """The options of a command's flags: ``--script FILE`` without ``--provider`` selects ``scripted``, the
        only provider that reads a replies file (``docs/providers.md`` §6)."""
        return cls(provider or (SCRIPTED if script else None), model, script)

    def recorded(self) -> LaunchOptions:
        """As a run records them: the script made absolute, so a later command in another folder finds it."""
        return LaunchOptions(
            self.provider, self.model, str(Path(self.script).resolve()) if self.script else None
        )

    def or_else(self, fallback: LaunchOptions) -> LaunchOptions:
        """Each option given here, else ``fallback``'s (``piw resume`` flags over the ones the run recorded).

        A different provider given here takes none of ``fallback``'s model or script: they were chosen for the
        provider the run recorded.
        """
        if self.provider is not None and self.provider != fallback.provider:
            return self
        return LaunchOptions(
            self.provider or fallback.provider, self.model or fallback.model, self.script or fallback.script
        )

    def to_json(self) -> dict[str, str]:
        """The record on the queue row: the options that are set."""
        pairs = (("provider", self.provider), ("model", self.model), ("script", self.script))
        return {key: value for key, value in pairs if value is not None}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LaunchOptions:
        """From a queue row's record (other keys there are ignored)."""

        def text(key: str) -> str | None:
            value = raw.get(key)
            return value if isinstance(value, str) else None

        return cls(text("provider"), text("model"), text("script"))
