"""Benchmark ``piw view`` on a long run: time to the first screen, time until the whole trace is indexed, and
peak memory, beside ``piw inspect`` of the same run.

    python bench/bench_view.py [--events 1000000] [--runs 3] [--shape monitor|loop|both]

Two shapes of run are measured:

- **monitor**: a long action publishing progress (three tracks) with a step every 1,000 events — the shape of
  a long-running, watched agent run (1,000 steps at 1,000,000 events);
- **loop**: ``bench/bundles.py``'s compute loop (node_started/node_finished pairs: 500,000 steps at 1,000,000
  events), the worst case for the state the first screen needs.

Three openings of each are measured, each in fresh processes:

- **fresh**: ``state.json`` and no fold checkpoints (a run left by a piw before its writer left checkpoints), so the
  first screen comes from ``state.json`` and the end of the trace; the trace is then indexed in a worker thread;
- **warm**: after ``piw inspect``, which leaves fold checkpoints (as the run's writer now does as it goes): a long
  ``state.json`` (the loop's) gives way to the newest checkpoint and the events after it; a short one (the
  monitor's) is still the one read;
- **cold**: ``state.json`` deleted: the first screen comes from the checkpoints, or without them says it is
  replaying and fills in when the index is done.

A child process imports the app, opens the run headless at 120×40 (Textual's ``run_test``), and reports: seconds
from process start to the first painted run screen, seconds until the index (offsets, fold checkpoints) is
complete, and the peak resident size. ``piw inspect RUN`` (the state view) is run the same way for the memory
target. Best (lowest) of ``--runs`` fresh processes; it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

START = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parent))


def peak_mb() -> float:
    """This process's own peak resident size (``VmHWM``). Not ``ru_maxrss``: Linux keeps that across ``exec``, so a
    child forked from this bench, which holds a folded million-event run, would report the bench's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(home: str, run_id: str) -> None:
    """Open the run in the viewer headless; print timings and peak RSS as JSON."""
    import asyncio

    from piw.app.run_screen import RunScreen
    from piw.app.text import screen_text
    from piw.app.viewer import ViewerApp

    result: dict[str, float] = {}

    async def main() -> None:
        app = ViewerApp(Path(home), run_id, refresh_s=0, follow=False)
        display = app._display

        def first_frame(screen: Any, renderable: Any) -> None:
            # Headless, Textual composes every frame and skips only the write to the terminal: the first frame of
            # the run screen, turned into terminal bytes here as a terminal would get them, is the first screen.
            # (Not the first ``pilot.pause()``: that waits until the process is idle, up to a second, and the
            # index worker keeps it busy, so it measured the index pass rather than the screen.)
            if "first_screen_s" not in result and isinstance(screen, RunScreen) and renderable is not None:
                renderable.render_segments(app.console)
                took, cpu, rss = time.perf_counter() - START, time.process_time(), peak_mb()
                if "seq " in screen_text(app):
                    result.update(first_screen_s=took, cpu_first_s=cpu, rss_first_mb=rss)
            display(screen, renderable)

        app._display = first_frame  # type: ignore[method-assign]
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, RunScreen), type(screen)
            while "first_screen_s" not in result:
                await pilot.pause(0.01)
            while not screen.indexed_drawn:
                await pilot.pause(0.05)
            await pilot.pause()
            result["indexed_s"] = time.perf_counter() - START
            result["cpu_indexed_s"] = time.process_time()
            await pilot.press("5", "left_square_bracket")  # time travel 5 % back, in the trace pane
            await pilot.pause()
            while screen.replaying is not None:
                await pilot.pause(0.05)
            await pilot.pause()
            result["travel_s"] = time.perf_counter() - START - result["indexed_s"]
            assert "time travel" in screen_text(app)
            started = time.perf_counter()
            await pilot.press("comma")  # one more event back: from the checkpoint the jump left
            await pilot.pause()
            result["step_back_s"] = time.perf_counter() - started

    asyncio.run(main())
    result["rss_peak_mb"] = peak_mb()
    print(json.dumps(result))


