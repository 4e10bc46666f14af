"""Another host takes over a dead or frozen host's run (``multi-host.md`` §5 tests 4 and 5).

Hosts are separate ``piw host --database URL`` processes with their own ``PIW_HOME`` and ``PIW_HOST_ID`` (two
machines, as far as piw can tell) on one throwaway PostgreSQL, with a 2 s test lease. Effects are counted by the
shell steps themselves (one line per execution in a file).
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

pytestmark = pytest.mark.timeout(120)


def test_04_sigkill_a_host_mid_shell_step_and_another_host_resumes_it(
    pg_server: PgServer, pg_setting: object, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    schema = pg_setting.schema  # type: ignore[attr-defined]
    url = database_url(pg_server, schema)
    flow = gated_flow(make_workflow, tmp_path)
    work, after, gate = tmp_path / "work.marks", tmp_path / "after.marks", tmp_path / "gate"
    (run_id,) = queue_in(tmp_path / "enqueuer", url, flow, [{}])
    host_a = HostProcess("host-a", tmp_path / "a", ("--database", url, "--max-runs", "1")).start()
    host_b: HostProcess | None = None
    survivor = 0
    try:
        wait_for(lambda: marks(work), what="host A's shell step")
        survivor = int(marks(work)[0])
        host_a.signal(signal.SIGKILL)
        host_a.finish()
        host_b = HostProcess("host-b", tmp_path / "b", ("--database", url, "--max-runs", "1")).start()
        wait_for(lambda: len(marks(work)) == 2, timeout=20, what="host B to rerun the step (lease + a poll)")
        gate.write_text("open")
        code, out, err = host_b.finish()
        assert code == 0, err
        assert f"{run_id}  completed" in out
    finally:
        gate.write_text("open")  # host A's shell group survived its kill -9 (another machine cannot stop it)
        host_a.kill()
        if host_b is not None:
            host_b.kill()
        if survivor:
            wait_for(lambda: not pid_alive(survivor), what="host A's surviving shell step to end")
    trace = db_trace(pg_server, schema, run_id)
    assert [seq for seq, _, _ in trace] == list(range(1, len(trace) + 1))
    generations = [gen for _, gen, _ in trace]
    assert generations == sorted(generations) and generations[-1] > generations[0]
    lines = [line for _, _, line in trace]
    first_attempt = next(line["attemptId"] for line in lines if line["type"] == "process_started")
    resumed = next(line for line in lines if line["type"] == "run_resumed")
    assert resumed["payload"]["abandonedAttemptId"] == first_attempt
    assert lines[-1]["type"] == "run_completed"
    assert len(marks(work)) == 2 and marks(after) == ["x"]  # only the node in flight ran twice


@pytest.mark.parametrize("self_fencing", [True, False], ids=["self-fencing", "database-only"])
def test_05_sigstop_a_host_past_its_lease_and_on_sigcont_it_writes_nothing_and_starts_nothing(
    pg_server: PgServer, pg_setting: object, make_workflow: WorkflowMaker, tmp_path: Path, self_fencing: bool
) -> None:
    schema = pg_setting.schema  # type: ignore[attr-defined]
    url = database_url(pg_server, schema)
    flow = gated_flow(make_workflow, tmp_path)
    work, after, gate = tmp_path / "work.marks", tmp_path / "after.marks", tmp_path / "gate"
    (run_id,) = queue_in(tmp_path / "enqueuer", url, flow, [{}])
    env = {} if self_fencing else {"PIW_TEST_NO_SELF_FENCE": "1"}
    host_a = HostProcess("host-a", tmp_path / "a", ("--database", url, "--max-runs", "1"), env=env).start()
    host_b: HostProcess | None = None
    try:
        wait_for(lambda: marks(work), what="host A's shell step")
        shell_a = int(marks(work)[0])
        host_a.signal(signal.SIGSTOP)  # frozen: no renewal, no write, but its shell group runs on
        generation_a = db_trace(pg_server, schema, run_id)[-1][1]
        host_b = HostProcess("host-b", tmp_path / "b", ("--database", url, "--max-runs", "1")).start()
        wait_for(lambda: len(marks(work)) == 2, timeout=20, what="host B to take the run over by expiry")
        if not self_fencing:
            gate.write_text(
                "open"
            )  # A's command ends while A is frozen: on SIGCONT it has an outcome to write
            wait_for(lambda: not pid_alive(shell_a), what="host A's shell step to end")
        rows_of_a = [seq for seq, gen, _ in db_trace(pg_server, schema, run_id) if gen == generation_a]
        host_a.signal(signal.SIGCONT)
        code, out_a, err_a = host_a.finish()
        assert code == 0, err_a
        assert f"{run_id}  error: Claim lost" in out_a
        if self_fencing:
            assert not pid_alive(
                shell_a
            )  # killed once A continued, past its deadline, before the gate opened
            assert marks(after) == []  # and A started nothing after its deadline
        gate.write_text("open")
        code, out_b, err_b = host_b.finish()
        assert code == 0, err_b
        assert f"{run_id}  completed" in out_b
    finally:
        gate.write_text("open")
        for host in (host_a, host_b):
            if host is not None and host.process is not None and host.process.poll() is None:
                host.signal(signal.SIGCONT)
                host.kill()
    trace = db_trace(pg_server, schema, run_id)
    assert [seq for seq, gen, _ in trace if gen == generation_a] == rows_of_a  # A wrote 0 rows after SIGCONT
    assert [seq for seq, _, _ in trace] == list(range(1, len(trace) + 1))
    assert [line["type"] for _, _, line in trace][-1] == "run_completed"
    assert len(marks(work)) == 2 and marks(after) == ["x"]  # the step in flight ran twice, nothing else did


@pytest.mark.skipif(not FULL, reason="runs in the .ci/run multi-host phase (PIW_MULTIHOST_FULL=1)")
def test_05_a_host_cut_off_from_the_database_kills_its_shell_at_its_deadline(
    pg_server: PgServer, pg_setting: object, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    """The partition variant: host A reaches the database through a proxy the test freezes. A cannot renew, so at
    its own deadline, while its lease is still unexpired on the server, it kills its shell group and stops."""
    from tests.support.proxy import TcpProxy

    schema = str(pg_setting.schema)  # type: ignore[attr-defined]
    url = database_url(pg_server, schema)
    proxy = TcpProxy(int(url.split(":")[-1].split("/")[0])).start()
    flow = gated_flow(make_workflow, tmp_path)
    work, after, gate = tmp_path / "work.marks", tmp_path / "after.marks", tmp_path / "gate"
    (run_id,) = queue_in(tmp_path / "enqueuer", url, flow, [{}])
    via_proxy = url.replace(f":{proxy.target_port}/", f":{proxy.port}/")
    host_a = HostProcess("host-a", tmp_path / "a", ("--database", via_proxy, "--max-runs", "1")).start()
    host_b: HostProcess | None = None
    try:
        wait_for(lambda: marks(work), what="host A's shell step")
        shell_a = int(marks(work)[0])
        rows_before = db_trace(pg_server, schema, run_id)
        proxy.freeze()  # the partition: A's renewals wait forever
        wait_for(lambda: not pid_alive(shell_a), timeout=20, what="host A to kill its shell group")
        live = pg_server.execute(
            "SELECT claim_expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint "
            f'FROM "{schema}".run_queue WHERE run_id = %s',
            (run_id,),
        )[0][0]
        assert live  # killed at A's own deadline, before its lease ran out for anyone else
        proxy.drop()  # A's connections fail now (it retries them for a while: the test does not wait for that)
        assert db_trace(pg_server, schema, run_id) == rows_before and marks(after) == []
        host_a.kill()
        gate.write_text("open")
        host_b = HostProcess("host-b", tmp_path / "b", ("--database", url, "--max-runs", "1")).start()
        code, out_b, err_b = host_b.finish()
        assert code == 0, err_b
        assert f"{run_id}  completed" in out_b
    finally:
        proxy.drop()
        gate.write_text("open")
        host_a.kill()
        if host_b is not None:
            host_b.kill()
    assert len(marks(work)) == 2 and marks(after) == ["x"]
