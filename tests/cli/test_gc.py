"""``piw gc`` and ``piw rm``: archive then remove whole runs, bring one back, skip held runs, survive ``kill -9``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.generated import plan_runs, write_home
from tests.support.hosts import wait_for
from tests.support.runs import WorkflowMaker

HELLO = """
from piw import compute, define_workflow
workflow = define_workflow(name="hello", start_at="a", nodes={"a": compute(lambda c: {"hi": c.input.get("who")})})
"""

NAP = """
from piw import action, define_workflow
workflow = define_workflow(name="nap", start_at="a", nodes={"a": action(lambda c: c.sleep(120))})
"""


def bundle_bytes(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "state.json" and not path.name.startswith(".")
    }


def test_gc_export_then_import_gives_back_an_identical_bundle(
    cli: Cli, make_workflow: WorkflowMaker, piw_home: Path, tmp_path: Path
) -> None:
    flow = make_workflow("hello", HELLO)
    first = json.loads(cli("run", str(flow), "--input", '{"who": "a"}', "--json").stdout)["runId"]
    kept = json.loads(cli("run", str(flow), "--input", '{"who": "b"}', "--json").stdout)["runId"]
    before = bundle_bytes(piw_home / "runs" / first)
    inspected = cli.json("inspect", first, "--json")
    archive = tmp_path / "archive"
    done = cli.json("gc", "--older-than", "0s", "--keep-last", "1", "--export", str(archive), "--json")
    assert [item["runId"] for item in done["removed"]] == [first] and done["freedBytes"] > 0
    assert done["removed"][0]["exported"] == str(archive / first)
    assert not (piw_home / "runs" / first).exists()
    assert [row["runId"] for row in cli.json("runs", "--json")] == [kept]
    assert cli("inspect", first).returncode == 2
    brought = cli("import", str(archive / first))
    assert brought.returncode == 0, brought.stderr
    assert bundle_bytes(piw_home / "runs" / first) == before
    assert cli.json("inspect", first, "--json") == inspected
    assert sorted(row["runId"] for row in cli.json("runs", "--json")) == sorted([first, kept])


def test_gc_prints_what_it_removed_and_dry_run_removes_nothing(
    cli: Cli, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    flow = make_workflow("hello", HELLO)
    run_id = json.loads(cli("run", str(flow), "--json").stdout)["runId"]
    dry = cli("gc", "--older-than", "0s", "--dry-run")
    assert dry.returncode == 0 and f"Would remove {run_id} (completed" in dry.stdout
    assert (piw_home / "runs" / run_id).is_dir()
    assert "Removed 0 runs" in cli("gc").stdout  # the default keeps 30 days
    done = cli("gc", "--older-than", "0s", "--status", "completed")
    assert f"Removed {run_id} (completed" in done.stdout and "Removed 1 runs, freed" in done.stdout
    assert cli.json("runs", "--json") == []


def test_a_held_run_is_skipped_and_said_and_rm_refuses_it(
    cli: Cli, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    flow = make_workflow("nap", NAP)
    process = cli.popen("run", str(flow))
    try:
        rows = wait_for(
            lambda: [r for r in cli.json("runs", "--json") if r["currentNode"] == "a"], 60, "the run to start"
        )
        run_id = rows[0]["runId"]  # type: ignore[index]
        refused = cli("rm", run_id, "--yes")
        assert refused.returncode == 2 and f"Run {run_id} is running" in refused.stderr
        skipped = cli("gc", "--older-than", "0s", "--status", "running")
        assert skipped.returncode == 0 and f"Skipped {run_id}: a process holds it" in skipped.stdout
        assert (piw_home / "runs" / run_id / "trace.ndjson").is_file()
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)


def test_rm_asks_for_yes_off_a_terminal_and_removes_whole(
    cli: Cli, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    flow = make_workflow("hello", HELLO)
    run_id = json.loads(cli("run", str(flow), "--json").stdout)["runId"]
    asked = cli("rm", run_id)
    assert asked.returncode == 2 and "--yes" in asked.stderr and (piw_home / "runs" / run_id).is_dir()
    done = cli("rm", run_id[:20], "--yes")
    assert done.returncode == 0 and f"Removed {run_id}" in done.stdout
    assert not (piw_home / "runs" / run_id).exists() and cli.json("runs", "--json") == []


@pytest.mark.long
def test_kill_9_during_gc_leaves_no_half_removed_run_and_gc_again_finishes(cli: Cli, piw_home: Path) -> None:
    write_home(piw_home, plan_runs(600))  # whole bundles, all from May 2026
    runs = piw_home / "runs"
    process = subprocess.Popen(
        [
            *cli_command(),
            "gc",
            "--older-than",
            "1d",
            "--status",
            "completed,failed,cancelled,timed_out,waiting",
        ],
        env=cli.environment(),
        cwd=cli.cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: len(os.listdir(runs)) < 590 or process.poll() is not None, 60, "gc to get going")
    process.kill()
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "gc finished before it was killed: give it more runs"
    left = [name for name in os.listdir(runs) if not name.startswith(".")]
    pending = [name for name in os.listdir(runs) if name.startswith(".gc-")]
    assert 0 < len(left) < 600 and len(pending) <= 1
    for name in left:  # every run still there is whole, and listed
        assert {"trace.ndjson", "workflow.json", "manifest.json"} <= set(os.listdir(runs / name))
    listed = {row["runId"] for row in cli.json("runs", "--json")}
    assert listed == set(left)
    again = cli("gc", "--older-than", "1d", "--status", "completed,failed,cancelled,timed_out,waiting")
    assert again.returncode == 0
    assert all(f"Finished removing {name[4:]}" in again.stdout for name in pending)
    assert os.listdir(runs) == [] and cli.json("runs", "--json") == []


def cli_command() -> list[str]:
    from tests.support.cli import PIW_COMMAND

    return list(PIW_COMMAND)


def test_the_host_applies_retention_once_a_day(
    cli: Cli, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    from piw.run.retention_duty import DAY_MS, RetentionDuty

    flow = make_workflow("hello", HELLO)
    old = json.loads(cli("run", str(flow), "--json").stdout)["runId"]
    (piw_home / "config.toml").write_text('[retention]\nolder_than = "0s"\nstatus = ["completed"]\n')
    lines: list[str] = []
    duty = RetentionDuty(piw_home, lines.append)
    now = int(time.time() * 1000) + 1000
    assert duty.tick(now) and not (piw_home / "runs" / old).exists()
    assert any(f"Removed {old}" in line for line in lines)
    newer = json.loads(cli("run", str(flow), "--json").stdout)["runId"]
    assert not duty.tick(now + DAY_MS - 1)  # not twice a day, even from a new host (the stamp is on disk)
    assert not RetentionDuty(piw_home, lines.append).tick(now + 60_000)
    assert (piw_home / "runs" / newer).exists()
    assert duty.tick(now + DAY_MS + 1) and not (piw_home / "runs" / newer).exists()


def test_a_bad_retention_table_is_one_line_naming_the_key(cli: Cli, piw_home: Path) -> None:
    (piw_home / "config.toml").write_text('[retention]\nolder_than = "soon"\n')
    done = cli("providers")
    assert done.returncode != 0 and "retention.older_than" in done.stderr
