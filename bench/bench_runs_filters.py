"""``piw runs`` with each filter on 10,000 runs, and ``piw gc`` of 1,000 runs (issue 33; ``docs/cli.md``).

Run ``python bench/bench_runs_filters.py`` (``--runs N``, default 10,000; ``--gc N``, default 1,000). It writes a
home of ``N`` runs directly (bundles with a small valid trace and their index rows: ``tests/support/generated.py``),
then prints, measured in this one run on this machine:

- in-process, warm: the median of 5 calls of ``find_runs`` (what ``piw runs`` and ``GET /api/runs`` call) for each
  filter, and how many runs it returned;
- end to end, warm: ``piw runs --json`` with that filter as a fresh process, the median of 3 (after one warm-up);
  with ``--baseline PIW`` (another checkout's ``piw`` executable), that ``piw`` on the same home too, the two
  taken in turn, printed beside it;
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


def _whole(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one ``piw runs`` process (its own user + system time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, capture_output=True, check=True)
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000


def bench_filters(home: Path, count: int, baseline: str | None, times: int) -> None:
    runs = plan_runs(count)
    started = time.perf_counter()
    write_home(home, runs, whole=False)
    print(f"generated {count} runs in {time.perf_counter() - started:.1f} s")
    parent = next(run.parent for run in reversed(runs) if run.parent)
    env = {**os.environ, "PIW_HOME": str(home), "NO_COLOR": "1"}
    sides = {
        "piw": str(Path(sys.executable).with_name("piw")),
        **({"baseline": baseline} if baseline else {}),
    }
    print(f"load average {' '.join(f'{load:.1f}' for load in os.getloadavg())} on {os.cpu_count()} cores")
    heading = "".join(f" {f'{side} runs --json ms (cpu)':>27}" for side in sides)
    print(f"{'filter':<28} {'runs':>6} {'in-process ms (cpu)':>20}{heading}")
    for label, query, args in FILTERS:
        if query.parent == "placeholder":
            query = RunQuery(parent=parent)
            args = ["--parent", str(parent)]
        find_runs(home, query)  # warm
        found = len(find_runs(home, query))
        inside, inside_cpu = median_ms(lambda query=query: find_runs(home, query), 5)
        whole: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        for piw in sides.values():
            _whole([piw, "runs", "--json", *args], env)  # warm
        for _ in range(times):
            for side, piw in sides.items():  # in turn: a change in the machine's load hits both
                whole[side].append(_whole([piw, "runs", "--json", *args], env))
        shown = "".join(
            f" {statistics.median(w for w, _ in got):>18.1f} ({statistics.median(c for _, c in got):>6.1f})"
            for got in whole.values()
        )
        print(f"{label:<28} {found:>6} {inside:>10.1f} ({inside_cpu:>6.1f}){shown}")


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
    parser.add_argument("--baseline", help="another piw executable to time beside this one, on the same home")
    parser.add_argument(
        "--times", type=int, default=3, help="whole piw runs processes timed per filter and side"
    )
    parser.add_argument("--no-gc", action="store_true", help="time the filters only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        bench_filters(root / "filters", args.runs, args.baseline, args.times)
        close_databases()
        if args.no_gc:
            return
        bench_gc(root / "gc", args.gc, None)
        close_databases()
        bench_gc(root / "gc-export", args.gc, root / "archive")
        close_databases()


if __name__ == "__main__":
    main()
