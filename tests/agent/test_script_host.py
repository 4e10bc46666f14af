"""A script under real ``piw host`` processes (issue 35, ``docs/dynamic-workflows.md``): killed -9 at points of
the run and restarted, it ends with a final output byte-identical to an uninterrupted run's, no committed leaf is
asked again, and a second host started alongside a live one sends no request at all.

The gate kills once, mid-parallel, with 2 items (7 leaves). The whole matrix (mid-pipeline, mid-parallel,
mid-synthesis, and two and three kills in one run, 4 items: 13 leaves) is marked ``long``: ``.ci/run``'s long
phase runs it (``PIW_LONG=1 python -m pytest -q -m long tests/agent/test_script_host.py`` runs it alone).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from piw.testing import OpenAIStub
from tests.agent.test_script import expected_final
from tests.support.agent_harness import home, only_run, piw_cli, write_stub_config
from tests.support.hosts import HostProcess, wait_for
from tests.support.scripts import LeafStub, three_phase_workflow

__all__ = ["home"]

N = 2
"""Items of the three-phase script in the gate's tests (7 leaves); the long matrix runs 4."""

Point = Callable[[LeafStub, str], bool]
POINTS: dict[str, Point] = {
    # the second stage-2 request of the pipeline, while other items are still in stage 1 or 2
    "mid-pipeline": lambda leaves, task: task.startswith("Write") and _asked(leaves, "Write") == 2,
    # the second verifier, with others of the fan-out in flight
    "mid-parallel": lambda leaves, task: task.startswith("Verify") and _asked(leaves, "Verify") == 2,
    # the one synthesis leaf, after every verifier is committed
    "mid-synthesis": lambda leaves, task: task.startswith("Synthesise"),
}
SINGLE = [("mid-pipeline",), ("mid-parallel",), ("mid-synthesis",)]
SEVERAL = [("mid-parallel", "mid-synthesis"), ("mid-pipeline", "mid-parallel", "mid-synthesis")]
MATRIX = [
    pytest.param(("mid-parallel",), N, id="gate-mid-parallel"),
    *(pytest.param(kills, 4, id="+".join(kills), marks=pytest.mark.long) for kills in [*SINGLE, *SEVERAL]),
]


def _asked(leaves: LeafStub, prefix: str) -> int:
    return sum(n for task, n in leaves.asked.items() if task.startswith(prefix))


def trace_lines(run_dir: Path) -> list[str]:
    return (run_dir / "trace.ndjson").read_text(encoding="utf-8").splitlines()


def committed_prompts(run_dir: Path) -> set[str]:
    """The leaf prompts whose results are in the trace (each answer is ``<prompt>``)."""
    prompts = set()
    for line in trace_lines(run_dir):
        event = json.loads(line)
        if event["type"] == "child_step_finished" and event["payload"]["outcome"] == "ok":
            prompts.add(event["payload"]["output"]["answer"][1:-1])
    return prompts


def final_output_bytes(run_dir: Path) -> bytes | None:
    """The final output exactly as the trace records it: the bytes of ``finalOutput``'s value on the
    ``run_completed`` line, cut out of the line (never re-encoded)."""
    decoder = json.JSONDecoder()
    for line in trace_lines(run_dir):
        if '"type":"run_completed"' not in line.replace(" ", ""):
            continue
        start = line.index('"finalOutput"')
        start = line.index(":", start) + 1
        while line[start] == " ":
            start += 1
        _value, end = decoder.raw_decode(line, start)
        return line[start:end].encode("utf-8")
    return None


