"""A script seen while it runs (issue 35 item 5, ``docs/dynamic-workflows.md``): progress per phase in
``piw inspect``, its leaves as step cards in ``--view steps``, and the phase in ``piw runs``, all read back from the
trace while a real ``piw host`` runs the script against the loopback stub."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from piw.testing import OpenAIStub
from tests.agent.test_script import N
from tests.support.agent_harness import home, only_run, piw_cli, write_stub_config
from tests.support.hosts import HostProcess, wait_for
from tests.support.scripts import LeafStub, three_phase_workflow

__all__ = ["home"]

HELD = ("Verify <Write from <Outline part 0.>.>.", "Verify <Write from <Outline part 3.>.>.")
"""Two verifiers the stub holds until the test has looked: the verify phase then has 2 done and 2 running."""


def test_a_running_script_shows_its_phases_leaves_and_current_phase(home: Path, tmp_path: Path) -> None:
    workflow = three_phase_workflow(tmp_path / "wf")
    release = threading.Event()

    def hold(task: str, _count: int) -> None:
        if task in HELD:
            release.wait(60)

    leaves = LeafStub(hold)
    host = None
    with OpenAIStub() as stub:
        stub.respond = leaves
        write_stub_config(home, stub)
        queued = piw_cli(home, "run", str(workflow), "--detach", "--input", json.dumps({"n": N}))
        assert queued.returncode == 0, queued.stderr
        run_id = only_run(home).run_id
        try:
            host = HostProcess("h1", home).start()

            def inspect(*args: str) -> str:
                result = piw_cli(home, "inspect", run_id, *args)
                assert result.returncode == 0, result.stderr
                return result.stdout

            def held() -> str:
                out = inspect()
                return out if "2/4 leaves · 2 running" in out else ""

            state = str(wait_for(held, 90, "two verifiers done and two held"))
            assert "phases    ✓ draft  8/8 leaves" in state
            assert "▶ verify  2/4 leaves · 2 running · ETA " in state
            steps = inspect("--view", "steps")
            assert "phase draft · 8/8 leaves" in steps
            assert "phase verify · 2/4 leaves · 2 running" in steps
            assert "✓ orchestrate › draft/outline-write.0/1-outline/outline" in steps
            assert "✓ orchestrate › verify/verify.1/verify" in steps
            assert "verify/verify.0/verify" not in steps  # still asking: no card until it is done

            def listed() -> list[dict[str, object]]:
                rows = json.loads(piw_cli(home, "runs", "--json").stdout)
                return [row for row in rows if row["currentPhase"] == "verify"]

            row = wait_for(listed, 30, "piw runs to show the verify phase")[0]  # type: ignore[index]
            assert row["currentNode"] == "orchestrate"
            assert "orchestrate › verify" in piw_cli(home, "runs", env={"COLUMNS": "200"}).stdout
        finally:
            release.set()
        wait_for(lambda: "✓ completed" in inspect(), 90, "the run to complete")
        if host is not None:
            host.kill()
    done = inspect()
    assert "✓ verify  4/4 leaves" in done and "✓ synthesis  1/1 leaves" in done
    assert json.loads(piw_cli(home, "runs", "--json").stdout)[0]["currentPhase"] is None
