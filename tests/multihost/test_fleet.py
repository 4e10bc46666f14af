"""§5 test 6 in the gate: 3 hosts × 24 runs with a kill and a stop; 4 × 200 runs is a ``.ci/run`` phase
(``PIW_MULTIHOST_FULL=1``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.fleet import run_fleet
from tests.support.pg import PgServer

FULL = os.environ.get("PIW_MULTIHOST_FULL") == "1"


@pytest.mark.timeout(900 if FULL else 180)
def test_06_hosts_with_a_kill_and_a_stop_complete_every_run_exactly_once(
    pg_server: PgServer, pg_setting: object, tmp_path: Path
) -> None:
    hosts, runs, concurrency = (4, 200, 8) if FULL else (3, 24, 2)
    schema = str(pg_setting.schema)  # type: ignore[attr-defined]
    report = run_fleet(pg_server, schema, tmp_path, hosts=hosts, runs=runs, concurrency=concurrency)
    assert report.done == runs
    print(
        f"fleet: {hosts} hosts x {runs} runs in {report.elapsed_s:.1f}s, {report.duplicated_effects} effects ran "
        f"twice, {report.taken_over} runs claimed again after the kill or the stop"
    )
