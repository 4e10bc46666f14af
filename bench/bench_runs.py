"""``piw runs`` with many runs: the ``runs`` index in ``piw.sqlite`` against folding every bundle (the old way).

Run ``python bench/bench_runs.py`` (``--runs N``, default 1,000; ``--home DIR`` keeps the generated home, and an
existing home with runs is reused). It creates ``N`` small completed runs (three steps each, durability
``flush``), then prints, measured in this one run on this machine:

- in-process: the median of 5 listings through the index (``run_summaries``: one SELECT, one ``stat`` per bundle)
  against 5 folds of every bundle (``folded_summaries``: ``state.json`` plus the trace tail of each);
- end to end: ``piw runs --json`` as a fresh process against a fresh process that folds every bundle, the median
  of 5 runs each, interleaved, after one warm-up each (byte-compiled modules, as an installed piw has them);
- the one-off cost of rebuilding the index from the bundles (what happens when ``piw.sqlite`` is missing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from piw.run.runner import ForegroundOptions, start_run
from piw.store.db.database import close_databases
from piw.store.db.index import rebuild_run_index
from piw.store.history import folded_summaries, run_summaries

FLOW = """
from piw import compute, define_workflow, edge

workflow = define_workflow(
    name="listed",
    start_at="a",
    nodes={"a": compute(lambda ctx: {"n": 1}), "b": compute(lambda ctx: {"n": 2}),
           "c": compute(lambda ctx: {"done": True})},
    edges=[edge("a", "b"), edge("b", "c")],
)
"""

FOLD_CHILD = (
    "import sys, json; from pathlib import Path; from piw.store.history import folded_summaries; "
    "rows = folded_summaries(Path(sys.argv[1])); sys.stdout.write(json.dumps([r.to_json() for r in rows]))"
)


def make_runs(home: Path, count: int) -> None:
    existing = len(list((home / "runs").glob("*-listed-*"))) if (home / "runs").is_dir() else 0
    flow = home.parent / "listed.workflow.py"
    flow.write_text(FLOW, encoding="utf-8")
    started = time.perf_counter()
    for n in range(existing, count):
        start_run(str(flow), home, {}, f"run {n}", ForegroundOptions(durability="flush", record_origin=False))
    if count > existing:
        print(f"created {count - existing} runs in {time.perf_counter() - started:.1f} s")


def median_s(call: object, repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()  # type: ignore[operator]
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def process_s(command: list[str], env: dict[str, str], repeat: int = 5) -> list[float]:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        subprocess.run(command, env=env, capture_output=True, check=True)
        samples.append(time.perf_counter() - began)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args()
    os.environ.pop("PIW_DURABILITY", None)
    with tempfile.TemporaryDirectory(prefix="piw-bench-runs-") as tmp:
        home = (args.home or Path(tmp) / "home").resolve()
        home.mkdir(parents=True, exist_ok=True)
        os.environ["PIW_HOME"] = str(home)
        make_runs(home, args.runs)
        close_databases()
        (home / "piw.sqlite").unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(f"{home / 'piw.sqlite'}{suffix}").unlink(missing_ok=True)
        began = time.perf_counter()
        rebuilt = rebuild_run_index(home)
        print(
            f"index rebuilt from {rebuilt} bundles in {time.perf_counter() - began:.2f} s (database missing)"
        )
        count = len(list(run_summaries(home)))
        assert count == len(folded_summaries(home)) == rebuilt, "index and fold disagree"
        indexed = median_s(lambda: list(run_summaries(home)))
        folded = median_s(lambda: folded_summaries(home))
        print(f"in-process, {count} runs (median of 5):")
        print(f"  index (run_summaries):         {indexed * 1000:8.1f} ms")
        print(
            f"  fold every bundle (old way):   {folded * 1000:8.1f} ms   = {folded / indexed:.1f} × the index"
        )
        # Byte-compiled modules, as an installed piw has them (this machine may set PYTHONDONTWRITEBYTECODE).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PIW_HOME=str(home), NO_COLOR="1")
        piw = [str(Path(sys.executable).with_name("piw")), "runs", "--json"]
        fold = [sys.executable, "-c", FOLD_CHILD, str(home)]
        process_s(piw, env, 1), process_s(fold, env, 1)  # warm-up: compile, fill the page cache
        index_runs: list[float] = []
        fold_runs: list[float] = []
        for _ in range(5):  # interleaved, so a drifting machine affects both alike
            index_runs += process_s(piw, env, 1)
            fold_runs += process_s(fold, env, 1)
        index_med, fold_med = statistics.median(index_runs), statistics.median(fold_runs)
        print("end to end, a fresh process each (median of 5, interleaved):")
        print(f"  piw runs --json:               {index_med * 1000:8.1f} ms  (range "
              f"{min(index_runs) * 1000:.0f}–{max(index_runs) * 1000:.0f})")  # fmt: skip
        print(f"  python: fold every bundle:     {fold_med * 1000:8.1f} ms  (range "
              f"{min(fold_runs) * 1000:.0f}–{max(fold_runs) * 1000:.0f})")  # fmt: skip
        if args.home is None:
            print(f"(runs were generated in {home}, removed now; pass --home DIR to keep them)")


if __name__ == "__main__":
    main()
