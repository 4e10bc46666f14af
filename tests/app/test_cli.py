"""``piw view`` as a command: off a terminal, on a real terminal (tmux), and served (``test_serve_guard.py``).

These are real processes on purpose: a terminal, a server socket and an exit code are the point.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from piw.app.serve import view_command
from piw.web.access import is_loopback
from tests.support.views import RUN_IDS, Runs, shared_runs

TMUX = shutil.which("tmux")


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def test_off_a_terminal_it_points_to_inspect_and_watch(cli) -> None:  # type: ignore[no-untyped-def]
    done = cli.process("view")
    assert done.returncode == 2
    assert (
        "piw view needs a terminal" in done.stderr
        and "piw inspect" in done.stderr
        and "piw watch" in done.stderr
    )
    assert done.stdout == ""


def test_help_names_the_options(cli) -> None:  # type: ignore[no-untyped-def]
    done = cli("view", "--help")
    assert done.returncode == 0
    for option in ("--serve", "--port", "--host"):
        assert option in done.stdout


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1")
    assert view_command("r1").endswith("-m piw view r1")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_on_another_host_without_tokens_is_refused(cli) -> None:  # type: ignore[no-untyped-def]
    # 192.0.2.1 (TEST-NET-1) is on no interface here: nothing could listen there, and nothing tries.
    done = cli.process("view", "--serve", "--host", "192.0.2.1", "--port", str(_free_port()), timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: piw view --serve on 192.0.2.1 (not loopback) needs API tokens")
    assert "Cannot listen" not in done.stderr


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
def test_the_real_command_on_a_real_terminal(runs: Runs, tmp_path: Path) -> None:
    socket_name = f"piw-test-{os.getpid()}"
    tmux = [str(TMUX), "-L", socket_name]
    home = runs.home("completed")
    env = {key: value for key, value in os.environ.items() if not key.startswith("TMUX")}
    command = f"env PIW_HOME={home} {view_command(RUN_IDS['completed'])}"

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "view"], capture_output=True, text=True,
                              env=env).stdout  # fmt: skip

    def alive() -> bool:
        return (
            subprocess.run([*tmux, "has-session", "-t", "view"], capture_output=True, env=env).returncode == 0
        )

    subprocess.run([*tmux, "new-session", "-d", "-s", "view", "-x", "100", "-y", "30", command], env=env,
                   check=True)  # fmt: skip
    try:
        wait_for(lambda: "seq 23/23" in screen(), "the run screen")
        assert "✓ completed" in screen() and "\x1b" not in screen()
        subprocess.run([*tmux, "send-keys", "-t", "view", "5"], env=env, check=True)
        wait_for(lambda: "run_started" in screen(), "the trace pane")
        subprocess.run([*tmux, "send-keys", "-t", "view", ","], env=env, check=True)
        wait_for(lambda: "seq 22/23" in screen(), "one event back")
        subprocess.run([*tmux, "send-keys", "-t", "view", "q"], env=env, check=True)
        wait_for(lambda: not alive(), "piw view to quit")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, env=env)
