"""A host keeps serving when ``piw.sqlite`` is deleted under it (issue 27 item 4c).

A real ``piw host`` runs one run (stopped inside a step until the test lets it go) while another waits queued;
the test deletes ``piw.sqlite`` and its ``-wal``/``-shm`` files. The host says what happened, recreates the
database with the claim it holds and every unfinished bundle re-queued, and finishes both runs, then a new one:
nothing is left for a manual resume, and nobody is said to "own" a run that nobody else holds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

GATED = """
import time
from pathlib import Path
from piw import action, compute, define_workflow, edge

def wait_for_go(ctx):
    folder = Path(ctx.input["dir"])
    (folder / f"started-{ctx.input['n']}").write_text("x")
    while not (folder / "go").exists():
        time.sleep(0.05)
    return ctx.input["n"]

workflow = define_workflow(
    name="gated", start_at="wait",
    nodes={"wait": action(wait_for_go), "end": compute(lambda ctx: ctx.outputs["wait"])},
    edges=[edge("wait", "end")],
)
"""


class Output:
    """A process's stdout read in the background (so a test can wait for a line)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert process.stdout is not None
        stream = process.stdout
        threading.Thread(target=lambda: self.lines.extend(stream), daemon=True).start()

    def text(self) -> str:
        return "".join(self.lines)


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _completed(cli: Cli, run_id: str) -> bool:
    trace = cli.home / "runs" / run_id / "trace.ndjson"
    return trace.exists() and b'"run_completed"' in trace.read_bytes()


def _queue(cli: Cli, path: Path, data: dict[str, object]) -> str:
    done = cli.process("run", str(path), "--detach", "--json", "--input", json.dumps(data))
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["runId"])


def test_a_deleted_database_is_recreated_and_every_unfinished_run_goes_on(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    path = make_workflow("gated", GATED)
    first = _queue(cli, path, {"dir": str(tmp_path), "n": 1})
    second = _queue(cli, path, {"dir": str(tmp_path), "n": 2})
    host = cli.popen("host")
    output = Output(host)
    try:
        _wait(lambda: (tmp_path / "started-1").exists(), 60, "the first run to start")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{cli.home / 'piw.sqlite'}{suffix}").unlink(missing_ok=True)
        _wait(lambda: "piw.sqlite was deleted" in output.text(), 30, "the host to notice")
        (tmp_path / "go").write_text("go")
        _wait(lambda: _completed(cli, first) and _completed(cli, second), 60, "both runs to complete")
        third = _queue(cli, path, {"dir": str(tmp_path), "n": 3})
        _wait(lambda: _completed(cli, third), 60, "a run queued afterwards to complete")
        text = output.text()
        assert "another process now owns" not in text and "Claim lost" not in text, text
        (notice,) = [line for line in text.splitlines() if "piw.sqlite was deleted" in line]
        assert f"re-queued 1 unfinished run: {second}" in notice and "kept the claim on 1 run" in notice, (
            notice
        )
        statuses = {row["runId"]: row["status"] for row in cli.json("runs")}
        assert statuses == {first: "completed", second: "completed", third: "completed"}
    finally:
        host.send_signal(signal.SIGINT)
        try:
            host.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(host.pid, signal.SIGKILL)
            host.wait()


def test_a_lost_row_is_not_blamed_on_another_process() -> None:
    from piw.errors import ClaimLost

    assert "another process" not in str(ClaimLost("missing"))
    assert "piw.sqlite" in str(ClaimLost("missing"))
    assert str(ClaimLost("expired")) == "Claim lost (expired); another process now owns this run."
