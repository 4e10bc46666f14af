"""No orphaned side effects: a shell step's process group never runs next to its resumed rerun.

Real processes: piw is SIGKILLed while a shell command (and a grandchild in its group) runs; the command
survives piw, as a session leader does. ``piw resume`` must stop that group before the node reruns, and the
rerun proves it by looking for the first run's processes when it starts.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from piw.run.process_groups import group_record, same_group, stop_group
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

COMMAND = r"""
import os, subprocess, sys, time
from pathlib import Path

pids, flag = Path(sys.argv[1]), Path(sys.argv[2])

def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")

earlier = [int(p) for p in pids.read_text().split()] if pids.exists() else []
if any(alive(pid) for pid in earlier):
    flag.write_text("ran alongside " + " ".join(str(p) for p in earlier if alive(p)))
if earlier:
    print("rerun")
    sys.exit(0)
child = subprocess.Popen(["sleep", "60"])  # a grandchild in the same group
pids.write_text(f"{os.getpid()} {child.pid}\n")
while True:
    time.sleep(0.05)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to see the survivors")
def test_resume_after_kill_9_stops_the_survivor_before_the_node_reruns(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    script = tmp_path / "command.py"
    script.write_text(COMMAND, encoding="utf-8")
    pids, flag = tmp_path / "pids", tmp_path / "flag"
    path = make_workflow(
        "deploy",
        f"""
import sys
from piw import define_workflow, shell
workflow = define_workflow(name="deploy", start_at="cmd", nodes={{"cmd": shell(
    {{"command": sys.executable, "args": [{str(script)!r}, {str(pids)!r}, {str(flag)!r}]}})}})
""",
    )
    process = cli.popen("run", str(path))
    deadline = time.monotonic() + 30
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.02)
    leader, grandchild = (int(pid) for pid in pids.read_text().split())
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=20)
    try:
        time.sleep(0.2)
        assert alive(leader) and alive(grandchild)  # the group outlives piw: this is what resume must handle
        run_id = next(p.name for p in (cli.home / "runs").iterdir())
        started = time.monotonic()
        done = cli.process("resume", run_id, "--json")
        print(f"resume took {time.monotonic() - started:.2f}s")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["finalOutput"]["stdout"] == "rerun\n"
        assert not flag.exists(), flag.read_text()
        assert not alive(leader) and not alive(grandchild)
        lines = trace_lines(cli.home, run_id)
        record = next(line for line in lines if line["type"] == "process_started")
        assert record["payload"]["pid"] == leader and record["payload"]["pgid"] == leader
        resumed = next(line for line in trace_lines(cli.home, run_id) if line["type"] == "run_resumed")
        assert resumed["payload"]["killedProcessGroup"] == {"pid": leader, "pgid": leader}
    finally:
        for pid in (leader, grandchild):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.long
def test_a_kill_before_the_record_commits_means_the_command_never_runs(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    path = make_workflow(
        "gate",
        f"""
import sys
from piw import define_workflow, shell
workflow = define_workflow(name="gate", start_at="cmd", nodes={{"cmd": shell(
    {{"command": sys.executable, "args": ["-c", "open({str(marker)!r}, 'a').write('x')"]}})}})
""",
    )
    # seq 1 run_started, 2 node_started, 3 process_started: die right after writing it, before the gate opens
    done = cli.process("run", str(path), env={"PIW_TEST_KILL_AFTER_APPEND": "3"})
    assert done.returncode == -9
    time.sleep(0.3)
    assert not marker.exists()
    run_id = next(p.name for p in (cli.home / "runs").iterdir())
    resumed = cli.process("resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert marker.read_text() == "x"  # exactly once: by the rerun


def test_a_recorded_group_is_only_stopped_while_it_is_the_same_group() -> None:
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        record = group_record(child.pid)
        assert record["pgid"] == child.pid and record["startTime"]
        assert same_group(record)
        assert not same_group({**record, "startTime": "1"})  # the pid names another process now
        assert not same_group({**record, "host": "elsewhere"})  # another host's processes are not ours
        assert stop_group(record)
        child.wait(timeout=5)
        assert child.returncode == -signal.SIGTERM
        assert not same_group(record) and not stop_group(record)
    finally:
        if child.poll() is None:
            child.kill()
