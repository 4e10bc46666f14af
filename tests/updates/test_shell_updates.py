"""Shell actions publishing updates from their output lines, through the real engine (``updates-progress.md``
§3.3, §9 tests 19–21).

Commands are small Python scripts (``sys.executable -c``), so the tests need no shell tools. Runs start
in-process with ``piw.run.runner.start_run``; assertions read the trace and the run state. No assertion depends on
how long anything took.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import pytest

from piw.run.runner import ForegroundOptions, start_run
from piw.store.fold import state_to_json

PROGRESS = "pi-workflows.progress.v1"


@pytest.fixture
def home(piw_home: Path) -> Path:
    """The private ``PIW_HOME`` of ``tests/conftest.py`` (no durability override, no model requests)."""
    return piw_home


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A module the workflow file imports to share objects (events, counters) with the test."""
    module = types.ModuleType("piw_probe")
    monkeypatch.setitem(sys.modules, "piw_probe", module)
    return module


def shell_workflow(tmp_path: Path, script: str, parser: str, streams: tuple[str, ...] = ("stdout",)) -> Path:
    """One shell node ``s`` running ``script`` with Python, its lines parsed by ``parse(line, ctx)``."""
    path = tmp_path / "sh.workflow.py"
    source = (
        "import sys\n"
        "from piw import ShellUpdates, UpdateInput, define_workflow, shell\n"
        f"SCRIPT = {textwrap.dedent(script)!r}\n"
        f"{textwrap.dedent(parser)}\n"
        "workflow = define_workflow(name='sh', start_at='s', nodes={'s': shell(\n"
        "    lambda ctx: {'command': sys.executable, 'args': ['-c', SCRIPT, *ctx.input.get('args', [])]},\n"
        f"    updates=ShellUpdates(parse_line=parse, streams={streams!r}))}})\n"
    )
    path.write_text(source, encoding="utf-8")
    return path


def run(path: Path, home: Path, args: list[str] | None = None, durability: str = "flush") -> dict[str, Any]:
    options = ForegroundOptions(durability=durability)
    return state_to_json(start_run(str(path), home, {"args": args or []}, None, options))


def events(home: Path, run_id: str) -> list[dict[str, Any]]:
    text = (home / "runs" / run_id / "trace.ndjson").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def published(home: Path, run_id: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in events(home, run_id) if e["type"] == "update_published"]


def terminal(home: Path, run_id: str) -> dict[str, Any]:
    (event,) = [e for e in events(home, run_id) if e["type"] in ("node_finished", "node_failed")]
    return event


# ---- publishing from lines ------------------------------------------------------------------------------

COUNTING = """
import sys
for i in range(1, 4):
    print(f"{i}/3", flush=True)
print("done", file=sys.stderr, flush=True)
"""

PROGRESS_PARSER = f"""
def parse(line, ctx):
    if "/" not in line.text:
        return None
    done, total = line.text.split("/")
    return UpdateInput(type="progress", key="job", data={{"schema": {PROGRESS!r}, "status": "running",
                       "completed": int(done), "total": int(total), "unit": "items", "label": line.stream}})
"""


def test_each_stdout_line_publishes_progress(tmp_path: Path, home: Path) -> None:
    state = run(shell_workflow(tmp_path, COUNTING, PROGRESS_PARSER), home)
    assert state["status"] == "completed"
    updates = published(home, state["runId"])
    assert [u["data"]["completed"] for u in updates] == [1, 2, 3]
    assert {u["data"]["label"] for u in updates} == {"stdout"}
    (record,) = state["updates"]
    assert (record["type"], record["key"], record["data"]["completed"]) == ("progress", "job", 3)
    # Captured output is independent of parsing.
    assert state["finalOutput"]["stdout"] == "1/3\n2/3\n3/3\n"
    assert state["finalOutput"]["stderr"] == "done\n"
    trace = events(home, state["runId"])
    kinds = [e["type"] for e in trace]
    assert kinds.index("node_finished") > max(i for i, kind in enumerate(kinds) if kind == "update_published")


BOTH_STREAMS = """
import sys
for i in range(1, 4):
    print(f"{i}/3", flush=True)
    print(f"{i}/3", file=sys.stderr, flush=True)
"""

KEYED_PARSER = """
def parse(line, ctx):
    return {"type": "line", "key": line.stream, "data": {"text": line.text}}
"""