def make_monitor_bundle(home: Path, events: int) -> str:
    """A running-then-completed run: one long action's progress updates, with a short step every 1,000 events."""
    from bundles import _at

    from piw.store.trace import TraceEvent

    run_id = f"20260101T000000000Z-monitor-{events:08x}"
    bundle = home / "runs" / run_id
    (bundle / "session").mkdir(parents=True, mode=0o700)
    nodes = {"watch": {"nodeType": "action"}, "check": {"nodeType": "compute"}}
    edges = [{"from": "watch", "to": "check"}, {"from": "check", "to": "watch", "when": "again"}]
    snapshot = {"schema": "pi-workflows.definition-snapshot.v1", "name": "monitor", "startAt": "watch",
                "nodes": nodes, "edges": edges}  # fmt: skip
    (bundle / "workflow.json").write_text(json.dumps(snapshot), encoding="utf-8")
    manifest = {"schema": "pi-workflows.run-bundle.v1", "runId": run_id, "workflowName": "monitor"}
    (bundle / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with (bundle / "trace.ndjson").open("wb", buffering=1 << 20) as out:
        seq = 0

        def put(scope: str, kind: str, payload: dict[str, object], node: str | None = None,
                attempt: str | None = None) -> None:  # fmt: skip
            nonlocal seq
            seq += 1
            out.write(TraceEvent(seq, _at(seq), scope, kind, run_id, payload, node, attempt).encode())

        put("run", "run_started", {"workflowName": "monitor", "runTitle": "Long watch", "input": {}})
        visit = 0
        while seq < events - 5:
            visit += 1
            attempt = f"w{visit:08d}"
            put("node", "node_started", {"nodeType": "action"}, "watch", attempt)
            for _ in range(994):
                key = ("rows", "files", "overall")[seq % 3]
                data = {"schema": "pi-workflows.progress.v1", "status": "running", "label": key.title(),
                        "completed": seq, "total": events * 2, "unit": key}  # fmt: skip
                put("node", "update_published", {"updateId": f"u{seq}", "type": "progress", "key": key,
                                                  "data": data}, "watch", attempt)  # fmt: skip
                if seq >= events - 5:
                    break
            put("node", "node_finished", {"outcome": "ok", "durationMs": 1, "output": {"visit": visit}},
                "watch", attempt)  # fmt: skip
            check = f"c{visit:08d}"
            put("node", "node_started", {"nodeType": "compute"}, "check", check)
            put("node", "node_finished", {"outcome": "ok", "durationMs": 0, "output": {"route": "again"}},
                "check", check)  # fmt: skip
        put("run", "run_completed", {"status": "completed", "finalOutput": {"visits": visit}})
    return run_id


def inspect_peak(home: Path, run_id: str) -> tuple[float, float]:
    """Seconds and peak RSS (MB) of ``piw inspect RUN`` in a fresh process."""
    # A wrapper process of its own: RUSAGE_CHILDREN is the largest of *all* children so far, so asked here it
    # would report an earlier viewer child's peak instead of inspect's.
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "started = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True)\n"
        "assert 'run ' in done.stdout\n"
        "print(time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
        # (forked from this small wrapper, so its ru_maxrss is its own)
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper, sys.executable, "-m", "piw", "inspect", run_id],
        env={**os.environ, "PIW_HOME": str(home)},
        capture_output=True,
        text=True,
        check=True,
    )
    took, peak = (float(value) for value in done.stdout.split())
    return took, peak


def measure(home: Path, run_id: str, runs: int) -> dict[str, float]:
    results = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(home), run_id],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {key: min(r[key] for r in results) for key in results[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shape", choices=("monitor", "loop", "both"), default="both")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    from bundles import make_bundle

    print(f"piw view, best of {args.runs} fresh processes each, headless at 120×40")
    for shape in ("monitor", "loop") if args.shape == "both" else (args.shape,):
        with tempfile.TemporaryDirectory(
            prefix="piw-bench-view-", dir=os.environ.get("PIW_BENCH_DIR")
        ) as tmp:
            home = Path(tmp)
            run_id = (
                make_monitor_bundle(home, args.events)
                if shape == "monitor"
                else make_bundle(home, args.events)
            )
            report(shape, home, run_id, args.runs)
    print("targets: first screen < 2 s; peak memory within inspect's (issue 12: cold replay peak <= 200 MB)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall times stretch)")


def report(shape: str, home: Path, run_id: str, runs: int) -> None:
    """Measure one run cold (no state.json), then warm, beside inspect."""
    from piw.store.bundle import open_bundle
    from piw.store.fold import fold
    from piw.store.trace import iter_trace

    bundle = open_bundle(home, run_id)
    size = bundle.trace_path.stat().st_size / 1e6
    state = fold(iter_trace(bundle.trace_path))
    print(f"{shape}: {state.trace_seq:,} events, {len(state.steps):,} steps, {size:.0f} MB trace")
    bundle.write_state(state)
    del state
    fresh = measure(home, run_id, runs)
    inspect_s, inspect_mb = inspect_peak(home, run_id)
    warm = measure(home, run_id, runs)
    bundle.state_path.unlink()
    cold = measure(home, run_id, runs)
    openings = (
        ("state.json only (older piw)", fresh),
        ("+ checkpoints (as written)", warm),
        ("cold (no state.json)", cold),
    )
    for name, result in openings:
        print(
            f"  {name:21} first screen {result['first_screen_s']:.2f} s wall, {result['cpu_first_s']:.2f} s CPU "
            f"(RSS {result['rss_first_mb']:.0f} MB) · trace indexed {result['indexed_s']:.1f} s wall, "
            f"{result['cpu_indexed_s']:.1f} s CPU · jump 5 % back {result['travel_s']:.2f} s, then one event "
            f"back {result['step_back_s']:.2f} s · peak RSS {result['rss_peak_mb']:.0f} MB"
        )
    print(f"  piw inspect (state view, cold)  {inspect_s:.1f} s wall · peak RSS {inspect_mb:.0f} MB")


if __name__ == "__main__":
    main()
