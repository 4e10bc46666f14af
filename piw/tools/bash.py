"""The opt-in ``bash`` tool: run one command in the working directory, bounded in time and output.

Unlike the file tools it can change anything the user can, so it is registered but never offered unless a
node names it in ``tools``. The command runs in its own process group so a timeout or cancellation can stop
everything it started (pipelines, background jobs, grandchildren), the same way shell nodes are stopped:
SIGTERM to the group, then SIGKILL one second later.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import IO, Any

from piw.processes import KILL_GRACE_S, kill_process_group
from piw.tools.base import ToolContext, ToolRefused, ToolResult, guarded_tool, object_schema
from piw.tools.environment import tool_environment

BASH_MAX_OUTPUT_BYTES = 50_000
"""Most output bytes kept; the tail is kept because errors and summaries usually come last."""

_POLL_S = 0.05

_BASH_SCHEMA = object_schema(
    {"command": {"type": "string", "minLength": 1, "description": "Shell command, run with bash -c."}},
    required=("command",),
)


class _Tail:
    """Collects a pipe's output on a thread, keeping only the last bytes so memory stays bounded."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.data = bytearray()
        self.total = 0
        self._pipe = pipe
        self.thread = threading.Thread(target=self._pump, name="piw-bash-output", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        with self._pipe:
            while chunk := os.read(self._pipe.fileno(), 64 * 1024):
                self.total += len(chunk)
                self.data += chunk
                if len(self.data) > 2 * BASH_MAX_OUTPUT_BYTES:
                    del self.data[: len(self.data) - BASH_MAX_OUTPUT_BYTES]

    def text(self) -> str:
        return bytes(self.data[-BASH_MAX_OUTPUT_BYTES:]).decode("utf-8", errors="replace")


def _bash(call_id: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if not ctx.cwd.is_dir():
        raise ToolRefused("the working directory does not exist.")
    if ctx.cancel.is_set():
        raise ToolRefused("cancelled before the command started.")
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-c", args["command"]],
        cwd=ctx.cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=tool_environment(ctx.env_allow),  # never piw's environment: it holds provider keys
        start_new_session=True,  # its own process group, so the whole tree can be signalled at once
    )
    assert proc.stdout is not None
    output = _Tail(proc.stdout)
    deadline = None if ctx.timeout_s is None else started + ctx.timeout_s
    stopped: str | None = None
    # The call lasts while bash runs or anything it started still holds the output pipe open.
    while proc.poll() is None or output.thread.is_alive():
        if ctx.cancel.is_set():
            stopped = "cancelled"
        elif deadline is not None and time.monotonic() >= deadline:
            stopped = "timed_out"
        if stopped is not None:
            kill_process_group(proc)
            break
        output.thread.join(_POLL_S)
    proc.wait()
    output.thread.join(KILL_GRACE_S)
    return _result(proc, output, stopped, ctx, time.monotonic() - started)


def _result(
    proc: subprocess.Popen[bytes], output: _Tail, stopped: str | None, ctx: ToolContext, elapsed: float
) -> ToolResult:
    text = output.text()
    notes: list[str] = []
    if output.total > BASH_MAX_OUTPUT_BYTES:
        notes.append(f"[output cut: showing the last {BASH_MAX_OUTPUT_BYTES:,} of {output.total:,} bytes]")
    if stopped == "timed_out":
        notes.append(
            f"[timed out after {ctx.timeout_s:g} s; the command and everything it started were killed]"
        )
    elif stopped == "cancelled":
        notes.append("[cancelled; the command and everything it started were killed]")
    elif proc.returncode != 0:
        notes.append(f"[exit code {proc.returncode}]")
    content = "\n".join([text.rstrip("\n"), *notes]).strip("\n") or "(no output)"
    details: dict[str, Any] = {
        "exitCode": proc.returncode,
        "durationMs": round(elapsed * 1000),
        "outputBytes": output.total,
        "truncated": output.total > BASH_MAX_OUTPUT_BYTES,
    }
    if stopped is not None:
        details["stopped"] = stopped
    return ToolResult(content=content, details=details, is_error=stopped is not None or proc.returncode != 0)


BASH = guarded_tool(
    "bash",
    (
        "Run a shell command with bash -c in the working directory. Returns its combined stdout and stderr "
        f"(the last {BASH_MAX_OUTPUT_BYTES:,} bytes). The command is killed, with everything it started, "
        "when the step's time runs out. Standard input is empty; do not start interactive programs."
    ),
    _BASH_SCHEMA,
    _bash,
)
