"""Clock skew: a host whose wall clock is 60 s fast changes nothing (``multi-host.md`` §5 test 9).

Host B runs with every client-side wall clock shifted 60 s ahead (``time.time``/``time.time_ns``, through a
``sitecustomize`` on its ``PYTHONPATH``): if any lease decision used B's clock, B would see host A's live lease as
expired and take the run early. It must not: B claims the run only once A is gone and its lease expired on the
database's clock, and what B records about itself (its ``hosts`` row) is in the server's time.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.hosts import (
    FULL,
    HostProcess,
    database_url,
    db_trace,
    gated_flow,
    marks,
    pid_alive,
    queue_in,
    wait_for,
)
from tests.support.pg import PgServer
from tests.support.runs import WorkflowMaker

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not FULL, reason="runs in the .ci/run multi-host phase (PIW_MULTIHOST_FULL=1)"),
]

SKEW = """
import os, time
_skew_s = float(os.environ["PIW_TEST_SKEW_S"])
_time, _time_ns = time.time, time.time_ns
time.time = lambda: _time() + _skew_s
time.time_ns = lambda: _time_ns() + int(_skew_s * 1e9)
open(os.environ["PIW_TEST_SKEW_MARK"], "w").write(str(time.time() - _time()))
"""


def _seen(server: PgServer, schema: str, host_id: str) -> tuple[int, int] | None:
    found = server.execute(
        f'SELECT seen_at, (extract(epoch from clock_timestamp()) * 1000)::bigint FROM "{schema}".hosts '
        "WHERE split_part(runner_id, ':', 1) = %s",
        (host_id,),
    )
    return (int(found[0][0]), int(found[0][1])) if found else None


def test_09_a_host_60_s_fast_never_takes_a_live_lease_early(
    pg_server: PgServer, pg_setting: object, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    schema = str(pg_setting.schema)  # type: ignore[attr-defined]
    url = database_url(pg_server, schema)
    flow = gated_flow(make_workflow, tmp_path)
    work, gate = tmp_path / "work.marks", tmp_path / "gate"
    (run_id,) = queue_in(tmp_path / "enqueuer", url, flow, [{}])
    skewed = tmp_path / "skewed"
    skewed.mkdir()
    (skewed / "sitecustomize.py").write_text(SKEW)
    mark = tmp_path / "skew.mark"
    skew_env = {"PYTHONPATH": str(skewed), "PIW_TEST_SKEW_S": "60", "PIW_TEST_SKEW_MARK": str(mark)}
    host_a = HostProcess("host-a", tmp_path / "a", ("--database", url, "--max-runs", "1")).start()
    host_b = HostProcess("host-b", tmp_path / "b", ("--database", url, "--max-runs", "1"), env=skew_env)
    survivor = 0
    try:
        wait_for(lambda: marks(work), what="host A's shell step")
        survivor = int(marks(work)[0])
        generation = db_trace(pg_server, schema, run_id)[-1][1]
        host_b.start()
        wait_for(lambda: _seen(pg_server, schema, "host-b"), what="host B registered")
        first = _seen(pg_server, schema, "host-b")
        assert first is not None
        assert float(mark.read_text()) == pytest.approx(60, abs=1)  # B's clock really is 60 s fast
        seen_at, server_now = first
        assert abs(server_now - seen_at) < 10_000  # B's row is in the server's time, not B's
        wait_for(
            lambda: (_seen(pg_server, schema, "host-b") or (0, 0))[0] > seen_at + 2_000,
            what="host B to make passes past A's whole 2 s lease",
        )  # each pass tries to claim; A renews meanwhile, so its lease never expires on the server
        assert len(marks(work)) == 1 and db_trace(pg_server, schema, run_id)[-1][1] == generation
        host_a.signal(signal.SIGKILL)
        host_a.finish()
        wait_for(lambda: len(marks(work)) == 2, timeout=20, what="host B to take the run over after expiry")
        gate.write_text("open")
        code, out, err = host_b.finish()
        assert code == 0, err
        assert f"{run_id}  completed" in out
    finally:
        gate.write_text("open")
        host_a.kill()
        host_b.kill()
        if survivor:
            wait_for(lambda: not pid_alive(survivor), what="host A's surviving shell step to end")
    trace = db_trace(pg_server, schema, run_id)
    assert [seq for seq, _, _ in trace] == list(range(1, len(trace) + 1))
    assert [line["type"] for _, _, line in trace][-1] == "run_completed"
