"""Input tokens per request with ``agent(context="run")`` against ``context="step"``, through the real adapter.

A five-step chain of structured agent steps (each prompt names the previous output, as a real pipeline would) runs
against ``piw.testing.OpenAIStub`` on 127.0.0.1. The stub counts one token per 4 characters sent. With
``context="run"`` every request carries the whole conversation so far; with ``"step"`` only the attempt's own
prompt. Prints the input tokens of each step's request and the run total, for docs/agent-steps.md.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from piw.agent_steps.factory import agent_executor_factory
from piw.run.runner import ForegroundOptions, start_run
from piw.testing import OpenAIStub, StubReply

ATTEMPT = re.compile(r"step (\S+), attempt ([0-9a-f]{32})")
CHAIN = """
from piw import agent, define_workflow, edge

def prompt(previous):
    def build(ctx):
        before = ctx.outputs[previous]["summary"] if previous else ctx.input["text"]
        return f"Improve this summary of a bug report, in one sentence:\\n{before}"
    return build

steps = ["s1", "s2", "s3", "s4", "s5"]
workflow = define_workflow(
    name="chain",
    start_at="s1",
    nodes={name: agent(prompt=prompt(steps[i - 1] if i else None), expected_output="a JSON object with summary",
                       context="CONTEXT") for i, name in enumerate(steps)},
    edges=[edge(a, b) for a, b in zip(steps, steps[1:])],
)
"""


def respond(body: dict[str, Any]) -> StubReply:
    sent = sum(len(json.dumps(message.get("content") or "")) for message in body["messages"])
    arguments = {
        "action": "submit",
        "output": {"summary": "Saving a file crashes the app on every platform."},
    }
    return StubReply.tool("workflow", arguments, usage={"prompt_tokens": sent // 4, "completion_tokens": 20})


def measure(home: Path, context: str) -> list[int]:
    flow = home / f"chain-{context}.workflow.py"
    flow.write_text(CHAIN.replace("CONTEXT", context), encoding="utf-8")
    options = ForegroundOptions(
        agent_executor_factory=agent_executor_factory(home, Console(file=io.StringIO()))
    )
    state = start_run(str(flow), home, {"text": "The app crashes when I save a file."}, None, options)
    assert state.status == "completed", state.error
    return [int((step.usage or {}).get("input", 0)) for step in state.steps]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, OpenAIStub() as stub:
        home = Path(tmp)
        (home / "config.toml").write_text(
            f'default = "stub/stub-model"\n[providers.stub]\napi = "openai-completions"\n'
            f'base_url = "{stub.base_url}"\nmodels = ["stub-model"]\n'
        )
        os.environ["PIW_HOME"] = str(home)
        stub.respond = respond
        print("input tokens of each step's request (stub: 1 token per 4 characters sent), 5-step chain")
        for context in ("run", "step"):
            tokens = measure(home, context)
            print(
                f"  context={context:4}  " + "  ".join(f"{t:4d}" for t in tokens) + f"   total {sum(tokens)}"
            )


if __name__ == "__main__":
    sys.exit(main())
