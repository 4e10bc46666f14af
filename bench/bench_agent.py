"""Model requests and tokens per agent step, through the real openai-completions adapter and a loopback stub.

Runs the shipped ``triage`` example N times against ``piw.testing.OpenAIStub`` (127.0.0.1, no network) and prints,
per step: model requests, input/output tokens (as the stub reports them: one token per 4 characters sent or
returned), and wall time per run. Not a test: it prints figures for the closing notes.
"""

from __future__ import annotations

import io
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from piw.agent_steps.factory import agent_executor_factory
from piw.run.runner import ForegroundOptions, start_run
from piw.testing import OpenAIStub, StubReply

RUNS = int(os.environ.get("BENCH_RUNS", "20"))
ATTEMPT = re.compile(r"step (\S+), attempt ([0-9a-f]{32})")


def _usage(body: dict[str, Any], reply_text: str) -> dict[str, int]:
    sent = sum(len(str(message.get("content") or "")) for message in body["messages"])
    return {"prompt_tokens": sent // 4, "completion_tokens": max(1, len(reply_text) // 4)}


def respond(body: dict[str, Any]) -> StubReply:
    offered = [tool["function"]["name"] for tool in body.get("tools") or []]
    last_prompt = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    if "workflow" in offered:
        step, attempt = ATTEMPT.findall(last_prompt)[-1]
        arguments = {"action": "submit", "step": step, "attempt": attempt,
                     "output": {"route": "bug", "reason": "Saving crashes the app."}}  # fmt: skip
        return StubReply.tool("workflow", arguments, usage=_usage(body, json.dumps(arguments)))
    text = "Thanks for the report! We can reproduce the crash on save and a fix is on its way."
    return StubReply.text(text, usage=_usage(body, text))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, OpenAIStub() as stub:
        home = Path(tmp)
        (home / "config.toml").write_text(
            f'default = "stub/stub-model"\n[providers.stub]\napi = "openai-completions"\n'
            f'base_url = "{stub.base_url}"\nmodels = ["stub-model"]\n'
        )
        os.environ["PIW_HOME"] = str(home)
        stub.respond = respond
        console = Console(file=io.StringIO(), width=100)
        per_step: dict[str, list[dict[str, Any]]] = {}
        walls: list[float] = []
        for _ in range(RUNS):
            options = ForegroundOptions(agent_executor_factory=agent_executor_factory(home, console))
            started = time.perf_counter()
            state = start_run("triage", home, {"text": "The app crashes when I save."}, None, options)
            walls.append(time.perf_counter() - started)
            assert state.status == "completed", state.error
            for step in state.steps:
                if step.usage:
                    per_step.setdefault(step.node_id, []).append(step.usage)
        print(f"triage x{RUNS} against the loopback stub ({stub.request_count} requests in all)")
        for node_id, usages in per_step.items():
            requests = statistics.mean(u["requests"] for u in usages)
            tokens_in = statistics.mean(u["input"] for u in usages)
            tokens_out = statistics.mean(u["output"] for u in usages)
            print(f"  {node_id:10} requests/step {requests:.2f}  input tokens/step {tokens_in:.0f}  "
                  f"output tokens/step {tokens_out:.0f}")  # fmt: skip
        print(f"  wall time per run: median {statistics.median(walls) * 1000:.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
