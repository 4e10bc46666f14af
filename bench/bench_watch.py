"""Benchmark the viewer: ``piw watch`` latency (trace append → updated frame) and ``inspect --view graph``.

Prints its figures; it asserts nothing (timings belong in a benchmark, never in a test).

    python bench/bench_watch.py [--appends 200]

Watch latency: a watcher follows a real run bundle in a background thread (watchfiles, then the polling
fallback); the main thread appends one ``update_published`` line at a time and measures from just before the
append until the watcher has folded it and rendered the frame that shows it. Graph: a 100-node workflow is run
through the engine once, then ``inspect --view graph`` is timed in-process (load, fold, layout, render) and as
a whole ``piw`` command (interpreter start-up included).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console

from piw.cli.watch import Watcher
from piw.run.runner import ForegroundOptions, start_run
from piw.store.bundle import Bundle, WriterLock
from piw.store.trace import TraceEvent, last_seq
from piw.views import load_run, view_for
from piw.views.frame import FrameView

RUN_ID = "20260101T000000000Z-bench-00000001"


def _bundle(home: Path) -> Bundle:
    path = home / "runs" / RUN_ID
    (path / "session").mkdir(parents=True)
    snapshot = {"schema": "pi-workflows.definition-snapshot.v1", "name": "bench", "startAt": "work",
                "nodes": {"work": {"nodeType": "action"}}, "edges": []}  # fmt: skip
    (path / "workflow.json").write_text(json.dumps(snapshot), encoding="utf-8")
    manifest = {"schema": "pi-workflows.run-bundle.v1", "runId": RUN_ID, "workflowName": "bench"}
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with (path / "trace.ndjson").open("wb") as out:
        out.write(
            TraceEvent(
                1, _at(1), "run", "run_started", RUN_ID, {"workflowName": "bench", "input": {}}
            ).encode()
        )
        out.write(
            TraceEvent(
                2, _at(2), "node", "node_started", RUN_ID, {"nodeType": "action"}, "work", "a1"
            ).encode()
        )
    return Bundle(RUN_ID, path)


def _at(seq: int) -> str:
    moment = datetime.now(UTC) - timedelta(seconds=5) + timedelta(milliseconds=seq)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _update(seq: int, total: int, run_id: str = RUN_ID) -> bytes:
    data = {"schema": "pi-workflows.progress.v1", "status": "running", "label": "Rows", "completed": seq,
            "total": total + 10, "unit": "rows"}  # fmt: skip
    payload = {"updateId": f"u{seq}", "type": "progress", "key": "rows", "data": data}
    return TraceEvent(seq, _at(seq), "node", "update_published", run_id, payload, "work", "a1").encode()


def watch_latency(appends: int, polling: bool) -> list[float]:
    """Milliseconds from each append to the rendered frame that includes it (a two-event run)."""
    with tempfile.TemporaryDirectory() as tmp:
        return watch_latency_on(_bundle(Path(tmp)).path, appends, polling)


def watch_latency_on(path: Path, appends: int, polling: bool = False) -> list[float]:
    """Append→frame milliseconds for a watcher following the bundle at ``path`` (any length of trace)."""
    bundle = Bundle(path.name, path)
    first = last_seq(bundle.trace_path) or 0
    seen = {"seq": 0}
    changed = threading.Condition()
    plain = Console(file=io.StringIO(), width=100, height=50, color_system=None)

    def on_frame(frame: FrameView) -> None:
        plain.print(frame)  # the rendering a terminal would get, so the figure includes it
        plain.file = io.StringIO()
        with changed:
            seen["seq"] = frame.model.state.trace_seq
            changed.notify_all()

    terminal = Console(file=io.StringIO(), width=100, height=50, force_terminal=True)
    # This process writes the run, so it holds the run's writer lock as piw's writer does: a watcher stops
    # following a running run that no process writes.
    lock = WriterLock(bundle).acquire()
    watcher = Watcher(bundle, terminal, interactive=True, force_polling=polling, on_frame=on_frame)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    with changed:
        changed.wait_for(lambda: seen["seq"] >= first, timeout=600)
    time.sleep(0.3)  # let the watcher register its file watch (appends before that show at the 1 s tick)
    latencies = []
    with bundle.trace_path.open("ab") as out:
        for seq in range(first + 1, first + appends + 1):
            line = _update(seq, appends, path.name)
            started = time.perf_counter()
            out.write(line)
            out.flush()
            with changed:
                changed.wait_for(lambda seq=seq: seen["seq"] >= seq, timeout=10)  # type: ignore[misc]
            latencies.append((time.perf_counter() - started) * 1000)
            time.sleep(0.01)
    stop.set()
    thread.join(timeout=5)
    lock.release()
    return latencies


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


WORKFLOW_100 = """
from piw import compute, define_workflow, edge, switch

nodes = {f"step_{i:03d}": compute({"route": "next", "i": i}) for i in range(100)}
edges = []
for i in range(99):
    if i % 10 == 9:
        edges.append(switch(f"step_{i:03d}", on="$.route", cases={"next": f"step_{i + 1:03d}",
                                                                 "back": f"step_{i - 5:03d}"}))
    else:
        edges.append(edge(f"step_{i:03d}", f"step_{i + 1:03d}"))
workflow = define_workflow(name="hundred", start_at="step_000", nodes=nodes, edges=edges, max_steps=200)
"""


def graph_timing(repeats: int = 20) -> tuple[float, float, float]:
    """(in-process median ms, in-process max ms, whole-command median ms) for ``inspect --view graph``."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        workflow = Path(tmp) / "hundred.workflow.py"
        workflow.write_text(WORKFLOW_100, encoding="utf-8")
        state = start_run(str(workflow), home, {}, None, ForegroundOptions())
        inside = []
        for _ in range(repeats):
            started = time.perf_counter()
            run = load_run(home, state.run_id)
            Console(file=io.StringIO(), width=80, color_system=None).print(view_for("graph", run))
            inside.append((time.perf_counter() - started) * 1000)
        env = {**os.environ, "PIW_HOME": str(home), "COLUMNS": "80"}
        command = [
            sys.executable,
            "-c",
            "import sys; from piw.cli.main import main; sys.argv[0]='piw'; main()",
        ]
        whole = []
        for _ in range(5):
            started = time.perf_counter()
            subprocess.run(
                [*command, "inspect", state.run_id, "--view", "graph"], env=env, capture_output=True
            )
            whole.append((time.perf_counter() - started) * 1000)
    return statistics.median(inside), max(inside), statistics.median(whole)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--appends", type=int, default=200)
    args = parser.parse_args()
    for polling in (False, True):
        latencies = watch_latency(args.appends, polling)
        mode = "polling fallback" if polling else "watchfiles"
        p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
        print(f"watch latency ({mode}, {len(latencies)} appends): p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
              f"max {max(latencies):.1f} ms (target p95 <= 100 ms)")  # fmt: skip
    median, worst, whole = graph_timing()
    print(f"inspect --view graph, 100-node workflow: {median:.1f} ms median in-process (max {worst:.1f} ms), "
          f"{whole:.0f} ms as a whole 'piw' command")  # fmt: skip


if __name__ == "__main__":
    main()