def test_stderr_only(tmp_path: Path, home: Path) -> None:
    state = run(shell_workflow(tmp_path, BOTH_STREAMS, KEYED_PARSER, streams=("stderr",)), home)
    assert state["status"] == "completed"
    updates = published(home, state["runId"])
    assert [(u["key"], u["data"]["text"]) for u in updates] == [("stderr", f"{i}/3") for i in range(1, 4)]
    assert state["finalOutput"]["stdout"] == "1/3\n2/3\n3/3\n"


def test_both_streams(tmp_path: Path, home: Path) -> None:
    state = run(shell_workflow(tmp_path, BOTH_STREAMS, KEYED_PARSER, streams=("stdout", "stderr")), home)
    assert state["status"] == "completed"
    updates = published(home, state["runId"])
    for stream in ("stdout", "stderr"):
        assert [u["data"]["text"] for u in updates if u["key"] == stream] == [f"{i}/3" for i in range(1, 4)]
    assert sorted((u["type"], u["key"]) for u in state["updates"]) == [("line", "stderr"), ("line", "stdout")]


MIXED = r"""
import os
os.write(1, b"none\n")
os.write(1, b"one\r\n")
os.write(1, b"caf\xe9 list\n")
os.write(1, b"\n")
os.write(1, b"tail without newline")
"""

MIXED_PARSER = """
def parse(line, ctx):
    seen = {"text": line.text, "invalid": line.invalid_utf8, "stream": line.stream}
    if line.text == "none":
        return None
    if line.text.endswith("list"):
        return [{"type": "line", "key": "list-a", "data": seen},
                UpdateInput(type="line", key="list-b", data=seen)]
    return {"type": "line", "key": "one" if line.text == "one" else "other", "data": seen}
"""


def test_parser_results_and_invalid_utf8(tmp_path: Path, home: Path) -> None:
    state = run(shell_workflow(tmp_path, MIXED, MIXED_PARSER), home)
    assert state["status"] == "completed", state["error"]
    updates = published(home, state["runId"])
    assert [(u["key"], u["data"]["text"], u["data"]["invalid"]) for u in updates] == [
        ("one", "one", False),  # CR dropped; "none" published nothing
        ("list-a", "caf\ufffd list", True),  # invalid UTF-8 replaced, flagged and still parsed
        ("list-b", "caf\ufffd list", True),
        ("other", "", False),  # empty lines reach the parser
        ("other", "tail without newline", False),  # the unterminated last line is processed before the result
    ]
    assert {u["data"]["stream"] for u in updates} == {"stdout"}


def test_an_invalid_returned_update_fails_the_node(tmp_path: Path, home: Path) -> None:
    parser = """
    def parse(line, ctx):
        if line.text == "2/3":
            return {"type": "Progress", "key": "job", "data": {}}
        return {"type": "line", "key": "job", "data": {}}
    """
    state = run(shell_workflow(tmp_path, COUNTING, parser), home)
    assert state["status"] == "failed"
    assert state["error"] == "shell stdout update failed: update.type must match [a-z][a-z0-9.-]{0,63}"
    assert len(published(home, state["runId"])) == 1


def test_an_invalid_progress_profile_fails_the_node(tmp_path: Path, home: Path) -> None:
    parser = f"""
    def parse(line, ctx):
        return {{"type": "progress", "key": "job", "data": {{"schema": {PROGRESS!r}, "status": "running",
                 "completed": 1}}}}
    """
    state = run(shell_workflow(tmp_path, COUNTING, parser), home)
    assert state["error"] == (
        "shell stdout update failed: progress.unit is required with counts and must be 1 to 32 characters"
    )
    assert published(home, state["runId"]) == []


# ---- failures terminate the command --------------------------------------------------------------------

# The child and its grandchild record SIGTERM and keep running, so only SIGKILL ends them.
STUBBORN = r"""
import os, signal, subprocess, sys, time
directory = sys.argv[1]
def noted(name):
    def handler(signum, frame):
        open(os.path.join(directory, name + ".term"), "w").close()
    return handler
signal.signal(signal.SIGTERM, noted("child"))
grandchild = subprocess.Popen([sys.executable, "-c", '''
import os, signal, sys, time
directory = sys.argv[1]
def handler(signum, frame):
    open(os.path.join(directory, "grandchild.term"), "w").close()
signal.signal(signal.SIGTERM, handler)
open(os.path.join(directory, "grandchild.pid"), "w").write(str(os.getpid()))
while True:
    time.sleep(0.05)
''', directory])
while not os.path.exists(os.path.join(directory, "grandchild.pid")):
    time.sleep(0.01)
open(os.path.join(directory, "child.pid"), "w").write(str(os.getpid()))
print("token=hunter2 is the secret line", flush=True)
while True:
    time.sleep(0.05)
"""


