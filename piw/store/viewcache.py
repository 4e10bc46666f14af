"""Rendered-row caches: the plain text of a long view's settled rows, kept in the bundle like fold checkpoints.

The steps view of a long run prints a row per finished attempt and the trace view a row per event. Building a
row costs microseconds, so a million of them take seconds on every read, although a finished attempt's row, or an
event's, never changes once it is written. The first plain (not a terminal) read of such a view at a given
layout leaves ``view-cache/<view>.txt``: those rows as UTF-8 text, one per line, with a header
``view-cache/<view>.json`` (:class:`ViewCacheHeader`) that says which trace prefix they were built from. The
next read prints the cached rows as they are and builds only the rows after them.

Like a checkpoint it is a cache that the view can always rebuild, so it is never trusted: it is used only when it
names this run, this view and the exact layout and rendering code asked for (``key``), when its own text still
hashes to its digest (damage), and when the trace prefix it was built from is still the trace's (stale: the trace
was replaced or rewritten). That last check continues the prefix digest of the newest verified fold checkpoint
before it (:mod:`piw.store.foldcache`), so it hashes at most the events after that checkpoint. Anything else is
ignored exactly as if the files did not exist. Writing is best effort: a read-only bundle gets no cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import msgspec

VIEW_CACHE_SCHEMA = "piw.view-cache.v1"
DIRECTORY = "view-cache"
INDEX_EVERY = 1024
"""Rows between the text offsets the header keeps, to cut the text after any row quickly (``--at``)."""
_ZERO = bytes(32)
_CHUNK = 1 << 20


class ViewCacheHeader(msgspec.Struct, frozen=True, rename="camel"):
    """``view-cache/<view>.json``."""

    schema: str
    run_id: str
    view: str
    key: str
    """What decides the rows' text besides the run: the rendering code, the fold version and the layout."""
    seq: int
    """The rows were built from the fold of trace lines ``1..seq``."""
    offset: int
    """Bytes of ``trace.ndjson`` those lines take."""
    anchor_seq: int
    """The fold checkpoint whose prefix digest ``prefix_sha256`` continues (0: none, the digest starts empty)."""
    prefix_sha256: str
    """``sha256(anchor's prefix digest ‖ sha256(trace[anchor's offset:offset]))``."""
    rows: int
    text_bytes: int
    text_sha256: str
    row_offsets: list[int]
    """The text offset of row ``k × INDEX_EVERY`` (rows counted from 0), for every such row there is."""


def cache_dir(bundle_path: Path) -> Path:
    return bundle_path / DIRECTORY


@dataclass
class CachedRows:
    """A trusted cache: ``rows`` lines of text."""

    header: ViewCacheHeader
    text: bytes | mmap.mmap

    @property
    def rows(self) -> int:
        return self.header.rows

    def upto(self, rows: int) -> memoryview:
        """The text of the first ``rows`` rows (at most :attr:`rows`), each ending in a newline."""
        rows = min(rows, self.header.rows)
        view = memoryview(self.text)
        if rows == self.header.rows:
            return view
        if rows <= 0:
            return view[:0]
        block, inside = divmod(rows, INDEX_EVERY)
        end = self.header.row_offsets[block]
        text = self.text
        for _ in range(inside):
            end = text.find(b"\n", end) + 1
        return view[:end]


def _anchor_at(bundle_path: Path, run_id: str, seq: int) -> tuple[int, bytes] | None:
    """``(offset, prefix digest)`` of the verified fold checkpoint at ``seq`` (``seq`` 0: the start of the trace);
    ``None`` when it is not verified any more."""
    if seq == 0:
        return 0, _ZERO
    from piw.store.checkpoint_files import valid_checkpoints

    # the whole chain, not ``upto_seq``: a shorter chain would not match ``verified.json`` and be hashed again
    for header in valid_checkpoints(bundle_path, run_id):
        if header.seq == seq:
            return header.offset, bytes.fromhex(header.prefix_sha256)
    return None


def _newest_anchor(bundle_path: Path, run_id: str, offset: int) -> tuple[int, int, bytes]:
    """``(seq, offset, prefix digest)`` of the newest verified fold checkpoint at or before trace byte ``offset``
    (``(0, 0, zeros)``, the start of the trace, when there is none)."""
    from piw.store.checkpoint_files import valid_checkpoints

    best = (0, 0, _ZERO)
    for header in valid_checkpoints(bundle_path, run_id):
        if header.offset > offset:
            break
        best = (header.seq, header.offset, bytes.fromhex(header.prefix_sha256))
    return best


def _prefix_digest(trace: Path, link: bytes, start: int, end: int) -> str | None:
    """The digest chained on ``link`` over ``trace[start:end]``; ``None`` when the trace is shorter."""
    digest = hashlib.sha256()
    try:
        with trace.open("rb") as handle:
            handle.seek(start)
            left = end - start
            while left > 0:
                chunk = handle.read(min(_CHUNK, left))
                if not chunk:
                    return None
                digest.update(chunk)
                left -= len(chunk)
    except OSError:
        return None
    return hashlib.sha256(link + digest.digest()).hexdigest()


