"""Claims per second on PostgreSQL, with 1 and 4 claimers, and the duplicates among them (there must be none).

Seeds ``--runs`` queued rows (default 20,000) in a fresh schema, then lets ``claim_next``
(``piw.store.pg.queue.PostgresQueue``: one statement, ``FOR UPDATE SKIP LOCKED``) empty the queue from 1 claimer,
and again from 4 claimer processes. Prints claims/s and the count of rows claimed twice. The server is a
throwaway one (``tests/support/pg.py``, ``fsync=off``) unless ``--url`` names another. Not a test: figures only.

    python bench/bench_pg_claims.py [--runs 20000] [--url postgresql://…]
"""

from __future__ import annotations

import argparse
import multiprocessing
import secrets
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from piw.store.pg.connection import PgDatabase  # noqa: E402
from piw.store.pg.run_database import open_pg_run_database  # noqa: E402
from piw.store.pg.setting import DatabaseSetting  # noqa: E402

SEED = (
    "INSERT INTO run_queue (run_id, status, workflow_ref, workflow_source_json, definition_digest, serve_key, "
    "input_json, options_json, available_at, created_at, updated_at) "
    "SELECT 'run-' || lpad(n::text, 7, '0'), 'queued', '/w.workflow.py', '{\"kind\":\"file\"}', 'd', 'k', '{}', "
    "'{}', 0, n, n FROM generate_series(1, %s) AS n"
)


def seed(url: str, runs: int) -> DatabaseSetting:
    setting = DatabaseSetting(url, "bench_" + secrets.token_hex(4))
    db = PgDatabase.open(setting)
    with db.connection() as conn:
        conn.execute(SEED, (runs,))
        conn.execute("ANALYZE run_queue")
    db.close()
    return setting


def claimer(url: str, schema: str, name: str, keys: list[str] | None, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    db = PgDatabase.open(DatabaseSetting(url, schema), migrate=False, pool_size=2)
    queue = open_pg_run_database(db).queue
    queue.serve_keys = keys  # type: ignore[attr-defined]
    claimed: list[str] = []
    start = time.perf_counter()
    while (claim := queue.claim_next(name)) is not None:
        claimed.append(claim.run_id)
    out.put((claimed, time.perf_counter() - start))
    db.close()


def run(url: str, runs: int, claimers: int, keys: list[str] | None = None) -> tuple[float, int, int]:
    setting = seed(url, runs)
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = context.Queue()  # type: ignore[type-arg]
    processes = [
        context.Process(target=claimer, args=(url, setting.schema, f"bench-host-{i}:1:1", keys, out))
        for i in range(claimers)
    ]
    started = time.perf_counter()
    for process in processes:
        process.start()
    results = [out.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    wall = max(elapsed for _, elapsed in results)
    ids = [run_id for claimed, _ in results for run_id in claimed]
    del started
    return len(ids) / wall, len(ids), len(ids) - len(set(ids))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--url", default=None, help="an existing server (default: a throwaway one)")
    args = parser.parse_args()
    from tests.support.pg import server_url

    with server_url(args.url) as (url, _server):
        print(f"claims with FOR UPDATE SKIP LOCKED, {args.runs:,} queued rows each")
        for claimers, keys in ((1, None), (4, None), (4, ["k", "other"])):
            rate, total, duplicates = run(url, args.runs, claimers, keys)
            routed = " (serve_key = ANY of 2 keys)" if keys else ""
            print(f"  {claimers} claimer{'s' if claimers > 1 else ' '}: {rate:8,.0f} claims/s  "
                  f"({total:,} claimed, {duplicates} duplicates){routed}")  # fmt: skip


if __name__ == "__main__":
    main()
