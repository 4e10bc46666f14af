"""Shell actions: argument lists, exit codes, caps, process-group kills on timeout and on SIGTERM."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Cli
from tests.support.runs import RunWorkflow, WorkflowMaker, trace_lines

HEADER = """
import sys
from piw import ShellCommand, ShellUpdates, define_workflow, shell
PY = sys.executable
"""


@pytest.fixture
def run_shell(make_workflow: WorkflowMaker, run_workflow: RunWorkflow) -> Any:
    def run(exec_source: str, extra: str = "", **node: Any) -> Any:
        options = "".join(f", {key}={value}" for key, value in node.items())
        source = (
            HEADER
            + extra
            + (
                f'\nworkflow = define_workflow(name="sh", start_at="cmd",'
                f' nodes={{"cmd": shell({exec_source}{options})}})\n'
            )
        )
        return run_workflow(make_workflow("sh", source))

    return run


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a container's init may not reap orphans at once)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_dead(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return False


def test_default_output_shape(run_shell: Any, tmp_path: Path) -> None:
    state = run_shell(
        f'ShellCommand(command=PY, args=["-c", "import os,sys; print(os.getcwd()); print(os.environ[\'X\']);'
        f" print(sys.stdin.read()); print('err', file=sys.stderr)\"], cwd={str(tmp_path)!r},"
        f' env={{"X": "ex"}},'
        f' stdin="from stdin")'
    )
    assert state.status == "completed", state.error
    out = state.final_output
    assert set(out) == {"command", "args", "cwd", "stdout", "stderr", "exitCode", "signal", "durationMs"}
    assert out["stdout"] == f"{tmp_path}\nex\nfrom stdin\n" and out["stderr"] == "err\n"
    assert (out["exitCode"], out["signal"], out["cwd"]) == (0, None, str(tmp_path))
    receipt = state.steps[0].action
    assert receipt["actionType"] == "shell" and receipt["exitCode"] == 0 and receipt["signal"] is None
    assert receipt["cwd"] == str(tmp_path) and receipt["args"][0] == "-c"


def test_arguments_never_go_through_a_shell_unless_explicit(run_shell: Any) -> None:
    literal = run_shell('{"command": "echo", "args": ["$HOME; echo pwned", "`id`"]}')
    assert literal.final_output["stdout"] == "$HOME; echo pwned `id`\n"
    as_string = run_shell('{"command": "echo $HOME"}')
    assert as_string.status == "failed" and "Could not start 'echo $HOME'" in as_string.error
    explicit = run_shell('{"command": "echo $((6 * 7))", "shell": True}')
    assert explicit.final_output["stdout"] == "42\n"


def test_nonzero_exit_fails_unless_allowed(run_shell: Any) -> None:
    failing = run_shell(
        '{"command": PY, "args": ["-c", "import sys; print(\'why\', file=sys.stderr); sys.exit(3)"]}'
    )
    assert failing.status == "failed"
    assert failing.error == f"Command {failing.steps[0].action['command']!r} failed with exit code 3: why"
    assert failing.steps[0].action["exitCode"] == 3
    allowed = run_shell('{"command": PY, "args": ["-c", "raise SystemExit(4)"], "allow_nonzero_exit": True}')
    assert allowed.status == "completed" and allowed.final_output["exitCode"] == 4


def test_parse_maps_the_result(run_shell: Any) -> None:
    state = run_shell(
        '{"command": "echo", "args": ["{\\"n\\": 5}"]}',
        parse="lambda r, c: json.loads(r['stdout'])",
        extra="import json\n",
    )
    assert state.final_output == {"n": 5}
    broken = run_shell('{"command": "echo", "args": ["x"]}', parse="lambda r, c: 1 / 0")
    assert broken.status == "failed" and broken.error == "parse failed: ZeroDivisionError: division by zero"


def test_output_is_capped_and_invalid_utf8_replaced(run_shell: Any) -> None:
    state = run_shell(
        '{"command": PY, "args": ["-c", "import sys; sys.stdout.write(\'x\' * 10000);'
        ' sys.stderr.buffer.write(b\'ok \\\\xff\\\\xfe end\')"], "max_output_chars": 100}'
    )
    assert state.status == "completed", state.error
    out = state.final_output
    assert out["stdout"] == "x" * 100 + "\n…[truncated 9900 chars]"
    assert out["stderr"] == "ok \ufffd\ufffd end"


def test_unknown_command_fields_fail_the_node(run_shell: Any) -> None:
    state = run_shell('{"command": "true", "timeout": 3}')
    assert state.status == "failed" and "unknown command field(s) timeout" in state.error


GRANDCHILD = """
import os, signal, subprocess, sys, time
pid_file = sys.argv[1]
ignore = sys.argv[2] == "ignore"
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, sys, time\\n"
    + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n" if ignore else "")
    + "time.sleep(60)"])
