"""Model requests and tokens per built-in: one scripted run and one run over HTTP against the loopback stub.

Each built-in runs its shipped example (``workflows/builtins/ID.input.json``) twice: on the ``scripted`` provider
replaying ``ID.replies.json``, and through the real openai-completions adapter against ``piw.testing.OpenAIStub``
answering from the same replies (``replies_responder``: one token per 4 characters sent or returned). It prints, per
run, the model requests, input and output tokens as the run's usage records them, and the characters of prompt
text sent (messages of every request, which is what input tokens track on a real model). ``plan-change`` runs to
its approval gate (the answer asks no model). Monitor's one-minute wait is skipped with an injected clock and waiter.
Scripted replies carry no usage, so their tokens are 0 by construction; the stub reports chars/4.
Not a test: it prints figures for the closing notes (``python bench/bench_builtins.py``).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console

from piw.agent_steps.attempt import AgentSettings
from piw.agent_steps.executor import AgentExecutor
from piw.agent_steps.factory import agent_executor_factory
from piw.providers.scripted import ScriptedProvider
from piw.run.runner import ForegroundOptions, start_run
from piw.testing import OpenAIStub, replies_responder

BUILTINS = Path(__file__).resolve().parent.parent / "workflows" / "builtins"
IDS = ["plain-summary", "autoplan", "plan-approval", "plan-change", "monitor", "orchestrate"]


class Clock:
    """Engine clock and sleep waiter in one: a wait moves the clock instead of sleeping."""

    def __init__(self) -> None:
        self.current = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.current

    def wait(self, event: threading.Event, seconds: float) -> bool:
        self.current += timedelta(seconds=seconds)
        return event.is_set()


def example(builtin_id: str) -> tuple[Any, dict[str, Any]]:
    run_input = json.loads((BUILTINS / f"{builtin_id}.input.json").read_text(encoding="utf-8"))
    replies_path = BUILTINS / f"{builtin_id}.replies.json"
    replies = json.loads(replies_path.read_text(encoding="utf-8")) if replies_path.is_file() else {}
    return run_input, replies


def figures(state: Any, sent_chars: int) -> str:
    usage = state.usage or {}
    return (f"{state.status:9}  requests {usage.get('requests', 0):2}  input tokens {usage.get('input', 0):6}  "
            f"output tokens {usage.get('output', 0):5}  prompt chars {sent_chars:7}")  # fmt: skip


def scripted(builtin_id: str, home: Path) -> str:
    run_input, replies = example(builtin_id)
    provider = ScriptedProvider(replies)
    executor = AgentExecutor(AgentSettings(provider_factory=lambda: provider))
    clock = Clock()
    options = ForegroundOptions(
        agent_executor_factory=lambda _wf: executor, clock=clock.now, waiter=clock.wait
    )
    state = start_run(builtin_id, home, run_input, None, options)
    sent = sum(len(json.dumps([m.model_dump() for m in r.messages])) for r in provider.requests)
    return figures(state, sent)


def over_http(builtin_id: str, home: Path) -> str:
    run_input, replies = example(builtin_id)
    with OpenAIStub() as stub:
        (home / "config.toml").write_text(
            f'default = "stub/stub-model"\n[providers.stub]\napi = "openai-completions"\n'
            f'base_url = "{stub.base_url}"\nmodels = ["stub-model"]\n',
            encoding="utf-8",
        )
        stub.respond = replies_responder(replies)
        clock = Clock()
        options = ForegroundOptions(
            agent_executor_factory=agent_executor_factory(home, Console(file=io.StringIO())),
            clock=clock.now,
            waiter=clock.wait,
        )
        state = start_run(builtin_id, home, run_input, None, options)
        assert not stub.errors, stub.errors
        sent = sum(len(json.dumps(body["messages"])) for body in stub.requests)
    return figures(state, sent)


def main() -> None:
    for builtin_id in IDS:
        with tempfile.TemporaryDirectory() as scripted_home, tempfile.TemporaryDirectory() as stub_home:
            os.environ["PIW_HOME"] = scripted_home
            first = scripted(builtin_id, Path(scripted_home))
            os.environ["PIW_HOME"] = stub_home
            second = over_http(builtin_id, Path(stub_home))
        print(f"{builtin_id:13} scripted  {first}")
        print(f"{'':13} stub      {second}")


if __name__ == "__main__":
    sys.exit(main())
