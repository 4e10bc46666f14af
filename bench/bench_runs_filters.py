"""``piw runs`` with each filter on 10,000 runs, and ``piw gc`` of 1,000 runs (issue 33; ``docs/cli.md``).

Run ``python bench/bench_runs_filters.py`` (``--runs N``, default 10,000; ``--gc N``, default 1,000). It writes a
home of ``N`` runs directly (bundles with a small valid trace and their index rows: ``tests/support/generated.py``),
then prints, measured in this one run on this machine:

- in-process, warm: the median of 5 calls of ``find_runs`` (what ``piw runs`` and ``GET /api/runs`` call) for each
  filter, and how many runs it returned;
- end to end, warm: ``piw runs --json`` with that filter as a fresh process, the median of 3 (after one warm-up);
- ``piw gc --older-than 1d`` of a separate home of ``--gc`` whole runs, in process: runs removed per second and
  the space freed; and the same pass with ``--export``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from piw.store.db.database import close_databases
from piw.store.history import find_runs
from piw.store.retention import GcPlan, run_gc
from piw.store.run_query import RunQuery
from tests.support.generated import BASE_MS, plan_runs, write_home

HOUR = 3_600_000
FILTERS: list[tuple[str, RunQuery, list[str]]] = [
    ("no filter", RunQuery(), []),
    ("--limit 20", RunQuery(limit=20), ["--limit", "20"]),
    ("--workflow digest", RunQuery(workflow="digest"), ["--workflow", "digest"]),
    ("--status failed,cancelled", RunQuery(statuses=("failed", "cancelled")), ["--status", "failed,cancelled"]),
    ("--status waiting", RunQuery(statuses=("waiting",)), ["--status", "waiting"]),
    ("--since/--until (1 day)", RunQuery(since_ms=BASE_MS + 24 * HOUR, until_ms=BASE_MS + 48 * HOUR),
     ["--since", "2026-05-29T02:13:20", "--until", "2026-05-30T02:13:20"]),
    ("--search zürich", RunQuery(search="zürich"), ["--search", "zürich"]),
    ("--parent RUN", RunQuery(parent="placeholder"), ["--parent", "placeholder"]),
    ("--schedule nightly", RunQuery(schedule="nightly"), ["--schedule", "nightly"]),
]  # fmt: skip


def median_ms(action: object, times: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds (CPU of this process and its children: on a loaded machine the wall
    figure measures the load, the CPU one what piw does)."""
    walls, cpus = [], []
    for _ in range(times):
        started, cpu = time.perf_counter(), _cpu()
        action()  # type: ignore[operator]
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append((_cpu() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bench_filters(home: Path, count: int) -> None:
    runs = plan_runs(count)
    started = time.perf_counter()
    write_home(home, runs, whole=False)
    print(f"generated {count} runs in {time.perf_counter() - started:.1f} s")
    parent = next(run.parent for run in reversed(runs) if run.parent)
    env = {**os.environ, "PIW_HOME": str(home), "NO_COLOR": "1"}
    command = [str(Path(sys.executable).with_name("piw")), "runs", "--json"]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'filter':<28} {'runs':>6} {'in-process ms (cpu)':>20} {'piw runs --json ms (cpu)':>25}")
    for label, query, args in FILTERS:
        if query.parent == "placeholder":
            query = RunQuery(parent=parent)
            args = ["--parent", str(parent)]
        find_runs(home, query)  # warm
        found = len(find_runs(home, query))
        inside, inside_cpu = median_ms(lambda query=query: find_runs(home, query), 5)
        subprocess.run([*command, *args], env=env, capture_output=True, check=True)  # warm
        outside, outside_cpu = median_ms(
            lambda args=args: subprocess.run([*command, *args], env=env, capture_output=True, check=True), 3
        )
        print(
            f"{label:<28} {found:>6} {inside:>10.1f} ({inside_cpu:>6.1f}) {outside:>15.1f} ({outside_cpu:>6.1f})"
        )


def bench_gc(home: Path, count: int, export: Path | None) -> None:
    write_home(home, plan_runs(count))
    plan = GcPlan.parse("1d", ["completed,failed,cancelled,timed_out,waiting"], None)
    started = time.perf_counter()
    result = run_gc(home, plan, export_dir=export)
    elapsed = time.perf_counter() - started
    what = "gc --export" if export is not None else "gc"
    print(
        f"{what}: removed {len(result.removed)} runs in {elapsed:.2f} s ({len(result.removed) / elapsed:.0f} runs/s), "
        f"freed {result.freed / 1024:.0f} KiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--gc", type=int, default=1_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        bench_filters(root / "filters", args.runs)
        close_databases()
        bench_gc(root / "gc", args.gc, None)
        close_databases()
        bench_gc(root / "gc-export", args.gc, root / "archive")
        close_databases()


if __name__ == "__main__":
    main()
