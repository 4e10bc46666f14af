"""One ``piw host --concurrency 8`` process over many queued runs: each done exactly once (``docs/detached.md``).

The host runs each run on a thread of its own. What a thread opened for its run (its connection to
``piw.sqlite``, with the database's and its journal's file descriptors) must go when the run is done: a host
serving runs all day otherwise runs out of file descriptors after a few hundred runs. The host here runs under a
descriptor limit well above what eight runs in flight need and well below what one connection kept per run
finished adds up to, and every run's shell step leaves one mark per execution.
"""

from __future__ import annotations

import resource
import shlex
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

from piw.run.runner import ForegroundOptions, queue_run
from tests.support.cli import PIW_COMMAND, Cli
from tests.support.runs import WorkflowMaker, trace_lines

RUNS = 150
DESCRIPTORS = 450
"""Eight runs in flight hold about 230 descriptors at most here; a connection kept per finished run passes 450
before the 120th run."""

MARKED = """
from piw import compute, define_workflow, edge, shell

def mark(ctx):
    return {{"command": "sh", "args": ["-c", "echo " + str(ctx.input["n"]) + " >> {marks}"]}}

workflow = define_workflow(
    name="marked",
    start_at="first",
    nodes={{
        "first": compute(lambda ctx: {{"n": ctx.input["n"]}}),
        "mark": shell(mark),
        "last": compute(lambda ctx: {{"n": ctx.outputs["first"]["n"] + 1}}),
    }},
    edges=[edge("first", "mark"), edge("mark", "last")],
)
"""


def test_a_host_at_concurrency_8_runs_each_of_150_runs_exactly_once(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    flow = make_workflow("marked", MARKED.format(marks=marks))
    ids = {
        queue_run(str(flow), piw_home, {"n": n}, None, ForegroundOptions(record_origin=False)).run_id: n
        for n in range(RUNS)
    }
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = DESCRIPTORS if hard == resource.RLIM_INFINITY else min(DESCRIPTORS, hard)
    command = " ".join(shlex.quote(part) for part in [*PIW_COMMAND, "host", "--once", "--concurrency", "8"])
    host = subprocess.run(
        ["sh", "-c", f"ulimit -n {limit} && exec {command}"],
        cwd=cli.cwd,
        env=cli.environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert host.returncode == 0, host.stderr[-2000:]
    assert "Too many open files" not in host.stdout + host.stderr
    completed = Counter(line.split()[0] for line in host.stdout.splitlines() if line.endswith("  completed"))
    assert completed == Counter(list(ids)), host.stdout[-2000:]  # each run reported done once
    assert Counter(marks.read_text().split()) == Counter(str(n) for n in range(RUNS))  # each effect once
    for run_id, n in ids.items():
        kinds = [line["type"] for line in trace_lines(piw_home, run_id)]
        assert kinds.count("process_started") == 1 and kinds.count("run_completed") == 1, kinds
        final = trace_lines(piw_home, run_id)[-1]
        assert final["payload"]["finalOutput"] == {"n": n + 1}
    with sqlite3.connect(piw_home / "piw.sqlite") as conn:
        rows = conn.execute(
            "SELECT status, claim_generation, count(*) FROM run_queue GROUP BY 1, 2"
        ).fetchall()
    assert rows == [("done", 2, RUNS)]  # the enqueuer's claim, then this host's, once per run