def load(bundle_path: Path, run_id: str, view: str, key: str) -> CachedRows | None:
    """The cached rows of ``view`` at ``key`` when every check in the module docstring passes, else ``None``."""
    folder = cache_dir(bundle_path)
    try:
        header = msgspec.json.decode((folder / f"{view}.json").read_bytes(), type=ViewCacheHeader)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if (
        header.schema != VIEW_CACHE_SCHEMA
        or header.run_id != run_id
        or header.view != view
        or header.key != key
    ):
        return None
    if len(header.row_offsets) != (header.rows + INDEX_EVERY - 1) // INDEX_EVERY:
        return None
    anchor = _anchor_at(bundle_path, run_id, header.anchor_seq)
    if anchor is None:
        return None
    start, link = anchor
    if _prefix_digest(bundle_path / "trace.ndjson", link, start, header.offset) != header.prefix_sha256:
        return None
    text = _map(folder / f"{view}.txt", header.text_bytes)
    if text is None or hashlib.sha256(text).hexdigest() != header.text_sha256:
        return None
    return CachedRows(header, text)


def _map(path: Path, size: int) -> bytes | mmap.mmap | None:
    """The file's bytes (mapped: a long view's text is tens of megabytes) when it is exactly ``size`` long."""
    try:
        with path.open("rb") as handle:
            if os.fstat(handle.fileno()).st_size != size:
                return None
            if size == 0:
                return b""
            return mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None


STALE_TEMP_S = 3600
"""A temporary text older than this is a killed reader's (a read builds its rows in seconds): the next writer of
that view removes it, so a ``kill -9`` mid-read does not leave tens of megabytes behind for good."""


def _sweep(folder: Path, view: str) -> None:
    """Remove the temporary texts of ``view`` that readers killed mid-read left, best effort."""
    cutoff = time.time() - STALE_TEMP_S
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(f".{view}.txt."):
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)


class CacheWriter:
    """Leaves a new cache of ``view`` as its rows are printed: :meth:`rows_block` for each block of rows, then
    :meth:`commit`. Nothing is visible until ``commit`` renames the text and then the header into place; any
    failure (a read-only bundle, a full disk) just leaves no cache."""

    def __init__(self, bundle_path: Path, run_id: str, view: str, key: str) -> None:
        self.bundle_path, self.run_id, self.view, self.key = bundle_path, run_id, view, key
        self._digest = hashlib.sha256()
        self._size = self._rows = 0
        self._offsets: list[int] = []
        self._temp: str | None = None
        self._handle: BinaryIO | None = None
        try:
            folder = cache_dir(bundle_path)
            folder.mkdir(mode=0o700, exist_ok=True)
            _sweep(folder, view)
            fd, self._temp = tempfile.mkstemp(dir=folder, prefix=f".{view}.txt.")
            self._handle = os.fdopen(fd, "wb")
        except OSError:
            self.abandon()

    @property
    def rows(self) -> int:
        return self._rows

    def copy(self, cached: CachedRows, rows: int) -> None:
        """Start with the first ``rows`` rows of ``cached``."""
        self._offsets = cached.header.row_offsets[: (rows + INDEX_EVERY - 1) // INDEX_EVERY]
        self._write(cached.upto(rows), rows)

    def rows_block(self, text: bytes, rows: int) -> None:
        """Append ``rows`` whole lines (a block of at most a few thousand: the index is found by scanning it)."""
        first = self._rows
        for number in range(-(-first // INDEX_EVERY) * INDEX_EVERY, first + rows, INDEX_EVERY):
            end = 0
            for _ in range(number - first):
                end = text.find(b"\n", end) + 1
            self._offsets.append(self._size + end)
        self._write(text, rows)

    def _write(self, text: bytes | memoryview, rows: int) -> None:
        if self._handle is None:
            return
        try:
            self._handle.write(text)
        except OSError:
            self.abandon()
            return
        self._digest.update(text)
        self._size += len(text)
        self._rows += rows

    def commit(self, seq: int, offset: int) -> None:
        """Publish the rows written, built from trace lines ``1..seq`` (the first ``offset`` bytes)."""
        handle, temp = self._handle, self._temp
        if handle is None or temp is None:
            return
        self._handle = None
        try:
            handle.close()
            anchor_seq, start, link = _newest_anchor(self.bundle_path, self.run_id, offset)
            prefix = _prefix_digest(self.bundle_path / "trace.ndjson", link, start, offset)
            if prefix is None:
                raise OSError("the trace is shorter than the rows")
            header = ViewCacheHeader(
                schema=VIEW_CACHE_SCHEMA,
                run_id=self.run_id,
                view=self.view,
                key=self.key,
                seq=seq,
                offset=offset,
                anchor_seq=anchor_seq,
                prefix_sha256=prefix,
                rows=self._rows,
                text_bytes=self._size,
                text_sha256=self._digest.hexdigest(),
                row_offsets=self._offsets,
            )
            folder = cache_dir(self.bundle_path)
            os.replace(temp, folder / f"{self.view}.txt")
            self._temp = None
            from piw.store.bundle import write_private_file

            write_private_file(folder / f"{self.view}.json", msgspec.json.encode(header))
        except OSError:
            self.abandon()

    def abandon(self) -> None:
        """Drop what was written (the old cache, if any, stays as it was)."""
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None
        if self._temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._temp)
            self._temp = None
