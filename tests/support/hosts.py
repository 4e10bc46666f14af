"""Hosts as separate ``piw host`` processes, each with its own ``PIW_HOST_ID`` (``multi-host.md`` §4.12, §5).

A :class:`HostProcess` is a real subprocess with a short test-only lease (``PIW_TEST_LEASE_MS``); tests stop,
continue and kill it by pid, and wait on files its shell steps leave, with generous bounded deadlines and no fixed
sleeps. In SQLite mode hosts share one ``PIW_HOME`` (one machine); with a database each has its own home and
``--database URL`` (many machines).
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.cli import PIW_COMMAND
from tests.support.runs import WorkflowMaker

FULL = os.environ.get("PIW_MULTIHOST_FULL") == "1"
"""The ``.ci/run`` multi-host phase: full counts, and the scenarios kept out of the gate to keep it fast."""

TEST_LEASE_MS = 2_000
"""The multi-host tests' lease: takeover within 2 s plus a poll, so no scenario waits out 30 s."""


def wait_for(check: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> object:
    """Poll ``check`` every 20 ms until it returns something truthy (its value), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def base_env(home: Path, host_id: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PIW_"))}
    env.update(
        PIW_HOME=str(home),
        PIW_HOST_ID=host_id,
        PIW_TEST_LEASE_MS=str(TEST_LEASE_MS),
        NO_COLOR="1",
        COLUMNS="200",
    )
    env.update(extra or {})
    return env


@dataclass
class HostProcess:
    """One ``piw host`` process."""

    host_id: str
    home: Path
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    process: subprocess.Popen[str] | None = None

    def start(self) -> HostProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [*PIW_COMMAND, "host", *self.args],
            cwd=self.cwd or self.home,
            env=base_env(self.home, self.host_id, self.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.pid, sig)

    def finish(self, timeout: float = 60.0) -> tuple[int, str, str]:
        """Wait for the host to exit; its exit code, stdout and stderr."""
        assert self.process is not None
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, out, err

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=30)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return False
    return data[data.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def marks(path: Path) -> list[str]:
    """The lines an effect-counting shell step appended (one per execution)."""
    return path.read_text().split() if path.exists() else []


def database_url(server: object, schema: str) -> str:
    """The ``--database`` URL of a test schema on the throwaway server (``tests/support/pg.py``)."""
    return f"{server.url()}?schema={schema}"  # type: ignore[attr-defined]


def db_trace(server: object, schema: str, run_id: str) -> list[tuple[int, int, dict[str, Any]]]:
    """A run's trace as the database holds it: ``(seq, generation, parsed line)`` in ``seq`` order."""
    import json

    found = server.execute(  # type: ignore[attr-defined]
        f'SELECT seq, generation, line FROM "{schema}".trace_events WHERE run_id = %s ORDER BY seq', (run_id,)
    )
    return [(int(seq), int(gen), json.loads(bytes(line))) for seq, gen, line in found]


def queue_in(home: Path, url: str, flow: Path, inputs: list[dict[str, object]]) -> list[str]:
    """Queue one run of ``flow`` per input in the database at ``url`` (what ``piw run --detach --database`` does)."""
    from piw.run.runner import ForegroundOptions, queue_run
    from piw.store.pg.place import forget, use

    use(home, url)
    try:
        return [
            queue_run(str(flow), home, value, None, ForegroundOptions(record_origin=False)).run_id
            for value in inputs
        ]
    finally:
        forget(home)


def gated_flow(make_workflow: WorkflowMaker, folder: Path) -> Path:
    """``work`` (a shell step that records itself, then waits for the gate file) then ``after`` (records itself)."""
    work, after, gate = folder / "work.marks", folder / "after.marks", folder / "gate"
    return make_workflow(
        "gated",
        textwrap.dedent(
            f"""
            from piw import define_workflow, edge, shell

            def wait(ctx):
                loop = "echo $$ >> {work}; while [ ! -e {gate} ]; do sleep 0.02; done"
                return {{"command": "sh", "args": ["-c", loop]}}

            workflow = define_workflow(name="gated", start_at="work", nodes={{
                "work": shell(wait),
                "after": shell({{"command": "sh", "args": ["-c", "echo x >> {after}"]}}),
            }}, edges=[edge("work", "after")])
            """
        ),
    )
