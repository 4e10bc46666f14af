"""Overhead of the shared rate limiter per model request, beside a no-limit baseline (issue 29, target <= 1 ms).

The same trivial provider (it answers at once, with no I/O) is called ``--requests`` times bare and behind
``RateLimitedProvider`` (``docs/rate-limits.md``) with a limit that never makes a caller wait, so the difference is
what the limiter itself costs a request: taking a slot of the bucket in the run database and giving it back. The
SQLite bucket (``piw.sqlite`` of a throwaway home) always; the PostgreSQL one with ``--pg`` (a throwaway server from
``tests/support/pg.py`` unless ``--url`` names one). Not a test: figures only.

    python bench/bench_rate_limit.py [--requests 2000] [--pg] [--url postgresql://…]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from piw.config.rate_limits import RateLimit  # noqa: E402
from piw.providers.base import ChatRequest, DoneEvent, Provider, ProviderEvent  # noqa: E402
from piw.providers.messages import AssistantReply, TextBlock, Usage  # noqa: E402
from piw.providers.rate_limited import RateLimitedProvider, RateLimits  # noqa: E402

LIMIT = RateLimit(requests_per_minute=10**9, tokens_per_minute=10**12, concurrency=1000)
"""Every key set (the most work per request), none ever reached."""


class Instant:
    """A provider that answers at once: the baseline is the cost of the call itself."""

    name = "bench"
    model = "m"

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        reply = AssistantReply(content=[TextBlock(text="ok")], usage=Usage(input=10, output=2))
        yield DoneEvent(content_index=0, message=reply)


def per_request_us(provider: Provider, requests: int) -> tuple[float, float]:
    """Median and p95 microseconds per request (each drained to its end)."""
    request = ChatRequest(model="m")
    cancel = threading.Event()
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        for _event in provider.stream(request, cancel):
            pass
        times.append((time.perf_counter() - start) * 1e6)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95)]


def report(label: str, limits: RateLimits, requests: int, base: tuple[float, float]) -> None:
    limited = RateLimitedProvider(Instant(), limits, "bench-" + secrets.token_hex(3), LIMIT)
    per_request_us(limited, min(200, requests))  # warm: connection, tables, the bucket row
    median, p95 = per_request_us(limited, requests)
    print(
        f"{label:<22} median {median:8.1f} us  p95 {p95:8.1f} us  "
        f"overhead {median - base[0]:8.1f} us/request (p95 {p95 - base[1]:.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--pg", action="store_true", help="also the PostgreSQL bucket")
    parser.add_argument("--url", help="a PostgreSQL server to use instead of a throwaway one")
    args = parser.parse_args()
    per_request_us(Instant(), 200)
    base = per_request_us(Instant(), args.requests)
    print(f"{args.requests:,} requests each; limit {LIMIT.model_dump()} (never reached)")
    print(f"{'no limit (baseline)':<22} median {base[0]:8.1f} us  p95 {base[1]:8.1f} us")
    from piw.store.db.rate_limits import SqliteRateLimits

    with tempfile.TemporaryDirectory() as home:
        report("sqlite bucket", SqliteRateLimits(Path(home)), args.requests, base)
    if args.pg or args.url:
        from piw.store.pg.connection import PgDatabase
        from piw.store.pg.rate_limits import PgRateLimits
        from piw.store.pg.setting import DatabaseSetting
        from tests.support.pg import server_url

        with server_url(args.url) as (url, _server):
            db = PgDatabase.open(DatabaseSetting(url, "bench_" + secrets.token_hex(4)))
            try:
                report("postgresql bucket", PgRateLimits(db), args.requests, base)
            finally:
                db.close()
    print("target: overhead <= 1000 us per request (issue 29)")


if __name__ == "__main__":
    main()
