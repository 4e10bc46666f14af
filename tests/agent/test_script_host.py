"""A script under a real ``piw host`` killed -9 mid-parallel and mid-synthesis, then restarted (issue 35): the
final output is byte-identical to an uninterrupted run's and no committed leaf is asked again."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from piw.testing import OpenAIStub
from tests.agent.test_script import N, expected_final
from tests.support.agent_harness import home, only_run, piw_cli, write_stub_config
from tests.support.hosts import HostProcess, wait_for
from tests.support.scripts import LeafStub, three_phase_workflow

__all__ = ["home"]


def committed_prompts(run_dir: Path) -> set[str]:
    """The leaf prompts whose results are in the trace (each answer is ``<prompt>``)."""
    prompts = set()
    for line in (run_dir / "trace.ndjson").read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event["type"] == "child_step_finished" and event["payload"]["outcome"] == "ok":
            prompts.add(event["payload"]["output"]["answer"][1:-1])
    return prompts


def ended(run_dir: Path) -> dict[str, Any] | None:
    for line in (run_dir / "trace.ndjson").read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event["type"] == "run_completed":
            return dict(event["payload"])
    return None


def test_a_script_killed_mid_parallel_and_mid_synthesis_ends_with_the_same_output(
    home: Path, tmp_path: Path
) -> None:
    workflow = three_phase_workflow(tmp_path / "wf")
    hosts: list[HostProcess] = []
    kills: list[str] = []

    def maybe_kill(task: str, _count: int) -> None:
        verifies = sum(n for t, n in leaves.asked.items() if t.startswith("Verify"))
        first_kill = not kills and task.startswith("Verify") and verifies == 2
        second_kill = len(kills) == 1 and task.startswith("Synthesise")
        if first_kill or second_kill:
            kills.append(task)
            os.kill(hosts[-1].pid, signal.SIGKILL)

    leaves = LeafStub(maybe_kill)
    with OpenAIStub() as stub:
        stub.respond = leaves
        write_stub_config(home, stub)
        queued = piw_cli(home, "run", str(workflow), "--detach", "--input", json.dumps({"n": N}), "--json")
        assert queued.returncode == 0, queued.stderr
        run_dir = only_run(home).bundle
        snapshots: list[tuple[set[str], dict[str, int]]] = []
        for round_ in range(3):
            host = HostProcess(f"h{round_}", home).start()
            hosts.append(host)
            if round_ < 2:
                wait_for(
                    lambda h=host: h.process is not None and h.process.poll() is not None, 90, "the kill"
                )
                snapshots.append((committed_prompts(run_dir), dict(leaves.asked)))
        try:
            result = wait_for(lambda: ended(run_dir), 120, "the run to complete")
        finally:
            hosts[-1].kill()
    assert len(kills) == 2
    assert result["finalOutput"] == expected_final()
    for committed, asked_then in snapshots:
        assert committed, "the kill came after some leaves were committed"
        for prompt in committed:
            assert leaves.asked[prompt] == asked_then[prompt], f"{prompt!r} was asked again"