with open(pid_file, "w") as handle:
    handle.write(f"{os.getpid()} {child.pid}")
child.wait()
"""


@pytest.mark.parametrize(("mode", "signal_name"), [("obey", "SIGTERM"), ("ignore", "SIGKILL")])
def test_timeout_kills_the_whole_process_group(
    run_shell: Any, tmp_path: Path, mode: str, signal_name: str
) -> None:
    script = tmp_path / "spawn.py"
    script.write_text(GRANDCHILD, encoding="utf-8")
    pid_file = tmp_path / "pids.txt"
    state = run_shell(
        f'{{"command": PY, "args": [{str(script)!r}, {str(pid_file)!r}, {mode!r}]}}',
        timeout_s=1.0,
    )
    assert state.status == "timed_out"
    assert state.error == f"Command {state.steps[0].action['command']!r} timed out after 1s."
    # SIGTERM first; a group that ignores it gets SIGKILL after the 1 s grace
    assert state.steps[0].action["signal"] == signal_name and state.steps[0].action["exitCode"] is None
    parent, grandchild = (int(pid) for pid in pid_file.read_text().split())
    assert wait_dead(parent) and wait_dead(grandchild)


def test_command_timeout_and_large_unread_stdin(run_shell: Any) -> None:
    state = run_shell(
        '{"command": PY, "args": ["-c", "import time; time.sleep(30)"], "stdin": "x" * 5_000_000,'
        ' "timeout_s": 0.5}'
    )
    assert state.status == "timed_out" and "timed out after 0.5s" in state.error


def test_shell_updates_publish_lines(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path
) -> None:
    path = make_workflow(
        "upd",
        HEADER
        + """
def parse(line, ctx):
    if line.text.startswith("step "):
        return {"type": "demo.step", "key": "count", "data": {"n": int(line.text.split()[1])}}
    return None

workflow = define_workflow(name="upd", start_at="cmd", nodes={"cmd": shell(
    {"command": PY, "args": ["-c", "print('noise'); print('step 1'); print('step 2')"]},
    updates=ShellUpdates(parse_line=parse))})
""",
    )
    state = run_workflow(path)
    assert state.status == "completed", state.error
    published = [
        e["payload"]["data"] for e in trace_lines(piw_home, state.run_id) if e["type"] == "update_published"
    ]
    assert published == [{"n": 1}, {"n": 2}]
    assert state.final_output["stdout"] == "noise\nstep 1\nstep 2\n"


def test_sigterm_to_piw_run_kills_the_command_and_parks_the_run(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path, piw_home: Path
) -> None:
    script = tmp_path / "spawn.py"
    script.write_text(GRANDCHILD, encoding="utf-8")
    pid_file = tmp_path / "pids.txt"
    quick = tmp_path / "quick"
    path = make_workflow(
        "long",
        HEADER
        + f"""
import os
from piw import compute, edge

def command(ctx):
    if os.path.exists({str(quick)!r}):
        return {{"command": "echo", "args": ["quick"]}}
    return {{"command": PY, "args": [{str(script)!r}, {str(pid_file)!r}, "obey"]}}

workflow = define_workflow(name="long", start_at="cmd", nodes={{
    "cmd": shell(command), "done": compute(lambda c: c.outputs["cmd"]["stdout"])}},
    edges=[edge("cmd", "done")])
""",
    )
    process = cli.popen("run", str(path), "--json")
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    parent, grandchild = (int(pid) for pid in pid_file.read_text().split())
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "piw resume" in stderr.splitlines()[-1]
    assert wait_dead(parent) and wait_dead(grandchild)
    run_id = next(p.name for p in (piw_home / "runs").iterdir())
    # parked: nothing is written after the group record (the command was running)
    assert [line["type"] for line in trace_lines(piw_home, run_id)][-2:] == [
        "node_started",
        "process_started",
    ]
    quick.touch()
    done = cli("resume", run_id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == "quick\n"
    started = [e["attemptId"] for e in trace_lines(piw_home, run_id) if e["type"] == "node_started"]
    assert len(started) == 3 and started[0] != started[1]  # the interrupted command ran again, fresh attempt


def test_shell_true_quotes_each_argument(run_shell: Any) -> None:
    # The command is shell text; every argument is appended with shlex.quote, so it stays one literal word.
    state = run_shell(
        '{"command": "printf \'%s|\' ", "args": ["a b", "$HOME", "; echo pwned", "`id`"], "shell": True}'
    )
    assert state.status == "completed", state.error
    assert state.final_output["stdout"] == "a b|$HOME|; echo pwned|`id`|"
