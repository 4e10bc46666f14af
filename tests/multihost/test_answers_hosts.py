"""§5 test 12 from separate machines: concurrent ``piw answer`` from two homes on one database make one continuation.

Identical answers adopt the one continuation, a different one is refused (``ContinuationExists``), and a host on a
third machine runs the continuation with the winning answer. (The one-winner transaction itself, with a timeout
sweeper among the racers, is ``tests/store/pg/test_decisions_pg.py``.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import PIW_COMMAND
from tests.support.hosts import FULL, HostProcess, base_env, database_url, db_trace
from tests.support.pg import PgServer
from tests.support.runs import WorkflowMaker

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not FULL, reason="runs in the .ci/run multi-host phase (PIW_MULTIHOST_FULL=1)"),
]

GATED = """
from piw import checkpoint, compute, define_workflow, edge

workflow = define_workflow(name="gated", start_at="first", nodes={
    "first": compute(lambda ctx: {"word": "a"}),
    "ask": checkpoint(summary="Go on?"),
    "after": compute(lambda ctx: {"answer": ctx.outputs["ask"]}),
}, edges=[edge("first", "ask"), edge("ask", "after")])
"""


def piw(home: Path, host_id: str, *args: str) -> subprocess.Popen[str]:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [*PIW_COMMAND, *args], cwd=home, env=base_env(home, host_id), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_12_answers_from_two_machines_make_one_continuation_a_host_on_a_third_runs(
    pg_server: PgServer, pg_setting: object, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    schema = str(pg_setting.schema)  # type: ignore[attr-defined]
    url = database_url(pg_server, schema)
    flow = make_workflow("gated", GATED)
    out, err = piw(tmp_path / "a", "a", "run", str(flow), "--database", url, "--json").communicate(timeout=60)
    waiting = json.loads(out)
    assert waiting["status"] == "waiting", err
    run_id = waiting["runId"]
    answer = ("answer", run_id, '"yes"', "--detach", "--json", "--database", url)
    racers = [piw(tmp_path / name, name, *answer) for name in ("b", "c")]
    results = [racer.communicate(timeout=60) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], [e for _, e in results]
    continuations = {json.loads(out)["runId"] for out, _ in results}
    assert len(continuations) == 1  # both report the one continuation (one made it, the other adopted it)
    (continuation,) = continuations
    other = piw(tmp_path / "d", "d", "answer", run_id, '"no"', "--detach", "--database", url)
    _, refused = other.communicate(timeout=60)
    assert other.returncode != 0 and continuation in refused  # a different answer: the continuation exists
    host = HostProcess(
        "e", tmp_path / "e", ("--database", url, "--workflows", str(flow.parent), "--max-runs", "1")
    )
    code, out, err = host.start().finish()
    assert code == 0, err
    assert f"{continuation}  completed" in out
    lines = [line for _, _, line in db_trace(pg_server, schema, continuation)]
    after = next(line for line in lines if line["type"] == "node_finished" and line["nodeId"] == "after")
    assert after["payload"]["output"] == {"answer": "yes"}
    rows = pg_server.execute(f'SELECT count(*) FROM "{schema}".run_queue WHERE parent_run_id = %s', (run_id,))
    assert rows[0][0] == 1
