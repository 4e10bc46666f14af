"""Live export: ``[telemetry] otlp_endpoint`` makes a run send its spans as attempts finish (``docs/telemetry.md``).

Real ``piw run`` subprocesses (the exporter's last spans leave when the process ends) against the loopback OTLP/HTTP
receiver; with the collector down the run still completes, and ``piw inspect`` shows what was dropped.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.otlp_receiver import OtlpReceiver


@pytest.fixture
def receiver() -> OtlpReceiver:
    with OtlpReceiver() as running:
        yield running


def _configure(home: Path, endpoint: str) -> None:
    (home / "config.toml").write_text(f'[telemetry]\notlp_endpoint = "{endpoint}"\n', encoding="utf-8")


def _run(cli: Cli, *args: str, env: dict[str, str] | None = None) -> str:
    done = cli.process("run", "triage", "--provider", "scripted", "--json", *args, env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return str(json.loads(done.stdout)["runId"])


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_live_run_sends_the_same_spans_an_export_would(
    cli: Cli, receiver: OtlpReceiver, piw_home: Path
) -> None:
    _configure(piw_home, receiver.endpoint)
    run_id = _run(cli)

    assert receiver.wait_for(lambda r: len(r.unique()) == 6)
    live = receiver.unique()
    (run,) = receiver.named("run ")
    assert run.attributes["piw.run_id"] == run_id and run.attributes["piw.status"] == "completed"
    assert {s.attributes["piw.node_id"] for s in receiver.named("invoke_agent ")} == {"classify", "bug"}

    exported = cli("export", run_id, "--otlp", receiver.endpoint)
    assert exported.returncode == 0, exported.stderr
    assert receiver.unique().keys() == live.keys()  # after the fact: the same ids, still one set

    state = cli.json("inspect", run_id)
    assert state["telemetry"]["sent"] == 6 and state["telemetry"]["dropped"] == 0
    shown = cli("inspect", run_id)
    assert f"telemetry 6 spans sent to {receiver.endpoint}" in shown.stdout


def test_the_environment_variable_turns_live_export_on(cli: Cli, receiver: OtlpReceiver) -> None:
    run_id = _run(cli, env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    assert receiver.wait_for(lambda r: len(r.unique()) == 6)
    assert {s.attributes["piw.run_id"] for s in receiver.unique().values()} == {run_id}


def test_a_collector_that_is_down_never_fails_the_run(cli: Cli, piw_home: Path) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    _configure(piw_home, endpoint)
    run_id = _run(cli)

    state = cli.json("inspect", run_id)
    assert state["status"] == "completed"
    assert state["telemetry"]["sent"] == 0 and state["telemetry"]["dropped"] == 6
    shown = cli("inspect", run_id)
    assert f"telemetry 0 spans sent to {endpoint}, 6 dropped (the collector was unreachable)" in shown.stdout


def test_no_endpoint_leaves_no_telemetry_file(cli: Cli, piw_home: Path) -> None:
    run_id = _run(cli)
    assert not (piw_home / "runs" / run_id / "telemetry.json").exists()
    assert "telemetry" not in cli.json("inspect", run_id)


MODULES_AFTER = (
    "import sys, contextlib, io, json\n"
    "from piw.cli.main import main\n"
    "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
    "    main(sys.argv[1:])\n"
    "print(json.dumps(sorted(sys.modules)))\n"
)


def test_a_run_without_an_endpoint_imports_no_telemetry(cli: Cli) -> None:
    """Start-up: the span builder, the exporter and the SDK load only for a home that exports (docs/telemetry.md)."""
    done = subprocess.run(
        [sys.executable, "-c", MODULES_AFTER, "run", "triage", "--provider", "scripted"],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli.environment(),
        cwd=cli.cwd,
        check=True,
    )
    modules = set(json.loads(done.stdout.splitlines()[-1]))
    assert "piw.telemetry.hook" in modules  # the run asked, and was told no
    assert not {"piw.telemetry.live", "piw.telemetry.spans", "piw.telemetry.otlp"} & modules
    assert not {name for name in modules if name.startswith("opentelemetry")}


def test_a_host_exports_the_runs_it_executes(cli: Cli, receiver: OtlpReceiver) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    queued = cli.process("run", "hello", "--detach", "--json", env=env)
    assert queued.returncode == 0, queued.stderr
    run_id = json.loads(queued.stdout)["runId"]
    host = cli.process("host", "--once", env=env)
    assert host.returncode == 0, host.stderr
    assert receiver.wait_for(lambda r: len(r.named("run ")) == 1)
    names = sorted(span.name for span in receiver.unique().values())
    assert names == ["action echo", "compute greet", "notify tell", "run hello"]
    assert {span.attributes["piw.run_id"] for span in receiver.unique().values()} == {run_id}
