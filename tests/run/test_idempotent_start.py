"""``piw run --idempotency-key`` (``persistence.md`` §10.3 and §12 test 12: a repeated ``run.start`` adopts, a
conflicting one is rejected): the key is recorded in the transaction that inserts the run's queue row, before any
bundle exists, so a repeat (even a concurrent one) never starts a second run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

SHORT = """
from piw import compute, define_workflow

workflow = define_workflow(
    name="short",
    start_at="work",
    nodes={"work": compute(lambda ctx: {"n": ctx.input.get("n")})},
)
"""


def bundles(home: Path) -> list[str]:
    runs = home / "runs"
    return sorted(p.name for p in runs.iterdir() if not p.name.startswith(".")) if runs.exists() else []


def table(home: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(home / "piw.sqlite")
    try:
        return list(conn.execute(sql).fetchall())
    finally:
        conn.close()


def test_a_repeated_start_with_the_same_key_reports_the_first_run(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = str(make_workflow("short", SHORT))
    first = cli.json("run", path, "--input", '{"n": 1}', "--idempotency-key", "nightly-2026-12-01")
    assert first["status"] == "completed" and "adopted" not in first
    again = cli("run", path, "--input", '{"n": 1}', "--idempotency-key", "nightly-2026-12-01")
    assert again.returncode == 0, again.stderr
    assert (
        f"Run {first['runId']} was already started with idempotency key 'nightly-2026-12-01' (completed)"
        in (again.stdout)
    )
    repeat = cli.json("run", path, "--input", '{"n": 1}', "--idempotency-key", "nightly-2026-12-01")
    assert repeat == {**first, "adopted": True}
    assert bundles(cli.home) == [first["runId"]]  # nothing new was created
    assert table(cli.home, "SELECT scope, key FROM idempotency") == [("run.start", "nightly-2026-12-01")]


def test_a_different_request_under_the_key_is_refused_and_changes_nothing(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = str(make_workflow("short", SHORT))
    first = cli.json("run", path, "--input", '{"n": 1}', "--idempotency-key", "k1")
    rows = table(cli.home, "SELECT * FROM run_queue")
    for changed in (["--input", '{"n": 2}'], ["--input", '{"n": 1}', "--title", "other"]):
        done = cli("run", path, *changed, "--idempotency-key", "k1")
        assert done.returncode == 2
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"Error: Idempotency key 'k1' already started run {first['runId']}")
    assert bundles(cli.home) == [first["runId"]]
    assert table(cli.home, "SELECT * FROM run_queue") == rows
    other = cli.json("run", path, "--input", '{"n": 2}', "--idempotency-key", "k2")  # a new key starts a run
    assert other["runId"] != first["runId"] and other["finalOutput"] == {"n": 2}


def test_a_bad_key_is_one_error_line(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = str(make_workflow("short", SHORT))
    for key in ("", "x" * 201, "line\nbreak"):
        done = cli("run", path, "--idempotency-key", key)
        assert done.returncode == 2
        assert done.stderr.strip() == "Error: --idempotency-key must be 1 to 200 printable characters."
    assert bundles(cli.home) == []


def test_concurrent_detached_starts_with_one_key_queue_one_run(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = str(make_workflow("short", SHORT))
    args = ("run", path, "--input", '{"n": 3}', "--detach", "--json", "--idempotency-key", "deploy-42")
    starts = [cli.popen(*args) for _ in range(4)]
    outputs = [process.communicate(timeout=60) for process in starts]
    assert [process.returncode for process in starts] == [0, 0, 0, 0], [err for _out, err in outputs]
    reports = [json.loads(out) for out, _err in outputs]
    (run_id,) = {report["runId"] for report in reports}
    assert sum(1 for report in reports if report.get("adopted")) == 3
    assert table(cli.home, "SELECT run_id FROM run_queue") == [(run_id,)]
    assert bundles(cli.home) == [run_id]
    host = cli("host", "--once")
    assert host.returncode == 0, host.stderr
    assert cli.json("inspect", run_id)["finalOutput"] == {"n": 3}


def test_a_detached_run_keeps_its_budget(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = str(make_workflow("short", SHORT))
    queued = cli.json("run", path, "--detach", "--budget", "requests=3")
    (started,) = [line for line in trace_lines(cli.home, queued["runId"]) if line["type"] == "run_started"]
    assert started["payload"]["budget"] == {"modelRequests": 3}  # it was dropped before
