"""A generated three-phase script workflow and a loopback-stub responder that counts requests per leaf prompt
(``docs/dynamic-workflows.md``): N items through a two-stage pipeline, N verifiers, one synthesis."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piw.testing import StubReply
from tests.support.agent_harness import submit_args, write_workflow

THREE_PHASES = """
    from piw import define_workflow, script

    def main(flow):
        n = int(flow.input.get("n", 4))

        def outline(i):
            return flow.agent(f"Outline part {i}.")

        def write(o):
            return flow.agent(f"Write from {o['answer']}.")

        def verify(d):
            return flow.agent(f"Verify {d['answer']}.")

        with flow.phase("draft"):
            drafts = flow.pipeline(list(range(n)), outline, write)
        with flow.phase("verify"):
            checks = flow.parallel(drafts, verify)
        flow.log(f"verified {len(checks)} drafts")
        with flow.phase("synthesis"):
            final = flow.agent("Synthesise: " + "; ".join(c["answer"] for c in checks))
        return {"final": final, "checks": checks}

    workflow = define_workflow(
        name="three", start_at="orchestrate", nodes={"orchestrate": script(main, max_concurrency=3, MAX)}
    )
"""


def three_phase_workflow(directory: Path, *, max_agents: int = 1000, name: str = "three") -> Path:
    return write_workflow(directory, name, THREE_PHASES.replace("MAX", f"max_agents={max_agents}"))


def task_of(body: dict[str, Any]) -> str:
    """The leaf's own prompt: the newest step message's text before the step contract."""
    for message in reversed(body["messages"]):
        if message["role"] == "user" and "Workflow step:" in (message.get("content") or ""):
            return str(message["content"]).split("\n\n---", 1)[0].strip()
    raise AssertionError("no step message in the request")


class LeafStub:
    """Answers each leaf with ``{"answer": "<its prompt>"}`` and counts requests per leaf prompt.

    ``on_request(task, count)`` runs before the reply (a test kills the host there).
    """

    def __init__(self, on_request: Callable[[str, int], None] | None = None) -> None:
        self.asked: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.on_request = on_request

    def __call__(self, body: dict[str, Any]) -> StubReply:
        task = task_of(body)
        with self.lock:
            self.asked[task] += 1
            count = sum(self.asked.values())
        if self.on_request is not None:
            self.on_request(task, count)
        return StubReply.tool("workflow", submit_args(body, {"answer": f"<{task}>"}))
