"""Routing by workflow version, and the hosts list (``multi-host.md`` §4.7, §5 test 14; ``docs/many-machines.md``).

A host claims only runs whose serve key (the workflow's content hash and definition digest, not its path) it can
load. One with another version of the file never claims the run, and ``piw runs`` says no live host serves it; one
with the same file at another path claims it and runs it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import PIW_COMMAND
from tests.support.hosts import HostProcess, base_env, database_url, db_trace, queue_in, wait_for
from tests.support.pg import PgServer
from tests.support.runs import WorkflowMaker

pytestmark = pytest.mark.timeout(120)

FLOW = """
from piw import compute, define_workflow

workflow = define_workflow(name="route", start_at="one", nodes={"one": compute(lambda ctx: {"v": VERSION})})
"""


def piw(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PIW_COMMAND, *args],
        cwd=home,
        env=base_env(home, "viewer"),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.long
def test_14_only_a_host_with_the_runs_workflow_version_claims_it_at_any_path(
    pg_server: PgServer, pg_setting: object, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    schema = pg_setting.schema  # type: ignore[attr-defined]
    url = database_url(pg_server, schema)
    queued_from = make_workflow("route", FLOW.replace("VERSION", "1"))
    (run_id,) = queue_in(tmp_path / "enqueuer", url, queued_from, [{}])
    copy, other = tmp_path / "copy", tmp_path / "other"
    copy.mkdir()
    other.mkdir()
    shutil.move(queued_from, copy / queued_from.name)  # the queued file now exists only at another path
    (other / queued_from.name).write_text(FLOW.replace("VERSION", "2").lstrip())  # another version of it
    viewer = tmp_path / "viewer"
    viewer.mkdir()

    old = HostProcess("host-old", tmp_path / "old", ("--database", url, "--workflows", str(other))).start()
    try:
        wait_for(
            lambda: any(h["hostId"] == "host-old" and h["live"] for h in json.loads(
                piw(viewer, "hosts", "--database", url, "--json").stdout or "[]")),
            what="host-old in 'piw hosts'",
        )  # fmt: skip
        listed = piw(viewer, "hosts", "--database", url)
        assert listed.returncode == 0 and "host-old" in listed.stdout and "seen " in listed.stdout, listed
        assert (
            "0 runs held" in listed.stdout
            and "***" not in listed.stdout
            and "postgresql:" not in listed.stdout
        )
        runs = piw(viewer, "runs", "--database", url)
        assert runs.returncode == 0, runs.stderr
        assert "queued: no live host serves this workflow version" in runs.stdout, runs.stdout
    finally:
        old.signal(signal.SIGTERM)
        code, out_old, err_old = old.finish()
    assert code == 0, err_old
    assert "0 runs claimed" in out_old and run_id not in out_old  # it never claimed the run

    new = HostProcess(
        "host-new", tmp_path / "new", ("--database", url, "--workflows", str(copy), "--max-runs", "1")
    )
    code, out_new, err_new = new.start().finish()
    assert code == 0, err_new
    assert f"{run_id}  completed" in out_new
    lines = [line for _, _, line in db_trace(pg_server, schema, run_id)]
    finished = next(line for line in lines if line["type"] == "node_finished")
    assert finished["payload"]["output"] == {"v": 1}  # the version it was queued with, loaded from the copy
    hosts = json.loads(piw(viewer, "hosts", "--database", url, "--json").stdout)
    assert [h["hostId"] for h in hosts] == []  # hosts that stopped cleanly removed their rows
