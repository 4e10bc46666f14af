"""An endless loop at a workflow file's import is an error naming the file, not a hang (issue 27 item 5).

Before the import deadline, ``while True: pass`` at the top of a ``*.workflow.py`` hung ``piw validate``, ``piw run``
(also ``--detach``), ``piw show``, ``piw graph`` and ``piw host`` for ever, and one such file in
``PIW_HOME/workflows`` hung ``piw list``. Every command here runs as a real ``piw`` process with a short deadline
(``PIW_IMPORT_TIMEOUT`` or ``import_timeout_s``) and a generous subprocess timeout, so a hang fails the test.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import Cli

GOOD = """
from piw import compute, define_workflow

workflow = define_workflow(name="good", start_at="go", nodes={"go": compute(lambda ctx: {"ok": True})})
"""

LOOPS = {
    "python-loop": "while True:\n    pass\n",
    "swallowed": "while True:\n    try:\n        pass\n    except Exception:\n        pass\n",
    "sleep": "import time\ntime.sleep(3600)\n",
}

FAST = {"PIW_IMPORT_TIMEOUT": "1"}


def _write(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.workflow.py"
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_validate_stops_an_endless_import_and_names_the_file_and_the_setting(
    cli: Cli, tmp_path: Path, loop: str
) -> None:
    path = _write(tmp_path / "flows", "spin", LOOPS[loop])
    done = cli.process("validate", str(path), env=FAST, timeout=60)
    assert done.returncode != 0
    line = _one_error_line(done.stderr)
    assert str(path) in line
    assert "longer than 1 s" in line and "PIW_IMPORT_TIMEOUT" in line


@pytest.mark.parametrize("command", [["run"], ["run", "--detach"], ["show"], ["graph"]])
def test_run_show_and_graph_stop_an_endless_import(cli: Cli, tmp_path: Path, command: list[str]) -> None:
    path = _write(tmp_path / "flows", "spin", LOOPS["python-loop"])
    done = cli.process(command[0], str(path), *command[1:], env=FAST, timeout=60)
    assert done.returncode != 0
    assert str(path) in _one_error_line(done.stderr)
    assert not (cli.home / "runs").exists() or not any((cli.home / "runs").iterdir())


def test_the_deadline_comes_from_config_toml(cli: Cli, tmp_path: Path) -> None:
    (cli.home / "config.toml").write_text("import_timeout_s = 1.5\n", encoding="utf-8")
    path = _write(tmp_path / "flows", "spin", LOOPS["python-loop"])
    done = cli.process("validate", str(path), timeout=60)
    assert done.returncode != 0
    line = _one_error_line(done.stderr)
    assert "longer than 1.5 s" in line and "import_timeout_s" in line


def test_a_bad_timeout_setting_is_one_line(cli: Cli, tmp_path: Path) -> None:
    path = _write(tmp_path / "flows", "good", GOOD)
    done = cli.process("validate", str(path), env={"PIW_IMPORT_TIMEOUT": "soon"}, timeout=60)
    assert done.returncode == 2
    assert "PIW_IMPORT_TIMEOUT" in _one_error_line(done.stderr)


@pytest.mark.long
def test_a_loop_in_c_code_ends_the_process_with_the_file_named(cli: Cli, tmp_path: Path) -> None:
    """``sum(itertools.count())`` never returns to the interpreter: the faulthandler backstop ends piw."""
    path = _write(tmp_path / "flows", "spin", "import itertools\nsum(itertools.count())\n")
    done = cli.process("validate", str(path), env={"PIW_IMPORT_TIMEOUT": "0.5"}, timeout=60)
    assert done.returncode != 0
    assert str(path) in done.stderr


@pytest.mark.long
def test_list_reports_the_file_that_timed_out_and_lists_the_rest(cli: Cli) -> None:
    folder = cli.home / "workflows"
    _write(folder, "good", GOOD)
    spin = _write(folder, "spin", LOOPS["python-loop"])
    done = cli.process("list", env=FAST, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "good" in done.stdout and "hello" in done.stdout  # the others (a built-in example too) are listed
    warnings = [line for line in done.stdout.splitlines() if line.startswith("⚠")]
    assert len(warnings) == 1 and str(spin) in warnings[0] and "longer than 1 s" in warnings[0]
    listed = json.loads(cli.process("list", "--json", env=FAST, timeout=60).stdout)
    row = next(row for row in listed if row["id"] == "spin")
    assert "longer than 1 s" in row["description"]
    assert any(row["id"] == "good" and row["description"] is None for row in listed)


@pytest.mark.long
def test_a_host_parks_a_run_whose_import_times_out_with_that_reason(cli: Cli, tmp_path: Path) -> None:
    path = _write(tmp_path / "flows", "flaky", GOOD)
    queued = cli.process("run", str(path), "--detach", env=FAST, timeout=60)
    assert queued.returncode == 0, queued.stderr
    path.write_text(LOOPS["python-loop"], encoding="utf-8")  # the host imports it in a worker thread
    host = cli.process("host", "--once", env=FAST, timeout=60)
    assert "import" in host.stdout and str(path) in host.stdout, host.stdout + host.stderr
    with sqlite3.connect(cli.home / "piw.sqlite") as db:
        reasons = [row[0] for row in db.execute("SELECT park_reason FROM run_queue")]
    assert reasons == ["import_timeout"]
    runs = cli.process("runs", timeout=60).stdout
    assert "import timeout" in runs and "source changed" not in runs


def test_imports_in_worker_threads_share_one_alarm_thread_and_a_loop_still_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host imports a workflow file in each run's thread: the deadlines of many such imports are kept by one
    alarm thread (no thread started per import), and a looping import among them is still stopped in time."""
    import threading
    import time

    from piw.workflow.import_deadline import DeadlinePassed, ImportDeadline

    outcomes: list[str] = []

    def quick() -> None:
        with ImportDeadline(5.0):
            sum(range(1000))
        outcomes.append("quick")

    def looping() -> None:
        try:
            with ImportDeadline(0.3):
                while True:
                    time.sleep(0.001)
        except DeadlinePassed:
            outcomes.append("stopped")

    others: list[str] = []
    real_start = threading.Thread.start

    def counted_start(thread: threading.Thread) -> None:
        if not thread.name.startswith("worker-"):
            others.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted_start)
    for number in range(20):
        worker = threading.Thread(target=quick, name=f"worker-{number}")
        worker.start()
        worker.join()
    started = time.monotonic()
    worker = threading.Thread(target=looping, name="worker-looping")
    worker.start()
    worker.join(timeout=10)
    assert outcomes == ["quick"] * 20 + ["stopped"]
    assert time.monotonic() - started < 5, "the looping import is stopped near its 0.3 s deadline"
    assert len(others) <= 1 and all(name == "piw-import-deadlines" for name in others), others
