"""A host stopped (``SIGSTOP``) past its lease does not block its run for ever (issue 27 item 3).

Two real ``piw host`` processes on one machine, with a short test-only lease (``PIW_TEST_LEASE_MS``). Host A claims
the run and is stopped inside a step; its lease expires on the database clock, host B claims the run, finds A still
holding the bundle's writer lock, stops A for good (same machine, same boot, pid and start time as recorded) and
completes the run within lease + one renewal interval + 5 s. A, continued afterwards, writes nothing and starts no
effect.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

LEASE_MS = 3_000
RENEW_MS = LEASE_MS // 3

SLOW_ONCE = """
import time
from pathlib import Path
from piw import action, compute, define_workflow, edge

def slow(ctx):
    attempts = Path(ctx.input["dir"]) / "attempts"
    with attempts.open("a") as handle:
        handle.write("x")
    if len(attempts.read_text()) == 1:
        time.sleep(120)  # the first attempt (host A) is stopped in here
    return 1

def effect(ctx):
    with (Path(ctx.input["dir"]) / "effects").open("a") as handle:
        handle.write("effect\\n")
    return 2

workflow = define_workflow(
    name="slow-once", start_at="slow",
    nodes={"slow": action(slow), "effect": action(effect), "end": compute(lambda ctx: 3)},
    edges=[edge("slow", "effect"), edge("effect", "end")],
)
"""


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _status(cli: Cli, run_id: str, env: dict[str, str]) -> str:
    done = cli.process("runs", "--json", env=env)
    return {row["runId"]: row["status"] for row in json.loads(done.stdout or "[]")}.get(run_id, "")


@pytest.mark.long
def test_a_stopped_holder_is_taken_over_within_lease_and_renewal(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    env = {"PIW_TEST_LEASE_MS": str(LEASE_MS)}
    path = make_workflow("slow-once", SLOW_ONCE)
    queued = cli.process(
        "run", str(path), "--detach", "--json", "--input", json.dumps({"dir": str(tmp_path)}), env=env
    )
    assert queued.returncode == 0, queued.stderr
    run_id = json.loads(queued.stdout)["runId"]
    attempts, effects = tmp_path / "attempts", tmp_path / "effects"
    host_a = cli.popen("host", env=env)
    host_b: subprocess.Popen[str] | None = None
    try:
        _wait(lambda: attempts.exists() and attempts.read_text() == "x", 60, "host A to start the slow step")
        host_b = cli.popen("host", env=env)
        time.sleep(1.0)  # B is up and polling (A's lease is live: nothing to claim yet)
        assert host_b.poll() is None
        os.kill(host_a.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        limit = (LEASE_MS + RENEW_MS) / 1000 + 5
        _wait(lambda: _status(cli, run_id, env) == "completed", limit + 20, "the run to complete on host B")
        took = time.monotonic() - stopped_at
        print(f"takeover: the run completed {took:.1f}s after host A was stopped")
        assert took <= limit, f"took {took:.1f}s, more than lease + renewal + 5 s ({limit:.1f}s)"
        assert attempts.read_text() == "xx" and effects.read_text() == "effect\n"  # the effect ran once, on B
        trace = (cli.home / "runs" / run_id / "trace.ndjson").read_bytes()
        os.kill(host_a.pid, signal.SIGCONT)  # if A is still there, it must write nothing now
        time.sleep(2.0)
        assert (cli.home / "runs" / run_id / "trace.ndjson").read_bytes() == trace
        assert attempts.read_text() == "xx" and effects.read_text() == "effect\n"
        assert _status(cli, run_id, env) == "completed"
    finally:
        for process in (host_a, host_b):
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
