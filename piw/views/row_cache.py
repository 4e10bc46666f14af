"""Plain tables whose settled rows come from the bundle's rendered-row cache (:mod:`piw.store.viewcache`).

The steps and trace views of a long run print hundreds of thousands of rows that never change once written (a
finished attempt, an event). Printed plain (not to a terminal), the first read at a layout leaves them in the
bundle; the next read writes the cached text as it is and builds only the rows that came after it. The text is
byte for byte what building the rows prints (``tests/views/test_view_cache.py``), so the cache is invisible except in
time. Like fold checkpoints it is a cache of a read: the view never writes run data.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from piw.store import viewcache
from piw.store.viewcache import CachedRows

MIN_ROWS = int(os.environ.get("PIW_TEST_VIEW_CACHE_ROWS", "") or 10_000)
"""Settled rows worth caching, and the most a read builds before it leaves a longer cache (a short table costs
less to build than to check). ``PIW_TEST_VIEW_CACHE_ROWS`` lowers it for the tests that run ``piw`` itself."""
_BLOCK = viewcache.INDEX_EVERY
_RENDERING_MODULES = (
    "piw.terminal",
    "piw.wire",
    "piw.views.base",
    "piw.views.table",
    "piw.views.failure",
    "piw.views.steps",
    "piw.views.trace",
    "piw.views.row_cache",
)
"""The modules whose code decides a row's text: a cache built by other code is not used. Python's version and
Unicode data, rich's version (it measures a cell's width) and orjson's (``compact`` prints its JSON) count too."""


@dataclass(frozen=True)
class RowSource:
    """Where a view's rows were folded from, which a cache of them is checked against."""

    bundle_path: Path
    run_id: str
    seq: int
    """The last trace line folded (the state's ``trace_seq``)."""
    offset: int
    """The trace bytes folded."""


@functools.cache
def _code_digest() -> str:
    """A digest of what decides a row's text besides the run (:data:`_RENDERING_MODULES`), once per process."""
    import importlib
    import sys
    import unicodedata

    import orjson

    from piw.store.checkpoint_files import FOLD_VERSION

    digest = hashlib.sha256(f"{FOLD_VERSION}|{sys.version}|{unicodedata.unidata_version}".encode())
    digest.update(f"{_distribution('rich')}|{getattr(orjson, '__version__', '')}".encode())
    for name in _RENDERING_MODULES:
        module = importlib.import_module(name)
        digest.update(Path(module.__file__ or name).read_bytes())
    return digest.hexdigest()


def _distribution(name: str) -> str:
    """``name-version.dist-info`` beside the package (``importlib.metadata`` costs ~30 ms to import)."""
    import importlib

    folder = Path(importlib.import_module(name).__file__ or ".").parent.parent
    try:
        return ",".join(
            sorted(n for n in os.listdir(folder) if n.startswith(f"{name}-") and n.endswith(".dist-info"))
        )
    except OSError:
        return ""


def layout_key(*parts: object) -> str:
    """The cache key of a table laid out as ``parts`` say (view name, column sizes…) by this code."""
    return hashlib.sha256(f"{_code_digest()}|{parts!r}".encode()).hexdigest()


def cached_table(
    source: RowSource | None,
    view: str,
    key: str,
    header: str,
    settled: int,
    settled_rows: Callable[[int, CachedRows | None], Iterator[str]],
    after: Iterator[str],
) -> Iterator[bytes | memoryview]:
    """The table's text, UTF-8, a block of lines at a time: ``header``, the ``settled`` rows, then ``after``.

    ``settled_rows(k, cached)`` builds the settled rows from row ``k`` (0-based) on; ``cached`` is the cache the
    first ``k`` came from, if any. A read leaves a new cache when there is none to use and the table has at least
    :data:`MIN_ROWS` settled rows, or when the one there lacks that many of them.
    """
    yield (header + "\n").encode()
    cached = viewcache.load(source.bundle_path, source.run_id, view, key) if source is not None else None
    reused = min(settled, cached.rows) if cached is not None else 0
    if cached is not None and reused:
        yield cached.upto(reused)
    else:
        cached = None  # (nothing of it is used: the rows are built from the first)
    writer = None
    if source is not None and settled >= MIN_ROWS and settled - reused >= (MIN_ROWS if reused else 1):
        writer = viewcache.CacheWriter(source.bundle_path, source.run_id, view, key)
        if cached is not None:
            writer.copy(cached, reused)
    try:
        for block, count in _blocks(settled_rows(reused, cached)):
            if writer is not None:
                writer.rows_block(block, count)
            yield block
        if writer is not None and source is not None:
            if writer.rows == settled:
                writer.commit(source.seq, source.offset)
            else:
                writer.abandon()
            writer = None
        for block, _ in _blocks(after):
            yield block
    finally:
        if writer is not None:
            writer.abandon()  # the reader stopped early (a closed pipe): no cache of a part


def _blocks(lines: Iterator[str]) -> Iterator[tuple[bytes, int]]:
    """``lines`` as UTF-8 text, :data:`_BLOCK` lines at a time, each with how many lines it holds."""
    while batch := list(itertools.islice(lines, _BLOCK)):
        yield ("\n".join(batch) + "\n").encode(), len(batch)
