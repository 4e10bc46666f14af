"""``piw new NAME [--dynamic]`` and the refusal of a second detached start of a live run (issue 35 item 4,
``docs/dynamic-workflows.md``, ``docs/cli.md``)."""

from __future__ import annotations

import json
from pathlib import Path

from piw.testing import OpenAIStub
from tests.support.agent_harness import home, piw_cli, piw_process, write_stub_config
from tests.support.scripts import LeafStub

__all__ = ["home"]


def test_new_dynamic_writes_a_script_that_validates_and_runs_on_the_stub(home: Path, tmp_path: Path) -> None:
    made = piw_cli(home, "new", "review", "--dynamic", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    path = tmp_path / "review.workflow.py"
    assert f"Wrote {path}" in made.stdout and "script(main" in path.read_text(encoding="utf-8")
    checked = piw_cli(home, "validate", str(path), "--input", '{"items": ["b", "a"]}')
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "leaves per phase: draft 4, verify 2, synthesis 1" in checked.stdout
    leaves = LeafStub()
    with OpenAIStub() as stub:
        stub.respond = leaves
        write_stub_config(home, stub)
        ran = piw_cli(home, "run", str(path), "--input", '{"items": ["b", "a"]}', "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert sum(leaves.asked.values()) == 7 and set(leaves.asked.values()) == {1}
    assert set(json.loads(ran.stdout)["finalOutput"]) == {"summary", "notes", "checks"}
    again = piw_cli(home, "new", "review", "--dynamic", "--dir", str(tmp_path))
    assert again.returncode != 0 and "already exists" in again.stderr and "script(main" in path.read_text()


def test_new_without_dynamic_writes_one_agent_that_validates(home: Path, tmp_path: Path) -> None:
    made = piw_cli(home, "new", "hello", "--dir", str(tmp_path), "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout) == {
        "path": str(tmp_path / "hello.workflow.py"),
        "name": "hello",
        "dynamic": False,
    }
    assert piw_cli(home, "validate", str(tmp_path / "hello.workflow.py")).returncode == 0
    bad = piw_cli(home, "new", "no good", "--dir", str(tmp_path))
    assert bad.returncode == 2 and "must match" in bad.stderr


def test_a_second_detached_start_of_a_live_run_is_refused_unless_allowed(home: Path, tmp_path: Path) -> None:
    assert piw_cli(home, "new", "review", "--dynamic", "--dir", str(tmp_path)).returncode == 0
    path = str(tmp_path / "review.workflow.py")
    same = '{"items": ["a", "b"]}'
    with OpenAIStub() as stub:
        write_stub_config(home, stub)
        first = piw_cli(home, "run", path, "--input", same, "--detach", "--json")
        assert first.returncode == 0, first.stderr
        live = json.loads(first.stdout)["runId"]
        second = piw_cli(home, "run", path, "--input", same, "--detach")
        assert second.returncode == 1
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and live in lines[0] and "--allow-duplicate" in lines[0]
        assert "still live (queued)" in lines[0]
        assert len(json.loads(piw_cli(home, "runs", "--json").stdout)) == 1  # nothing was started
        other = piw_cli(home, "run", path, "--input", '{"items": ["c"]}', "--detach")
        assert other.returncode == 0, other.stderr  # another input is another run
        allowed = piw_cli(home, "run", path, "--input", same, "--detach", "--allow-duplicate", "--json")
        assert allowed.returncode == 0, allowed.stderr
        assert json.loads(allowed.stdout)["runId"] != live
        foreground = piw_cli(home, "run", path, "--input", same, "--allow-duplicate")
        assert foreground.returncode == 2 and "only applies to --detach" in foreground.stderr
        for run in json.loads(piw_cli(home, "runs", "--json").stdout):
            assert piw_cli(home, "cancel", run["runId"]).returncode == 0
        after = piw_cli(home, "run", path, "--input", same, "--detach")
        assert after.returncode == 0, after.stderr  # no live run of it is left
    assert stub.request_count == 0


def test_an_interrupted_run_of_the_same_file_and_input_does_not_refuse_a_detached_start(
    home: Path, tmp_path: Path
) -> None:
    """A run killed mid-way is interrupted, not live: nothing runs it until 'piw resume', so a new start goes on."""
    assert piw_cli(home, "new", "review", "--dynamic", "--dir", str(tmp_path)).returncode == 0
    path = str(tmp_path / "review.workflow.py")
    same = '{"items": ["a"]}'
    with OpenAIStub() as stub:
        write_stub_config(home, stub)
        killed = piw_process(home, "run", path, "--input", same, env={"PIW_TEST_KILL_AFTER_APPEND": "2"})
        assert killed.returncode == -9
        (row,) = json.loads(piw_cli(home, "runs", "--json").stdout)
        assert "running (interrupted)" in piw_cli(home, "runs").stdout
        started = piw_cli(home, "run", path, "--input", same, "--detach", "--json")
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["runId"] != row["runId"]