def _gone(pid: int) -> bool:
    """Dead: no such process, or a zombie nobody has reaped yet (init in a container may be slow to)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: fall back to signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def _wait_gone(pid: int) -> bool:
    for _ in range(500):
        if _gone(pid):
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def pid_dir(tmp_path: Path) -> Any:
    """A directory for pid and signal marker files; any process left behind is killed at the end."""
    directory = tmp_path / "pids"
    directory.mkdir()
    yield directory
    for pid_file in directory.glob("*.pid"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_parser_exception_terms_then_kills_the_whole_group(
    tmp_path: Path, home: Path, pid_dir: Path
) -> None:
    parser = """
    def parse(line, ctx):
        raise ValueError("cannot parse " + line.text)
    """
    state = run(shell_workflow(tmp_path, STUBBORN, parser), home, [str(pid_dir)])
    assert state["status"] == "failed"
    error = state["error"]
    assert error == "shell stdout update failed: ValueError"  # the type and the stream
    assert "hunter2" not in error and "secret" not in error  # never the line text
    failed = terminal(home, state["runId"])
    assert failed["payload"]["error"] == error
    assert failed["payload"]["action"]["signal"] == "SIGKILL"  # SIGTERM was ignored, so SIGKILL ended it
    # SIGTERM reached the child and the grandchild first (the whole process group) ...
    assert (pid_dir / "child.term").exists()
    assert (pid_dir / "grandchild.term").exists()
    # ... and SIGKILL ended both.
    for name in ("child", "grandchild"):
        assert _wait_gone(int((pid_dir / f"{name}.pid").read_text())), f"{name} survived"
    assert published(home, state["runId"]) == []


LEADER_EXITS = r"""
import os, signal, subprocess, sys, time
directory = sys.argv[1]
grandchild = subprocess.Popen([sys.executable, "-c", '''
import os, signal, sys, time
directory = sys.argv[1]
def handler(signum, frame):
    open(os.path.join(directory, "grandchild.term"), "w").close()
signal.signal(signal.SIGTERM, handler)
open(os.path.join(directory, "grandchild.pid"), "w").write(str(os.getpid()))
while True:
    time.sleep(0.05)
''', directory])
while not os.path.exists(os.path.join(directory, "grandchild.pid")):
    time.sleep(0.01)
