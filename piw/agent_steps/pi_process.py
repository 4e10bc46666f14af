"""One Pi CLI process in RPC mode (``docs/design/agent-steps.md`` §8.4): its isolated launch, JSON lines and shutdown.

Pi runs with a temporary ``HOME`` and ``PI_CODING_AGENT_DIR`` so nothing from the user's own Pi setup (keys,
extensions, settings, sessions) leaks into a workflow run, and with ``PI_OFFLINE``/``PI_TELEMETRY`` so it never
talks to anything but the configured model endpoint. Its provider comes from a ``models.json`` written from
piw's own config; keys stay ``$NAME`` references resolved by Pi from the environment, never written to disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piw.env_refs import env_reference
from piw.errors import ProviderError
from piw.processes import kill_process_group
from piw.providers import guard_base_url
from piw.providers.selection import ProviderSelection

BRIDGE = Path(__file__).with_name("pi_bridge") / "workflow_bridge.ts"
NO_KEY_VARIABLE = "PIW_PI_NO_KEY"
"""Pi requires an ``apiKey``; a provider configured without one gets this placeholder variable."""
DIALOGS = ("select", "confirm", "input", "editor")
KILL_AFTER_S = 3.0
EOF = {"type": "piw_eof"}
"""Put on the event queue when Pi's stdout closes, so a reader never waits on a dead process."""


@dataclass(frozen=True)
class PiLaunch:
    """What a Pi process needs from piw's config: the selected provider and model, and run-wide options."""

    selection: ProviderSelection
    tools: Sequence[str] = ()
    """Pi tool names any agent node of the workflow may use (``--tools`` is fixed at process start)."""
    system_prompt: str | None = None
    cwd: Path = field(default_factory=Path.cwd)
    binary: str = "pi"


def _pi_value(value: str, env: dict[str, str], what: str) -> str:
    """A config value as ``models.json`` wants it: ``$NAME`` becomes ``NAME`` (Pi reads the variable)."""
    name = env_reference(value)
    if name is not None:
        if name in os.environ:
            env[name] = os.environ[name]
        return name
    if value.startswith("!"):
        # Pi would run a "!command" value as a shell command; piw never substitutes commands.
        raise ProviderError(f"pi-rpc: {what} may not start with '!'.")
    return value


def models_json(launch: PiLaunch, env: dict[str, str]) -> dict[str, Any]:
    """The ``models.json`` for ``launch``; fills ``env`` with the variables Pi must see to resolve keys."""
    selection = launch.selection
    settings = selection.settings
    if settings.api != "openai-completions" or not settings.base_url:
        raise ProviderError("pi-rpc needs an openai-completions provider with a base_url.")
    guard_base_url(settings.base_url)
    if settings.api_key is None:
        env[NO_KEY_VARIABLE] = "none"
        api_key = NO_KEY_VARIABLE
    else:
        api_key = _pi_value(settings.api_key, env, "api_key")
    model: dict[str, Any] = {"id": selection.model}
    known = selection.model_settings
    if known is not None:
        if known.context_window:
            model["contextWindow"] = known.context_window
        if known.max_tokens:
            model["maxTokens"] = known.max_tokens
        if known.cost is not None:
            cost = known.cost
            model["cost"] = {
                "input": cost.input,
                "output": cost.output,
                "cacheRead": cost.input if cost.cache_read is None else cost.cache_read,
                "cacheWrite": cost.input if cost.cache_write is None else cost.cache_write,
            }
    provider: dict[str, Any] = {
        "baseUrl": settings.base_url,
        "api": "openai-completions",
        "apiKey": api_key,
        "compat": {
            "supportsDeveloperRole": False,
            "supportsReasoningEffort": False,
            "maxTokensField": settings.compat.max_tokens_field,
        },
        "models": [model],
    }
    if settings.headers:
        provider["headers"] = {k: _pi_value(v, env, f"header {k}") for k, v in settings.headers.items()}
    return {"providers": {selection.provider: provider}}


