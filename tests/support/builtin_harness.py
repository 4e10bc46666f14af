"""Shared helpers for the built-in tests (builtins.md B12): the real engine, scripted replies, an injected clock.

``run_builtin`` starts a built-in through ``piw.run.runner.start_run`` (the call behind ``piw run``) with a
``ScriptedProvider`` keyed by node id, so no test reaches a model. ``FakeClock`` is both the engine clock and the
waiter behind ``ctx.sleep``: a wait advances the clock instead of sleeping, so a 30-minute interval costs nothing.
Assertions read the bundle: trace events, conversation entries, updates and the requests the provider received.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from piw.agent_steps.attempt import AgentSettings
from piw.agent_steps.executor import AgentExecutor
from piw.providers.base import Provider
from piw.providers.scripted import ScriptedProvider
from piw.run.runner import ForegroundOptions, resume_run, start_run
from piw.store.artifacts import ArtifactStore, resolve
from piw.store.bundle import Bundle
from piw.store.fold import RunState

REPO = Path(__file__).resolve().parents[2]
BUILTINS = REPO / "workflows" / "builtins"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
FORBIDDEN_PHRASES = ("step by step", "chain of thought", "chain-of-thought", "your reasoning", "scratchpad")


def load_module(builtin_id: str) -> ModuleType:
    """A built-in file imported as a module, to call its pure helpers directly."""
    path = BUILTINS / f"{builtin_id}.workflow.py"
    spec = importlib.util.spec_from_file_location(f"builtin_{builtin_id.replace('-', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@dataclass
class FakeClock:
    """An engine clock that only moves when told to, or when a step waits (``ctx.sleep``)."""

    current: datetime = T0
    waits: list[float] = field(default_factory=list)
    on_wait: Callable[[FakeClock, threading.Event, float], None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> datetime:
        with self.lock:
            return self.current

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.current += timedelta(seconds=seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        self.waits.append(seconds)
        if self.on_wait is not None:
            self.on_wait(self, event, seconds)
        if event.is_set():
            return True
        self.advance(seconds)
        return event.is_set()

    def minutes_since(self, start: datetime = T0) -> float:
        return (self.now() - start).total_seconds() / 60


@dataclass
class BuiltinRun:
    """A run read back from its bundle."""

    run_id: str
    bundle: Path
    state: RunState | None
    provider: ScriptedProvider | None = None

    def _ndjson(self, name: str) -> list[dict[str, Any]]:
        path = self.bundle / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    @property
    def events(self) -> list[dict[str, Any]]:
        """Trace events with large strings (stored as artifacts) loaded back in place."""
        store = ArtifactStore(self.bundle)
        return [resolve(event, store.read) for event in self._ndjson("trace.ndjson")]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [line["entry"]["message"] for line in self._ndjson("session/entries.ndjson")]

    @property
    def snapshot(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.bundle / "workflow.json").read_text(encoding="utf-8"))
        return data

    def of_type(self, kind: str, node: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind and (node is None or e.get("nodeId") == node)]

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def prompts(self, node: str | None = None) -> list[str]:
        """The prompts of agent steps, each checked for requests of hidden reasoning on the way (B9)."""
        found = [e["payload"]["prompt"] for e in self.of_type("agent_prompt_sent", node)]
        assert_no_hidden_reasoning(found)
        return found

    def started(self, node: str) -> list[dict[str, Any]]:
        return self.of_type("node_started", node)

    def finished(self, node: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["type"] in ("node_finished", "node_failed") and e.get("nodeId") == node
        ]

    def output(self, node: str) -> Any:
        return [e["payload"].get("output") for e in self.finished(node)]

    def notifications(self) -> list[str]:
        return [
            str(m["content"]) for m in self.messages if m.get("customType") == "pi-workflows-notification"
        ]

    def assistant_texts(self) -> list[str]:
        """Visible assistant replies (text blocks joined) that carry no tool call."""
        texts = []
        for message in self.messages:
            if message["role"] != "assistant":
                continue
            blocks = message.get("content", [])
            if any(block.get("type") == "toolCall" for block in blocks):
                continue
            text = "".join(block.get("text", "") for block in blocks if block.get("type") == "text")
            if text:
                texts.append(text)
        return texts

    def updates(self, kind: str | None = None) -> list[dict[str, Any]]:
        found = [e["payload"] for e in self.of_type("update_published")]
        return [u for u in found if kind is None or u["type"] == kind]

    @property
    def status(self) -> str:
        assert self.state is not None
        return self.state.status

    @property
    def final(self) -> Any:
        assert self.state is not None
        return self.state.final_output


def executor_for(provider: Provider) -> AgentExecutor:
    return AgentExecutor(AgentSettings(provider_factory=lambda: provider))


@dataclass
class Started:
    bundle: Bundle | None = None

    def on_start(self, bundle: Bundle) -> None:
        self.bundle = bundle


def options(
    provider: Provider,
    clock: FakeClock | None,
    listeners: Sequence[Callable[[Any, Any], None]] = (),
    origin: bool = True,
    started: Started | None = None,
) -> ForegroundOptions:
    executor = executor_for(provider)
    return ForegroundOptions(
        listeners=list(listeners),
        agent_executor_factory=lambda _workflow: executor,
        record_origin=origin,
        on_start=started.on_start if started else None,
        clock=clock.now if clock else None,
        waiter=clock.wait if clock else None,
    )


RunBuiltin = Callable[..., BuiltinRun]


@pytest.fixture
def run_builtin(piw_home: Path) -> RunBuiltin:
    """Start a built-in (or a workflow file) in-process on scripted replies; returns the run read back."""

    def run(
        reference: str | Path,
        run_input: Any,
        script: Mapping[str, Sequence[Any]] | Provider,
        *,
        clock: FakeClock | None = None,
        listeners: Sequence[Callable[[Any, Any], None]] = (),
        origin: bool = True,
    ) -> BuiltinRun:
        provider = script if not isinstance(script, Mapping) else ScriptedProvider(dict(script))
        started = Started()
        state = start_run(
            str(reference), piw_home, run_input, None, options(provider, clock, listeners, origin, started)
        )
        return BuiltinRun(
            state.run_id,
            piw_home / "runs" / state.run_id,
            state,
            provider if isinstance(provider, ScriptedProvider) else None,
        )

    return run


@pytest.fixture
def resume_builtin(piw_home: Path) -> Callable[..., BuiltinRun]:
    def resume(
        run_id: str, script: Mapping[str, Sequence[Any]] | Provider, *, clock: FakeClock | None = None
    ) -> BuiltinRun:
        provider = script if not isinstance(script, Mapping) else ScriptedProvider(dict(script))
        state = resume_run(run_id, piw_home, options(provider, clock))
        return BuiltinRun(
            run_id,
            piw_home / "runs" / run_id,
            state,
            provider if isinstance(provider, ScriptedProvider) else None,
        )

    return resume


def assert_no_hidden_reasoning(prompts: Sequence[str]) -> None:
    """B9: no prompt asks for hidden reasoning."""
    for prompt in prompts:
        lowered = prompt.lower()
        for phrase in FORBIDDEN_PHRASES:
            assert phrase not in lowered, (phrase, prompt[:200])


def no_runs(home: Path) -> bool:
    runs = home / "runs"
    return not runs.exists() or not any(p for p in runs.iterdir() if not p.name.startswith("."))
