"""Shell actions: an argument list run in its own process group, output captured and capped.

The command never goes through a shell unless the author sets ``shell=True``. On timeout, cancel or an update
parser failure the whole process group gets SIGTERM, then SIGKILL after 1 s, so grandchildren die too.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from piw.errors import DefinitionError, NodeFailure, UpdateRejected
from piw.processes import kill_process_group
from piw.run.executors import Attempt, NodeOutcome, describe_exception, evaluate, to_json_output
from piw.run.executors.effect_start import mark_effect_start
from piw.run.process_groups import group_record
from piw.updates.shell_lines import CappedText, LineFramer, ShellLine
from piw.workflow.definition import ActionNode, ShellCommand, ShellUpdates
from piw.workflow.user_code import WorkflowCodeExit, call_user, is_escape

_COMMAND_FIELDS = set(ShellCommand.__dataclass_fields__)


def to_command(value: Any, node_id: str) -> ShellCommand:
    """Accept a ``ShellCommand`` or a mapping with its fields; anything else is an author error."""
    if isinstance(value, ShellCommand):
        command = value
    elif isinstance(value, Mapping):
        unknown = set(value) - _COMMAND_FIELDS
        if unknown:
            raise DefinitionError(
                f"shell node {node_id}: unknown command field(s) {', '.join(sorted(unknown))}"
            )
        if "command" not in value:
            raise DefinitionError(f"shell node {node_id}: exec must return a 'command'")
        command = ShellCommand(**value)
    else:
        raise DefinitionError(f"shell node {node_id}: exec must return a ShellCommand or a mapping")
    if not isinstance(command.command, str) or not all(isinstance(arg, str) for arg in command.args):
        raise DefinitionError(f"shell node {node_id}: command and args must be strings")
    texts = [
        command.command,
        *command.args,
        command.cwd or "",
        *(command.env or {}).keys(),
        *(command.env or {}).values(),
    ]
    if any("\x00" in text for text in texts if isinstance(text, str)):
        # exec cannot pass a NUL byte: say so instead of letting Popen raise a ValueError
        raise DefinitionError(
            f"shell node {node_id}: command, args, cwd and env cannot contain NUL characters"
        )
    return command


class _StreamReader(threading.Thread):
    """Reads one pipe: captures capped text and, when configured, frames lines and publishes updates."""

    def __init__(
        self,
        fd: int,
        stream: str,
        max_chars: int,
        on_line: Callable[[ShellLine], None] | None,
    ) -> None:
        super().__init__(name=f"piw-shell-{stream}", daemon=True)
        self.fd = fd
        self.stream = stream
        self.capture = CappedText(max_chars)
        self.framer = LineFramer(stream) if on_line else None  # type: ignore[arg-type]
        self.on_line = on_line
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while chunk := os.read(self.fd, 65536):
                self.capture.feed(chunk)
                self._frame(chunk)
            self._frame(None)
        except BaseException as exc:
            self.error = self.error or exc
        finally:
            os.close(self.fd)

    def _frame(self, chunk: bytes | None) -> None:
        """Frame ``chunk`` (``None``: EOF) and parse its lines; publish before reading again (backpressure).

        The first failure stops line processing, but the caller keeps draining the pipe to EOF, so the
        executor can tell when the command has fully closed.
        """
        if self.framer is None or self.on_line is None or self.error is not None:
            return
        try:
            for line in self.framer.feed(chunk) if chunk is not None else self.framer.close():
                self.on_line(line)
        except BaseException as exc:
            self.error = exc


class ShellActionExecutor:
    """Runs ``shell(...)`` nodes."""

    def __init__(self, publish: Callable[[Attempt, Any], None]) -> None:
        self._publish = publish

    def execute(self, attempt: Attempt) -> NodeOutcome:
        node = attempt.gnode.node
        assert isinstance(node, ActionNode) and node.shell is not None
        try:
            command = to_command(evaluate(node.shell.exec, attempt.ctx), attempt.node_id)
        except NodeFailure as exc:
            return NodeOutcome.failed(str(exc), exc.outcome, exception=exc)
        except Exception as exc:
            return NodeOutcome.failed(describe_exception(exc), exception=exc)
        return self._run(attempt, node, command)

    def _run(self, attempt: Attempt, node: ActionNode, command: ShellCommand) -> NodeOutcome:
        assert node.shell is not None
        env = {**os.environ, **command.env} if command.env else None
        receipt: dict[str, Any] = {
            "actionType": "shell",
            "command": command.command,
            "args": list(command.args),
            **({"cwd": command.cwd} if command.cwd else {}),
        }
        started = time.monotonic()
        missing = None if command.shell else _not_startable(command.command, command.cwd, env)
        if missing is not None:
            receipt.update(exitCode=None, signal=None, durationMs=0)
            return NodeOutcome.failed(f"Could not start {command.command!r}: {missing}", action=receipt)
        try:
            process = subprocess.Popen(
                gated_argv(command),
                cwd=command.cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            receipt.update(exitCode=None, signal=None, durationMs=0)
            return NodeOutcome.failed(
                f"Could not start {command.command!r}: {exc.strerror or exc}", action=receipt
            )
        assert process.stdin is not None
        try:
            # The group is durable in the trace before the command starts: a resume can then find and stop it
            # if piw dies while it runs (docs/design/persistence.md §8, piw.run.process_groups). The fsync also covers
            # node_started and every line before it (effect_started of a once/reconcile command too).
            mark_effect_start(attempt, receipt, sync=False)
            attempt.writer.append(
                "action",
                "process_started",
                group_record(process.pid),
                node_id=attempt.node_id,
                attempt_id=attempt.attempt_id,
                sync=True,
            )
            attempt.writer.fence()  # the command is an effect: a holder past its own deadline never starts it
            os.write(process.stdin.fileno(), b"\n")  # open the gate
        except BaseException:
            process.kill()  # still the gate (it reads its stdin first): the command never ran
            process.wait()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
            raise
        updates = node.shell.updates
        readers = {
            stream: _StreamReader(
                os.dup(pipe.fileno()),
                stream,
                command.max_output_chars,
                self._line_handler(attempt, updates) if updates and stream in updates.streams else None,
            )
            for stream, pipe in (("stdout", process.stdout), ("stderr", process.stderr))
            if pipe is not None
        }
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        process.stderr.close()
        for reader in readers.values():
            reader.start()
        # A thread, so a command that never reads a large stdin cannot block the deadline loop below.
        threading.Thread(target=self._feed_stdin, args=(process, command.stdin), daemon=True).start()
        failure, outcome = _watch(attempt, process, readers, command, started)
        process.wait()
        for reader in readers.values():
            reader.join(timeout=2.0)
        duration = int((time.monotonic() - started) * 1000)
        exit_code, sig = (
            (process.returncode, None) if process.returncode >= 0 else (None, -process.returncode)
        )
        signal_name = signal.Signals(sig).name if sig else None
        receipt.update(exitCode=exit_code, signal=signal_name, durationMs=duration)
        stdout = readers["stdout"].capture.finish()
        stderr = readers["stderr"].capture.finish()
        if failure is None:
            failure = _update_failure(readers)
        if failure is not None:
            return NodeOutcome.failed(failure, outcome, action=receipt)
        result = {
            "command": command.command,
            "args": list(command.args),
            "cwd": command.cwd,
            "stdout": stdout,
            "stderr": stderr,
            "exitCode": exit_code,
            "signal": signal_name,
            "durationMs": duration,
        }
        return _finished(attempt, node, command, result, receipt)

    def _line_handler(self, attempt: Attempt, updates: ShellUpdates) -> Callable[[ShellLine], None]:
        def handle(line: ShellLine) -> None:
            produced = call_user(updates.parse_line, line, attempt.ctx)
            if produced is None:
                return
            items = produced if isinstance(produced, list | tuple) else [produced]
            for item in items:
                self._publish(attempt, item)

        return handle

    @staticmethod
    def _feed_stdin(process: subprocess.Popen[bytes], stdin: str | None) -> None:
        assert process.stdin is not None
        try:
            if stdin:
                process.stdin.write(stdin.encode("utf-8"))
            process.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass


def _finished(
    attempt: Attempt, node: ActionNode, command: ShellCommand, result: dict[str, Any], receipt: dict[str, Any]
) -> NodeOutcome:
    """The outcome of a command that exited: a failure for a non-zero exit (unless allowed, naming stderr's last
    line), else its ``parse`` of the result (or the result itself)."""
    assert node.shell is not None
    exit_code, signal_name, stderr = result["exitCode"], result["signal"], result["stderr"]
    if (exit_code != 0) and not command.allow_nonzero_exit:
        detail = f"exit code {exit_code}" if exit_code is not None else f"signal {signal_name}"
        tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        suffix = f": {tail[0][:200]}" if tail else ""
        return NodeOutcome.failed(f"Command {command.command!r} failed with {detail}{suffix}", action=receipt)
    try:
        output = call_user(node.shell.parse, result, attempt.ctx) if node.shell.parse else result
        return NodeOutcome.ok(to_json_output(output, attempt.node_id), action=receipt)
    except NodeFailure as exc:
        return NodeOutcome.failed(str(exc), exc.outcome, action=receipt, exception=exc)
    except Exception as exc:
        return NodeOutcome.failed(f"parse failed: {describe_exception(exc)}", action=receipt, exception=exc)


def _watch(
    attempt: Attempt,
    process: subprocess.Popen[bytes],
    readers: dict[str, _StreamReader],
    command: ShellCommand,
    started: float,
) -> tuple[str | None, str]:
    """Wait for the command and its output, until it ends, an update parser fails, its time is up or the
    attempt is cancelled; whatever stops it early kills its process group. Returns why it stopped early (``None``
    when it ran to the end) and the outcome that makes."""
    # The binding limit: the command's timeout or what is left of the node's; messages name the setting.
    limit, limit_name = _binding_limit(attempt, command)
    failure: str | None = None
    outcome = "failed"

    def drained() -> bool:
        return not any(reader.is_alive() for reader in readers.values())

    try:
        while process.poll() is None or any(r.is_alive() for r in readers.values()):
            failure = _update_failure(readers)
            if failure is not None:
                break
            if limit is not None and time.monotonic() - started >= limit:
                failure = f"Command {command.command!r} timed out after {limit_name:g}s."
                outcome = "timed_out"
                attempt.timed_out = True
                attempt.cancel.set()  # past its deadline: a reader waiting for an update token gives up
                break
            if attempt.cancel.is_set():
                failure, outcome = f"Command {command.command!r} was cancelled.", "cancelled"
                break
            _wait_a_little(process, readers)
    except BaseException:
        # Ctrl-C or SIGTERM (park): the command must not outlive the attempt.
        kill_process_group(process, drained)
        raise
    if failure is not None:
        kill_process_group(process, drained)
    return failure, outcome


def _wait_a_little(process: subprocess.Popen[bytes], readers: dict[str, _StreamReader]) -> None:
    """Up to 10 ms until the next look: woken at once when a stream closes or the command exits, so a short
    command's step ends when it does, not at the next tick of a fixed sleep."""
    reader = next((r for r in readers.values() if r.is_alive()), None)
    if reader is not None:
        reader.join(0.01)
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(0.01)


