"""At most one visible reply per assistant node visit across crashes, resumed in a terminal or met by a host
(``persistence.md`` §9, §12 test 8).

A real ``piw run`` talking to the loopback stub is SIGKILLed at an append point of an assistant step (before the
prompt is recorded, after it, after the reply settled but before its receipt, after the receipt, before routing).
Then either ``piw resume`` continues it in the foreground, or first a ``piw host`` meets it: a host takes over a
dead holder's run but never runs (or recovers) an assistant step invisibly, so it parks the run for its origin
session without a request or a trace line, and ``piw resume`` recovers it. Every case ends with the one reply as
the final output, one model request in all, and exactly one assistant reply in the conversation.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from piw.testing import OpenAIStub, StubReply
from tests.support.agent_harness import write_stub_config
from tests.support.cli import PIW_COMMAND, Cli
from tests.support.runs import WorkflowMaker, trace_lines

REPLY = "The one reply, shown once."

FLOW = """
from piw import agent, assistant_message, compute, define_workflow, edge

workflow = define_workflow(
    name="reply",
    start_at="answer",
    nodes={
        "answer": agent(prompt="Answer the user.", expected_output=assistant_message()),
        "after": compute(lambda ctx: {"chars": len(ctx.outputs["answer"])}),
    },
    edges=[edge("answer", "after")],
)
"""

# The trace of an uninterrupted run: 1 run_started, 2 node_started, 3 agent_prompt_sent, (prompt entry, request,
# reply entry), 4 assistant_completion_recorded, 5 node_finished, 6 node_started(after), 7 node_finished, ...
POINTS = [
    ("PIW_TEST_KILL_AFTER_APPEND", 2),  # before agent_prompt_sent: the attempt is abandoned, asked afresh
    (
        "PIW_TEST_KILL_AFTER_APPEND",
        3,
    ),  # after agent_prompt_sent, before the prompt entry: no P, a fresh attempt
    ("PIW_TEST_KILL_BEFORE_APPEND", 4),  # the reply settled in the conversation, no receipt yet: adopted
    ("PIW_TEST_KILL_AFTER_APPEND", 4),  # after the receipt: finished from it
    ("PIW_TEST_KILL_AFTER_APPEND", 5),  # after node_finished, before routing
]


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PIW_"))}
    env.update(PIW_HOME=str(home), NO_COLOR="1", COLUMNS="200", **extra)
    return env


def assistant_replies(home: Path, run_id: str) -> list[str]:
    path = home / "runs" / run_id / "session" / "entries.ndjson"
    texts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        message = json.loads(line)["entry"]["message"]
        if message.get("role") == "assistant":
            texts.append(
                "".join(b.get("text", "") for b in message.get("content", []) if b.get("type") == "text")
            )
    return texts


def park_reason(home: Path, run_id: str) -> Any:
    conn = sqlite3.connect(home / "piw.sqlite")
    try:
        return conn.execute(
            "SELECT status, park_reason FROM run_queue WHERE run_id = ?", (run_id,)
        ).fetchone()
    finally:
        conn.close()


CASES = [(variable, seq, "resume") for variable, seq in POINTS] + [
    (variable, seq, "host-then-resume") for variable, seq in POINTS if seq in (3, 4)
]


@pytest.mark.parametrize(
    ("variable", "seq", "via"), CASES, ids=[f"{v.split('_')[3].lower()}-{s}-{via}" for v, s, via in CASES]
)
def test_at_most_one_visible_reply_across_a_crash(
    cli: Cli,
    piw_home: Path,
    make_workflow: WorkflowMaker,
    openai_stub: OpenAIStub,
    variable: str,
    seq: int,
    via: str,
) -> None:
    write_stub_config(piw_home, openai_stub)
    openai_stub.respond = lambda body: StubReply.text(REPLY)
    flow = make_workflow("reply", FLOW)
    crashed = subprocess.run(
        [*PIW_COMMAND, "run", str(flow)], env=env_for(piw_home, **{variable: str(seq)}), cwd=cli.cwd,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert crashed.returncode == -9, crashed.stderr
    (run_id,) = [p.name for p in (piw_home / "runs").iterdir() if not p.name.startswith(".")]
    requests_before = openai_stub.request_count

    if via == "host-then-resume":
        before = (piw_home / "runs" / run_id / "trace.ndjson").read_bytes()
        host = cli("host", "--once")
        assert host.returncode == 0, host.stderr
        assert openai_stub.request_count == requests_before  # a host never asks for an assistant reply
        if seq < 5:
            assert park_reason(piw_home, run_id) == ("parked", "needs-origin-session")
            assert (piw_home / "runs" / run_id / "trace.ndjson").read_bytes() == before  # nothing written
    resumed = cli("resume", run_id)
    if resumed.returncode == 2 and "already ended" in resumed.stderr:
        assert via == "host-then-resume" and seq == 5  # the host finished the routing after the reply
    else:
        assert resumed.returncode == 0, resumed.stderr
        # shown here exactly when it is produced here; a reply recorded before the crash is not produced again
        assert resumed.stdout.count(REPLY) == (1 if seq <= 3 else 0)

    lines = trace_lines(piw_home, run_id)
    assert lines[-1]["type"] == "run_completed"
    assert lines[-1]["payload"]["finalOutput"] == {"chars": len(REPLY)}
    assert openai_stub.request_count == 1  # one request in all: a recorded reply is never asked for again
    assert assistant_replies(piw_home, run_id) == [REPLY]  # one visible reply
    finished = [line for line in lines if line["type"] == "node_finished" and line["nodeId"] == "answer"]
    assert len(finished) == 1 and finished[0]["payload"]["output"] == REPLY
    receipts = [line for line in lines if line["type"] == "assistant_completion_recorded"]
    assert len(receipts) == 1
