"""The trace in PostgreSQL: fenced appends and per-step cost against SQLite mode (docs/many-machines.md, limits).

Prints, beside the local fdatasync floor measured in the same run (one ~250-byte line appended and fsync'd):

- the fenced append (``piw.store.pg.run_store``: one statement per event, with the mirror line written after it)
  p50/p99 and events/s for 1, 4 and 16 writer processes, each appending to its own run, synchronous commit;
  for 1 writer with asynchronous commit; and for 1 writer of ride-along lines, which wait for the next statement
  (up to 64 lines in one);
- the per-step cost (median gap between ``node_finished`` events, and the mean over the whole run) of a loop of
  compute steps and of trivial action steps under ``effects``, in SQLite mode and in database mode, and their
  ratio.

Targets: a compute step ≤ 1 ms in database mode on loopback; an action step ≤ 3 × SQLite mode. The server is a
throwaway one (``tests/support/pg.py``) switched to ``fsync = on`` so that a synchronous commit really reaches the
disk, unless ``--url`` names another. Not a test: figures only.

    python bench/bench_pg_trace.py [--events 400] [--steps 300] [--url postgresql://…]
"""

from __future__ import annotations

import argparse
import multiprocessing
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_engine import fsync_append_ms, step_overhead  # noqa: E402
from piw.store.db.rows import Claim  # noqa: E402
from piw.store.pg.connection import PgDatabase  # noqa: E402
from piw.store.pg.mirror import Mirrors, autocommit  # noqa: E402
from piw.store.pg.run_store import PgRunStores  # noqa: E402
from piw.store.pg.setting import DatabaseSetting  # noqa: E402
from piw.store.trace import TraceEvent  # noqa: E402
from piw.wire_models import Manifest  # noqa: E402


class _Held:
    def __init__(self, run_id: str) -> None:
        self.claim = Claim(run_id, "tok", 1, "bench", 0)

    def fence(self) -> None:
        pass


def writer(url: str, schema: str, index: int, events: int, mode: str, out: Any, go: Any) -> None:
    """One process appending ``events`` lines to its own run; puts (latencies, wall seconds) on ``out``.

    ``mode``: ``sync`` (each line a synchronous commit), ``async`` (each line its own asynchronous statement) or
    ``held`` (ride-along lines, held for the next statement: the wall time includes sending the last ones)."""
    db = PgDatabase.open(DatabaseSetting(url, schema), migrate=False, pool_size=2)
    run_id = f"20260101T000000000Z-bench-{index:08x}"
    with autocommit(db) as conn:
        conn.execute(
            "INSERT INTO run_queue (run_id, status, serve_key, claim_token, claim_generation, claim_expires_at, "
            "created_at, updated_at) VALUES (%s, 'running', 'k', 'tok', 1, now_ms() + 600000, now_ms(), now_ms())",
            (run_id,),
        )
    home = Path(tempfile.mkdtemp(prefix="piw-bench-"))
    manifest = Manifest(
        run_id=run_id, workflow_name="bench", workflow_source={}, definition_digest="d", started_at="2026"
    )
    store = PgRunStores(db, Mirrors.open(db, home)).create(run_id, {}, manifest).acquire(_Held(run_id))
    payload = {"output": {"text": "x" * 120}}
    lines = [
        TraceEvent(
            seq, "2026-01-01T00:00:00.000Z", "node", "node_finished", run_id, payload, "s", "a"
        ).encode()
        for seq in range(1, events + 1)
    ]
    go.wait()
    latencies: list[float] = []
    started = time.perf_counter()
    for line in lines:
        before = time.perf_counter()
        store.append(line, sync=mode == "sync", ride_along=mode == "held")
        latencies.append(time.perf_counter() - before)
    store.send_held()
    wall = time.perf_counter() - started
    store.release()
    db.close()
    out.put((latencies, wall))


def appends(url: str, writers: int, events: int, mode: str) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, events/s in total) for ``writers`` processes."""
    schema = "bench_" + secrets.token_hex(4)
    PgDatabase.open(DatabaseSetting(url, schema)).close()  # the schema, created once
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    go = context.Event()
    processes = [
        context.Process(target=writer, args=(url, schema, index, events, mode, out, go))
        for index in range(writers)
    ]
    for process in processes:
        process.start()
    time.sleep(1.0 + 0.2 * writers)  # every writer connected and ready
    go.set()
    results = [out.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    latencies = sorted(value for found, _ in results for value in found)
    wall = max(elapsed for _, elapsed in results)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return statistics.median(latencies) * 1000, p99 * 1000, len(latencies) / wall


def per_step(url: str, kind: str, steps: int, folder: Path, database: bool) -> tuple[float, float]:
    """(median, mean) ms per step of a ``steps``-step loop under ``effects``, in SQLite or database mode.

    Both, because database mode holds ride-along lines for the next statement: most steps send nothing and one
    in a few dozen sends them all, so the median alone would flatter it; the mean includes every statement."""
    from piw.store.pg import place

    run_folder = folder / f"{kind}-{'pg' if database else 'sqlite'}"
    run_folder.mkdir()
    home = run_folder / f"home-{kind}-effects"
    home.mkdir()
    if database:
        place.use(home, url + f"?schema=bench_{secrets.token_hex(4)}")
    try:
        median, mean, _fsyncs, _in_run = step_overhead(kind, "effects", steps, run_folder)
    finally:
        place.forget(home)
    return median, mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400, help="appends per writer")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--url", default=None, help="an existing server (default: a throwaway one, fsync on)")
    args = parser.parse_args()
    from tests.support.pg import server_url

    with server_url(args.url) as (url, server):
        if server is not None:
            server.durable()
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            floor = fsync_append_ms(folder)
            print(
                f"local fdatasync'd line (the SQLite-mode commit point): p50 {floor:.3f} ms, {1000 / floor:,.0f} ev/s"
            )
            for writers in (1, 4, 16):
                p50, p99, rate = appends(url, writers, args.events, "sync")
                print(f"fenced append, {writers:2d} writer{'s' if writers > 1 else ' '}, synchronous: "
                      f"p50 {p50:.3f} ms  p99 {p99:.3f} ms  {rate:8,.0f} ev/s")  # fmt: skip
            for mode, label in (("async", "asynchronous"), ("held", "ride-along, held")):
                p50, p99, rate = appends(url, 1, args.events, mode)
                print(
                    f"fenced append,  1 writer , {label}: p50 {p50:.3f} ms  p99 {p99:.3f} ms  {rate:8,.0f} ev/s"
                )
            print(f"per-step cost, {args.steps}-step loops under effects (median gap between node_finished):")
            for kind in ("compute", "action"):
                local, local_mean = per_step(url, kind, args.steps, folder, database=False)
                remote, remote_mean = per_step(url, kind, args.steps, folder, database=True)
                print(f"  {kind:8s} SQLite mode {local:.3f} ms (mean {local_mean:.3f})  database mode "
                      f"{remote:.3f} ms (mean {remote_mean:.3f})  = {remote / local:.2f} × SQLite "
                      f"(means {remote_mean / local_mean:.2f} ×)")  # fmt: skip


if __name__ == "__main__":
    main()
