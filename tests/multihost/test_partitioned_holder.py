"""A holder cut off from its database stops itself at its deadline (``multi-host.md`` §4.4, §5 test 5).

SQLite mode, one machine, two hosts with distinct ``PIW_HOST_ID``s (so neither judges the other's pids): the test
takes ``piw.sqlite``'s write lock, which is what a partition looks like to host A: its renewals fail. A must kill
its shell group at its own deadline and write nothing more; once the database is back, host B takes the run over
by expiry and completes it, rerunning only the node that was in flight.
"""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

from piw.run.runner import ForegroundOptions, queue_run
from piw.store.db.database import now_ms
from tests.support.hosts import HostProcess, marks, pid_alive, wait_for
from tests.support.runs import WorkflowMaker, trace_lines


def test_a_partitioned_host_kills_its_shell_at_its_deadline_and_another_host_finishes(
    piw_home: Path, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    work, after, gate = tmp_path / "work.marks", tmp_path / "after.marks", tmp_path / "gate"
    flow = make_workflow(
        "fenced",
        textwrap.dedent(
            f"""
            from piw import define_workflow, edge, shell

            def wait(ctx):
                loop = "echo $$ >> {work}; while [ ! -e {gate} ]; do sleep 0.02; done"
                return {{"command": "sh", "args": ["-c", loop]}}

            workflow = define_workflow(name="fenced", start_at="work", nodes={{
                "work": shell(wait),
                "after": shell({{"command": "sh", "args": ["-c", "echo x >> {after}"]}}),
            }}, edges=[edge("work", "after")])
            """
        ),
    )
    run_id = queue_run(str(flow), piw_home, {}, None, ForegroundOptions(record_origin=False)).run_id
    host_a = HostProcess("host-a", piw_home, ("--max-runs", "1")).start()
    try:
        wait_for(lambda: marks(work), what="host A's shell step")
        pid = int(marks(work)[0])
        before = trace_lines(piw_home, run_id)
        assert before[-1]["type"] == "process_started"
        partition = sqlite3.connect(piw_home / "piw.sqlite", isolation_level=None, timeout=30)
        partition.execute("BEGIN EXCLUSIVE")  # host A's renewals now fail: its lease runs out
        try:
            wait_for(lambda: not pid_alive(pid), timeout=20, what="host A to kill its shell group")
            (expires,) = partition.execute(
                "SELECT claim_expires_at FROM run_queue WHERE run_id = ?", (run_id,)
            ).fetchone()
            assert now_ms() < expires  # killed at A's own deadline, before its lease ran out for anyone else
        finally:
            partition.execute("ROLLBACK")
            partition.close()
        code, out, err = host_a.finish()
        assert code == 0, err
        assert trace_lines(piw_home, run_id) == before  # A wrote nothing after its deadline
        assert marks(after) == []  # and started no effect
    finally:
        host_a.kill()
    gate.write_text("open")
    host_b = HostProcess("host-b", piw_home, ("--max-runs", "1")).start()
    code, out, err = host_b.finish()
    assert code == 0, err
    assert f"{run_id}  completed" in out
    lines = trace_lines(piw_home, run_id)
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert lines[-1]["type"] == "run_completed"
    resumed = next(line for line in lines if line["type"] == "run_resumed")
    assert resumed["payload"]["abandonedAttemptId"] == before[-1]["attemptId"]
    assert len(marks(work)) == 2 and marks(after) == ["x"]  # only the node in flight ran twice
