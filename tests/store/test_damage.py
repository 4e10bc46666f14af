"""Damaged bundles tell the truth: artifacts are verified, JSON carries the damage, resume reads the trace only.

Each test damages a real run on disk the way a bad disk, an editor or a stray ``rm`` would, then checks every
reader and writer through the command line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

BIG = """
from piw import action, compute, define_workflow, edge

def big(ctx):
    return {"text": "x" * 5000}

def use(ctx):
    return {"length": len(ctx.outputs["big"]["text"])}

workflow = define_workflow(
    name="big", start_at="big",
    nodes={"big": compute(big), "mid": action(lambda c: 1), "use": compute(use)},
    edges=[edge("big", "mid"), edge("mid", "use")],
)
"""
# trace: 1 run_started, 2/3 big, 4/5 mid, 6/7 use, 8 run_completed


def bundle(cli: Cli, run_id: str) -> Path:
    return cli.home / "runs" / run_id


def crash_after(cli: Cli, path: Path, seq: int) -> str:
    done = cli.process("run", str(path), env={"PIW_TEST_KILL_AFTER_APPEND": str(seq)})
    assert done.returncode == -9, done.stderr
    return sorted(p.name for p in (cli.home / "runs").iterdir() if not p.name.startswith("."))[-1]


def artifact_of(cli: Cli, run_id: str) -> Path:
    (artifact,) = (bundle(cli, run_id) / "artifacts").iterdir()
    return artifact


@pytest.fixture
def big(make_workflow: WorkflowMaker) -> Path:
    return make_workflow("big", BIG)


# ---- 5: artifacts are checked ------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_resume_refuses_a_run_whose_artifact_is_damaged_naming_it(damage: str, cli: Cli, big: Path) -> None:
    run_id = crash_after(cli, big, 5)
    artifact = artifact_of(cli, run_id)
    if damage == "changed":
        artifact.write_text("y" * 5000, encoding="utf-8")  # same size, other content
    else:
        artifact.unlink()
    trace_before = (bundle(cli, run_id) / "trace.ndjson").read_bytes()
    done = cli("resume", run_id)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("Error: ") and len(done.stderr.splitlines()) == 1, done.stderr
    assert "damaged" in done.stderr and artifact.name in done.stderr
    assert ("missing" if damage == "missing" else "sha256") in done.stderr
    assert "Traceback" not in done.stderr
    assert (bundle(cli, run_id) / "trace.ndjson").read_bytes() == trace_before  # nothing written


def test_inspect_reports_a_damaged_artifact(cli: Cli, big: Path) -> None:
    done = cli("run", str(big), "--json")
    run_id = json.loads(done.stdout)["runId"]
    artifact = artifact_of(cli, run_id)
    artifact.write_text("tampered", encoding="utf-8")
    state = cli.json("inspect", run_id)
    assert state["damage"]["file"] == f"artifacts/{artifact.name}"
    assert "sha256" in state["damage"]["notice"]
    human = cli("inspect", run_id)
    assert human.returncode == 0 and "⚠ artifact artifacts/sha256-" in human.stdout
    assert human.stderr == f"Warning: {state['damage']['notice']}\n" and artifact.name in human.stderr


def test_a_damaged_artifact_is_never_reused_by_a_new_write(cli: Cli, big: Path) -> None:
    run_id = crash_after(cli, big, 5)
    artifact = artifact_of(cli, run_id)
    artifact.write_text("y" * 5000, encoding="utf-8")
    from piw.store.artifacts import ArtifactStore

    ref = ArtifactStore(bundle(cli, run_id)).write("x" * 5000)  # the same text again: dedup must check it
    assert artifact.read_text(encoding="utf-8") == "x" * 5000 and ref["path"] == f"artifacts/{artifact.name}"


# ---- 6: JSON tells the truth about damage ------------------------------------------------------------------


def damage_line(cli: Cli, run_id: str, number: int) -> None:
    trace = bundle(cli, run_id) / "trace.ndjson"
    lines = trace.read_bytes().splitlines(keepends=True)
    lines[number - 1] = b'{"seq": 3, "oops\n'
    trace.write_bytes(b"".join(lines))


def test_inspect_json_carries_the_damage_and_the_readable_prefix(cli: Cli, big: Path) -> None:
    run_id = json.loads(cli("run", str(big), "--json").stdout)["runId"]
    damage_line(cli, run_id, 5)
    state = cli.json("inspect", run_id)
    assert state["status"] == "running" and state["traceSeq"] == 4
    assert state["damage"] == {
        "file": "trace.ndjson",
        "line": 5,
        "readableLines": 4,
        "notice": "trace.ndjson line 5 is damaged; showing the 4 lines before it.",
    }


def test_runs_json_carries_the_damage_instead_of_the_manifest_status(cli: Cli, big: Path) -> None:
    run_id = json.loads(cli("run", str(big), "--json").stdout)["runId"]
    damage_line(cli, run_id, 5)
    (row,) = cli.json("runs")
    assert row["runId"] == run_id and row["status"] == "running"  # what the readable prefix says
    assert row["damage"]["line"] == 5 and row["damage"]["readableLines"] == 4
    assert "damaged" in row["damage"]["notice"]
    human = cli("runs")
    assert "damaged" in human.stdout and "piw resume" not in human.stdout  # damaged, not merely interrupted


def test_an_intact_run_has_a_null_damage(cli: Cli, big: Path) -> None:
    run_id = json.loads(cli("run", str(big), "--json").stdout)["runId"]
    (row,) = cli.json("runs")
    assert row["runId"] == run_id and row["damage"] is None
    assert "damage" not in cli.json("inspect", run_id)


def test_resume_decides_from_the_trace_not_a_forged_state_json(cli: Cli, big: Path) -> None:
    run_id = crash_after(cli, big, 5)
    state_path = bundle(cli, run_id) / "state.json"
    forged = json.loads(state_path.read_text(encoding="utf-8"))
    forged.update(status="completed", finishedAt=forged["updatedAt"], finalOutput={"forged": True})
    state_path.write_text(json.dumps(forged), encoding="utf-8")
    done = cli("resume", run_id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == {"length": 5000}


def test_a_lost_manifest_does_not_hide_an_intact_run(cli: Cli, big: Path) -> None:
    finished = json.loads(cli("run", str(big), "--json").stdout)["runId"]
    crashed = crash_after(cli, big, 5)
    for run_id in (finished, crashed):
        (bundle(cli, run_id) / "manifest.json").unlink()
    rows = {row["runId"]: row for row in cli.json("runs")}
    assert rows[finished]["status"] == "completed" and rows[finished]["workflowName"] == "big"
    assert rows[crashed]["status"] == "running"
    assert cli.json("inspect", finished)["status"] == "completed"
    done = cli("resume", crashed, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    manifest = json.loads((bundle(cli, crashed) / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "completed" and manifest["runId"] == crashed  # rebuilt from the trace


# ---- 10: smaller holes -------------------------------------------------------------------------------------


def test_repair_of_a_cut_inside_run_completed_reports_truncated_bytes(cli: Cli, big: Path) -> None:
    run_id = json.loads(cli("run", str(big), "--json").stdout)["runId"]
    trace = bundle(cli, run_id) / "trace.ndjson"
    data = trace.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    cut = last + (len(data) - last) // 2
    trace.write_bytes(data[:cut])  # the run_completed line is torn in the middle
    done = cli("resume", run_id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    lines: list[dict[str, Any]] = trace_lines(cli.home, run_id)
    resumed = [line for line in lines if line["type"] == "run_resumed"]
    assert len(resumed) == 1 and resumed[0]["payload"]["truncatedBytes"] == cut - last
    assert lines[-1]["type"] == "run_completed"


def test_a_run_killed_before_run_started_is_set_aside(cli: Cli, big: Path) -> None:
    done = cli.process("run", str(big), env={"PIW_TEST_KILL_BEFORE_APPEND": "1"})
    assert done.returncode == -9
    (left,) = (cli.home / "runs").iterdir()
    assert not left.name.startswith(".")
    assert cli.json("runs") == []  # readers skip an incomplete bundle
    inspect = cli("inspect", left.name)
    assert inspect.returncode == 2 and "never started" in inspect.stderr
    # The next writer on this home moves it aside (once it is old enough that no creator can still be filling
    # it), so it is neither lost nor left among the runs.
    old = time.time() - 3600
    os.utime(left, (old, old))
    assert cli("run", str(big), "--json").returncode == 0
    names = sorted(p.name for p in (cli.home / "runs").iterdir())
    assert any(name.startswith(f".incomplete-{left.name}-") for name in names)
    assert left.name not in names and len(cli.json("runs")) == 1
