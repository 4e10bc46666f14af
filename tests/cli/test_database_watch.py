"""``piw watch`` from another machine (multi-host.md §5 test 10, docs/many-machines.md "Watching from another machine").

The writer is a ``piw host`` process; the watcher is another ``piw`` process with its own ``PIW_HOME`` (so it reads
nothing the writer wrote locally: only PostgreSQL, through its own mirror). It renders each step the host commits
and exits when the run ends; with its ``LISTEN`` connection killed mid-run it still renders every step (the 1 s
poll) and still exits.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from piw.store.pg.setting import DatabaseSetting
from tests.support.cli import Cli
from tests.support.paths import FIXTURES
from tests.support.pg import PgServer

WORKFLOW = FIXTURES / "workflows" / "slow_steps.workflow.py"
STEPS = [f"s{index}" for index in range(1, 7)]


def _listeners(server: PgServer) -> int:
    return len(server.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'piw-listen'"))


@pytest.mark.parametrize("kill_listen", [False, True])
@pytest.mark.long
def test_a_watcher_on_another_home_renders_each_committed_step_and_exits(
    cli: Cli, tmp_path: Path, pg_server: PgServer, pg_setting: DatabaseSetting, kill_listen: bool
) -> None:
    database = {"PIW_DATABASE": pg_setting.url + f"?schema={pg_setting.schema}"}
    queued = cli("run", str(WORKFLOW), "--detach", "--input", '{"pause": 0.4}', "--json", env=database)
    assert queued.returncode == 0, queued.stderr
    run_id = json.loads(queued.stdout)["runId"]
    elsewhere = tmp_path / "another-machine"
    elsewhere.mkdir(mode=0o700)
    watcher = cli.popen("watch", run_id, env={**database, "PIW_HOME": str(elsewhere)})
    host = None
    try:
        deadline = time.monotonic() + 30
        while _listeners(pg_server) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _listeners(pg_server) == 1
        host = cli.popen("host", "--once", env=database)
        if kill_listen:
            time.sleep(1.0)  # a step or two in: the rest can only come through the poll
            pg_server.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'piw-listen'"
            )
        out, err = watcher.communicate(timeout=60)
        host.wait(timeout=60)
    finally:
        for process in (watcher, host):
            if process is not None and process.poll() is None:
                process.kill()
    assert watcher.returncode == 0, err
    for step in STEPS:
        assert f"✓ {step}  ok" in out, out
    assert out.rstrip().endswith("■ completed")
    assert not (elsewhere / "runs").exists()  # the watcher's bundle is a mirror, never a local run
    assert (elsewhere / "pg").is_dir()
    listed = cli("runs", "--json", env={**database, "PIW_HOME": str(tmp_path / "a-third-machine")})
    assert [(row["runId"], row["status"]) for row in json.loads(listed.stdout)] == [(run_id, "completed")]


def test_a_watcher_with_nothing_to_follow_is_refused(
    cli: Cli, tmp_path: Path, pg_setting: DatabaseSetting
) -> None:
    done = cli(
        "watch",
        "20260101T000000000Z-nothing-0000aaaa",
        env={"PIW_DATABASE": pg_setting.url + f"?schema={pg_setting.schema}"},
    )
    assert done.returncode != 0
    assert "No run" in done.stderr