print("bad", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_grandchild_holding_the_pipe_is_killed_after_the_leader_exits(
    tmp_path: Path, home: Path, pid_dir: Path
) -> None:
    """The leader dies on SIGTERM; the grandchild ignores it and keeps stdout open, so SIGKILL follows."""
    parser = """
    def parse(line, ctx):
        raise KeyError(line.text)
    """
    state = run(shell_workflow(tmp_path, LEADER_EXITS, parser), home, [str(pid_dir)])
    assert state["error"] == "shell stdout update failed: KeyError"
    assert terminal(home, state["runId"])["payload"]["action"]["signal"] == "SIGTERM"
    assert (pid_dir / "grandchild.term").exists()
    assert _wait_gone(int((pid_dir / "grandchild.pid").read_text()))


OVERSIZED = """
import os, sys
size = int(sys.argv[1])
os.write(1, b"ok\\n")
os.write(1, b"x" * size + b"\\n")
os.write(1, b"after\\n")
"""

LENGTH_PARSER = """
def parse(line, ctx):
    return {"type": "line", "key": "len", "data": {"bytes": len(line.text.encode())}}
"""


def test_a_line_of_65536_bytes_is_accepted(tmp_path: Path, home: Path) -> None:
    state = run(shell_workflow(tmp_path, OVERSIZED, LENGTH_PARSER), home, ["65536"])
    assert state["status"] == "completed", state["error"]
    assert [u["data"]["bytes"] for u in published(home, state["runId"])] == [2, 65536, 5]


def test_a_line_of_65537_bytes_fails_the_node(tmp_path: Path, home: Path) -> None:
    state = run(shell_workflow(tmp_path, OVERSIZED, LENGTH_PARSER), home, ["65537"])
    assert state["status"] == "failed"
    assert state["error"] == "shell stdout update failed: shell stdout update line exceeded 65536 bytes"
    # Lines before the oversized one were processed; nothing after it was.
    assert [u["data"]["bytes"] for u in published(home, state["runId"])] == [2]


def test_an_unterminated_oversized_buffer_fails_before_any_newline(
    tmp_path: Path, home: Path, pid_dir: Path
) -> None:
    script = """
    import os, sys, time
    os.write(1, b"y" * 65537)
    open(os.path.join(sys.argv[1], "child.pid"), "w").write(str(os.getpid()))
    time.sleep(60)  # never sends the newline: the buffer limit alone must end it
    """
    state = run(shell_workflow(tmp_path, script, LENGTH_PARSER), home, [str(pid_dir)])
    assert state["error"] == "shell stdout update failed: shell stdout update line exceeded 65536 bytes"
    assert terminal(home, state["runId"])["payload"]["action"]["signal"] == "SIGTERM"


# ---- rate limit and backpressure ------------------------------------------------------------------------

MANY_LINES = """
import sys
for i in range(150):
    print(i, flush=True)
"""


def test_a_rate_limited_shell_waits_instead_of_failing(tmp_path: Path, home: Path) -> None:
    parser = """
    def parse(line, ctx):
        return {"type": "line", "key": "n" + line.text, "data": {"n": int(line.text)}}
    """
    state = run(shell_workflow(tmp_path, MANY_LINES, parser), home)  # 100 at once, then 20 a second
    assert state["status"] == "completed", state["error"]
    assert [u["data"]["n"] for u in published(home, state["runId"])] == list(range(150))
    assert len(state["updates"]) == 150


# The child writes 1,000-byte lines without blocking until the pipe is full, notes how far it got, then
# writes the rest normally. Lines of at most PIPE_BUF bytes are written whole or not at all.
FLOOD = r"""
import fcntl, os, sys
directory = sys.argv[1]
line = b"z" * 999 + b"\n"
total = 600
os.set_blocking(1, False)
written = 0
while written < total:
    try:
        os.write(1, line)
    except BlockingIOError:
        break
    written += 1
pipe_size = fcntl.fcntl(1, 1032)  # F_GETPIPE_SZ
with open(os.path.join(directory, "blocked.json"), "w") as out:
    out.write('{"written": %d, "pipe": %d}' % (written, pipe_size))
os.set_blocking(1, True)
for _ in range(written, total):
    os.write(1, line)
"""

SLOW_PARSER = """
import os, time
import piw_probe

def parse(line, ctx):
    piw_probe.parsed += 1
    if piw_probe.parsed == 1:
        # Hold the reader on the first line until the child finds the pipe full: a reader that kept
        # reading (buffering) meanwhile would never let that happen.
        blocked = os.path.join(ctx.input["args"][0], "blocked.json")
        for _ in range(3000):
            if os.path.exists(blocked):
                break
            time.sleep(0.01)
        piw_probe.parsed_when_blocked = piw_probe.parsed
        return {"type": "line", "key": "first", "data": {}}
    return None
"""


@pytest.mark.skipif(sys.platform != "linux", reason="F_GETPIPE_SZ is Linux-only")
def test_a_slow_parser_blocks_the_child_on_a_full_pipe(
    tmp_path: Path, home: Path, probe: Any, pid_dir: Path
) -> None:
    probe.parsed = 0
    probe.parsed_when_blocked = None
    state = run(shell_workflow(tmp_path, FLOOD, SLOW_PARSER), home, [str(pid_dir)])
    assert state["status"] == "completed", state["error"]
    blocked = json.loads((pid_dir / "blocked.json").read_text())
    # The child hit a full pipe long before its 600 lines: at most one read chunk plus the pipe are in flight.
    assert blocked["written"] < 600
    assert blocked["written"] * 1000 <= 65536 + blocked["pipe"] + 1000
    assert probe.parsed_when_blocked == 1  # the reader was still on line 1 while the child was blocked
    assert probe.parsed == 600  # every line was parsed in the end
    assert [u["key"] for u in published(home, state["runId"])] == ["first"]


def test_a_timed_out_shell_stops_waiting_for_tokens(tmp_path: Path, home: Path) -> None:
    """Readers rate-limited when the deadline passes give up: nothing is published after the node ends."""
    parser = """
    def parse(line, ctx):
        return {"type": "line", "key": "k", "data": {"n": line.text}}
    """
    script = MANY_LINES.replace("150", "400") + "import time\ntime.sleep(60)\n"
    path = shell_workflow(tmp_path, script, parser)
    path.write_text(path.read_text().replace("updates=ShellUpdates(", "timeout_s=0.5, updates=ShellUpdates("))
    state = run(path, home)
    assert state["status"] == "timed_out"
    assert state["error"].endswith("timed out after 0.5s.")
    trace = events(home, state["runId"])
    finished = next(i for i, e in enumerate(trace) if e["type"] == "node_failed")
    assert all(e["type"] != "update_published" for e in trace[finished:])
    assert sum(1 for e in trace if e["type"] == "update_published") < 400