class PiProcess:
    """A running ``pi --mode rpc``: commands go to stdin, events and responses come back on a queue."""

    def __init__(self, launch: PiLaunch) -> None:
        binary = shutil.which(launch.binary)
        if binary is None:
            raise ProviderError(f"pi-rpc: the Pi CLI ({launch.binary!r}) is not on PATH.")
        self.tmp = Path(tempfile.mkdtemp(prefix="piw-pi-"))
        self.state_file = self.tmp / "bridge-state.json"
        agent_dir = self.tmp / "agent"
        agent_dir.mkdir()
        env: dict[str, str] = {}
        config = models_json(launch, env)
        (agent_dir / "models.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        self.write_state({"completion": None})
        env.update(
            PATH=os.environ.get("PATH", ""),
            HOME=str(self.tmp),
            PI_CODING_AGENT_DIR=str(agent_dir),
            PI_OFFLINE="1",
            PI_TELEMETRY="0",
            PIW_BRIDGE_STATE=str(self.state_file),
        )
        tools = sorted({*launch.tools, "workflow"})
        isolated = ["--no-session", "--offline", "--no-extensions", "--no-skills", "--no-context-files"]
        selected = ["--provider", launch.selection.provider, "--model", launch.selection.model]
        command = [
            binary,
            "--mode",
            "rpc",
            *isolated,
            "-e",
            str(BRIDGE),
            *selected,
            "--tools",
            ",".join(tools),
        ]
        if launch.system_prompt:
            command += ["--system-prompt", launch.system_prompt]
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self._write_lock = threading.Lock()
        self._ids = 0
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=launch.cwd,
            start_new_session=True,  # its own process group, so shutdown reaches Pi's children too
        )
        threading.Thread(target=self._read_stdout, name="pi-rpc-out", daemon=True).start()
        threading.Thread(target=self._read_stderr, name="pi-rpc-err", daemon=True).start()

    def write_state(self, state: dict[str, Any]) -> None:
        """The bridge's gate, replaced atomically so the bridge never reads a half-written file."""
        partial = self.state_file.with_suffix(".tmp")
        partial.write_text(json.dumps(state), encoding="utf-8")
        partial.replace(self.state_file)

    def send(self, command: dict[str, Any]) -> str:
        """Write one command line; returns its ``id`` (responses carry it back)."""
        with self._write_lock:
            self._ids += 1
            command_id = f"piw-{self._ids}"
            stdin = self.proc.stdin
            if stdin is None or stdin.closed:
                raise ProviderError("pi-rpc: the Pi process is closed.")
            try:
                stdin.write((json.dumps({"id": command_id, **command}) + "\n").encode("utf-8"))
                stdin.flush()
            except OSError as exc:
                raise ProviderError(f"pi-rpc: cannot write to Pi ({exc}); {self.describe_exit()}") from exc
            return command_id

    def request(self, command: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        """Send a command and wait for its response (used before any prompt, when no events are due)."""
        command_id = self.send(command)
        while True:
            try:
                line = self.events.get(timeout=timeout_s)
            except queue.Empty:
                raise ProviderError(
                    f"pi-rpc: no response to {command['type']} within {timeout_s:g}s."
                ) from None
            if line is EOF:
                raise ProviderError(f"pi-rpc: Pi exited during {command['type']}: {self.describe_exit()}")
            if line.get("type") == "response" and line.get("id") == command_id:
                if not line.get("success", False):
                    raise ProviderError(f"pi-rpc: {command['type']} failed: {line.get('error')}")
                return line

    def describe_exit(self) -> str:
        code = self.proc.poll()
        tail = " | ".join(self.stderr_tail) or "no stderr"
        return f"exit code {code}; {tail}"

    def _read_stdout(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        # Binary iteration splits on b"\n" only: JSON strings may hold U+2028, which text readers split on.
        for raw in stdout:
            text = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", errors="replace")
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except ValueError:
                self.stderr_tail.append(f"stdout: {text[:200]}")
                continue
            if not isinstance(line, dict):
                continue
            if line.get("type") == "extension_ui_request" and line.get("method") in DIALOGS:
                # Nobody can answer a dialog inside a workflow run; a cancelled dialog lets Pi carry on.
                with contextlib.suppress(OSError, ProviderError):
                    self.send({"type": "extension_ui_response", "id": line.get("id"), "cancelled": True})
                continue
            self.events.put(line)
        self.events.put(EOF)

    def _read_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        for raw in stderr:
            self.stderr_tail.append(raw.decode("utf-8", errors="replace").rstrip())

    def close(self) -> None:
        """Close stdin, SIGTERM the process group, SIGKILL it after 3 s; remove the temporary home."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        # Done once Pi itself has exited; what Pi started is in its group, so it got the SIGTERM too.
        kill_process_group(self.proc, lambda: True, grace_s=KILL_AFTER_S, settle_s=KILL_AFTER_S)
        shutil.rmtree(self.tmp, ignore_errors=True)
