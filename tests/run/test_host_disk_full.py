"""A host survives a full disk: it parks the run that hit it, keeps serving, and resumes it once there is space
(issue 27 item 7).

The home is a small tmpfs (root and mount(8), as ``tests/test_home_faults.py``): a run writing more than fits fills
it for real. A real ``piw host`` parks that run with the reason ``disk full`` (``piw runs`` shows it), stays up,
retries after a back-off (``PIW_DISK_FULL_RETRY_S``, short here), and completes the run, and the one queued after
it, once the tmpfs is grown; the run's effect happens exactly once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.disks import CAN_MOUNT, FILL, mount, unmount
from tests.support.runs import WorkflowMaker


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.skipif(not CAN_MOUNT, reason="needs root and mount(8) for a small tmpfs")
@pytest.mark.long
def test_a_host_parks_a_run_on_a_full_disk_keeps_serving_and_resumes_it(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if not mount("-t", "tmpfs", "-o", "size=1500k", "tmpfs", str(disk)):
        pytest.skip("cannot mount a tmpfs")
    host: subprocess.Popen[str] | None = None
    try:
        path = make_workflow("fill", FILL)
        log = tmp_path / "effects.log"
        env = {"PIW_HOME": str(disk / "home"), "PIW_DISK_FULL_RETRY_S": "4"}
        queued = cli.process(
            "run", str(path), "--detach", "--json", "--input", json.dumps({"log": str(log)}), env=env
        )
        assert queued.returncode == 0, queued.stderr
        fill = json.loads(queued.stdout)["runId"]
        small = json.loads(cli.process("run", "hello", "--detach", "--json", env=env).stdout)["runId"]
        host = cli.popen("host", env=env)

        def listed() -> dict[str, dict[str, object]]:
            done = cli.process("runs", "--json", env=env)
            return {row["runId"]: row for row in json.loads(done.stdout or "[]")}

        def parked_full() -> bool:
            return "parked: disk full" in cli.process("runs", env=env).stdout

        _wait(parked_full, 90, "the full run to be parked with 'disk full'")
        time.sleep(3)  # a few back-offs: the host retries, finds the disk still full, and stays up
        assert host.poll() is None, host.communicate()
        assert not log.exists()  # the action after the blobs never ran
        assert mount("-o", "remount,size=20m", str(disk))  # space again
        _wait(
            lambda: {row.get("status") for row in listed().values()} == {"completed"},
            90,
            "both runs to complete",
        )
        assert set(listed()) == {fill, small}
        assert log.read_text() == "act\n"  # exactly once
        assert host.poll() is None  # still serving
    finally:
        if host is not None and host.poll() is None:
            host.send_signal(signal.SIGINT)
            try:
                host.wait(timeout=30)
            except subprocess.TimeoutExpired:
                host.kill()
                host.wait()
        unmount(disk)