def _binding_limit(attempt: Attempt, command: ShellCommand) -> tuple[float | None, Any]:
    """Seconds the command may run and the setting that says so: its own timeout, or what is left of the node's
    (the timeout message names the setting, not the seconds left)."""
    remaining = attempt.remaining_s()
    if command.timeout_s is not None and (remaining is None or command.timeout_s <= remaining):
        return command.timeout_s, command.timeout_s
    return remaining, attempt.timeout_s


def _update_failure(readers: dict[str, _StreamReader]) -> str | None:
    """Why a stream's update parser stopped the command (``None`` while every parser works)."""
    broken = next((r for r in readers.values() if r.error is not None), None)
    if broken is None:
        return None
    return f"shell {broken.stream} update failed: {_describe_parser_error(broken.error)}"


# ``sh -c GATE piw-shell ARGV...``: wait for piw's go-ahead (one line on stdin, which a shell's ``read`` takes
# byte by byte, so the command's own stdin follows untouched), then become the command: same pid, same group.
# EOF instead of a go-ahead (piw died before the group was recorded) exits without running anything.
_GATE = 'IFS= read -r _ || exit 125; exec "$@"'
_GATE_SHELL = 'IFS= read -r _ || exit 125; exec /bin/sh -c "$1"'


def gated_argv(command: ShellCommand) -> list[str]:
    """The argv that runs ``command`` behind the gate; with ``shell=True`` each argument is quoted
    (``shlex.quote``) and appended to the command line."""
    if command.shell:
        line = " ".join([command.command, *(shlex.quote(arg) for arg in command.args)])
        return ["/bin/sh", "-c", _GATE_SHELL, "piw-shell", line]
    return ["/bin/sh", "-c", _GATE, "piw-shell", command.command, *command.args]


def _not_startable(program: str, cwd: str | None, env: Mapping[str, str] | None) -> str | None:
    """Why ``program`` cannot be executed (as ``execvp`` would find it), or ``None`` when it can."""
    if "/" in program:
        path = os.path.join(cwd or ".", program)
        if not os.path.exists(path):
            return "No such file or directory"
        return None if os.access(path, os.X_OK) and not os.path.isdir(path) else "Permission denied"
    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    return None if shutil.which(program, path=search) else "No such file or directory"


def _describe_parser_error(error: BaseException | None) -> str:
    """Name the exception type and the rule, never the line text (it may hold secrets)."""
    if error is None:
        return "unknown error"
    if is_escape(error) or isinstance(error, WorkflowCodeExit):
        return describe_exception(error)
    if isinstance(error, NodeFailure | UpdateRejected):
        return str(error)
    return type(error).__name__
