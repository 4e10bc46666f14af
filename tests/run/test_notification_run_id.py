"""A notification's details name the run that queued it (issue 26 item 13).

A consumer reading a ``notification_queued`` line, the notify node's output (``piw run --json`` prints it as the
final output of ``hello``) or the conversation entry should not have to find the run id elsewhere.
"""

from __future__ import annotations

import json

from tests.support.cli import Cli
from tests.support.runs import trace_lines


def test_the_trace_payload_the_output_and_the_entry_carry_the_run_id(cli: Cli) -> None:
    done = cli("run", "hello", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    run_id = result["runId"]
    assert result["finalOutput"]["runId"] == run_id
    assert set(result["finalOutput"]) == {"notificationId", "runId", "targetSessionId"}

    lines = trace_lines(cli.home, run_id)
    (queued,) = [line for line in lines if line["type"] == "notification_queued"]
    assert queued["payload"]["runId"] == run_id
    (finished,) = [line for line in lines if line["type"] == "node_finished" and line["nodeId"] == "tell"]
    assert finished["payload"]["output"] == result["finalOutput"]

    session = cli.home / "runs" / run_id / "session" / "entries.ndjson"
    (entry,) = [
        json.loads(line)["entry"]["message"] for line in session.read_text(encoding="utf-8").splitlines()
    ]
    assert entry["details"]["runId"] == run_id
    assert entry["details"]["notificationId"] == queued["payload"]["notificationId"]