def uninterrupted_bytes(tmp_path: Path, workflow: Path, n: int) -> bytes:
    """The final output bytes of the same script run in one go (its own home, the same file and input)."""
    reference = tmp_path / "reference-home"
    reference.mkdir()
    with OpenAIStub() as stub:
        stub.respond = LeafStub()
        write_stub_config(reference, stub)
        ran = piw_cli(reference, "run", str(workflow), "--input", json.dumps({"n": n}), "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    found = final_output_bytes(only_run(reference).bundle)
    assert found is not None
    return found


@pytest.mark.parametrize(("kills", "n"), MATRIX)
def test_a_script_killed_and_restarted_ends_with_the_same_output_bytes(
    home: Path, tmp_path: Path, kills: tuple[str, ...], n: int
) -> None:
    workflow = three_phase_workflow(tmp_path / "wf")
    reference = uninterrupted_bytes(tmp_path, workflow, n)
    hosts: list[HostProcess] = []
    pending = list(kills)
    lock = threading.Lock()

    def maybe_kill(task: str, _count: int) -> None:
        with lock:
            if pending and POINTS[pending[0]](leaves, task):
                pending.pop(0)
                os.kill(hosts[-1].pid, signal.SIGKILL)

    leaves = LeafStub(maybe_kill)
    with OpenAIStub() as stub:
        stub.respond = leaves
        write_stub_config(home, stub)
        queued = piw_cli(home, "run", str(workflow), "--detach", "--input", json.dumps({"n": n}), "--json")
        assert queued.returncode == 0, queued.stderr
        run_dir = only_run(home).bundle
        snapshots: list[tuple[set[str], dict[str, int]]] = []
        try:
            for round_ in range(len(kills)):
                host = HostProcess(f"h{round_}", home).start()
                hosts.append(host)
                wait_for(
                    lambda h=host: h.process is not None and h.process.poll() is not None, 90, "the kill"
                )
                snapshots.append((committed_prompts(run_dir), dict(leaves.asked)))
            hosts.append(HostProcess(f"h{len(kills)}", home).start())
            final = wait_for(lambda: final_output_bytes(run_dir), 120, "the run to complete")
        finally:
            for host in hosts:
                host.kill()
    assert not pending, f"kill points not reached: {pending}"
    assert final == reference
    assert json.loads(final) == expected_final(n)
    for committed, asked_then in snapshots:
        assert committed, "the kill came after some leaves were committed"
        for prompt in committed:
            assert leaves.asked[prompt] == asked_then[prompt], f"{prompt!r} was asked again"


HELD = "Verify <Write from <Outline part 1.>.>."


def first_line(host: HostProcess, timeout: float = 60) -> str:
    """The host's first stdout line (``piw host: claiming queued runs in …`` once its loop runs), read with a
    bounded wait."""
    process = host.process
    assert process is not None and process.stdout is not None
    stdout = process.stdout
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return got[0] if got else ""


def test_a_second_host_started_alongside_sends_no_request_for_a_claimed_run(
    home: Path, tmp_path: Path
) -> None:
    """Each host sends its own API key (``$STUB_KEY``), so the stub knows which host asked for each leaf."""
    workflow = three_phase_workflow(tmp_path / "wf")
    release = threading.Event()
    leaves = LeafStub(lambda task, _count: release.wait(60) if task == HELD else None)
    hosts: list[HostProcess] = []
    with OpenAIStub() as stub:
        stub.respond = leaves
        write_stub_config(home, stub, model='models = ["m"]\napi_key = "$STUB_KEY"')
        queued = piw_cli(
            home, "run", str(workflow), "--detach", "--input", json.dumps({"n": N}), env={"STUB_KEY": "cli"}
        )
        assert queued.returncode == 0, queued.stderr
        run_dir = only_run(home).bundle
        try:
            hosts.append(HostProcess("first", home, env={"STUB_KEY": "first"}).start())
            wait_for(lambda: leaves.asked[HELD], 90, "the first host to be mid-parallel")
            hosts.append(HostProcess("second", home, env={"STUB_KEY": "second"}).start())

            assert "claiming queued runs" in first_line(hosts[-1]), "the second host is looking for work"
            # two and a half lease terms (2 s each in tests): a claim the first host did not renew would pass
            threading.Event().wait(5)
        finally:
            release.set()
        try:
            final = wait_for(lambda: final_output_bytes(run_dir), 120, "the run to complete")
        finally:
            for host in hosts:
                host.kill()
        senders = {
            headers.get("authorization", headers.get("Authorization")) for headers in stub.request_headers
        }
    assert json.loads(final) == expected_final(N)
    assert senders == {"Bearer first"}
    assert sum(leaves.asked.values()) == 3 * N + 1 and set(leaves.asked.values()) == {1}
