"""The rendered-row cache of the long views prints exactly what building the rows prints, and is never trusted.

Runs are real bundles whose traces are generated (hypothesis) as real trace lines. The reference for every
output is the same view built with no cache at all (``MIN_ROWS`` above any table here: none is read or left). The
cache is left by a first plain read and used by the next ones; fold checkpoints come every few events
(``CHECKPOINT_EVERY`` is lowered) so a cache is anchored on one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from piw.cli.console import make_console
from piw.cli.views import print_view
from piw.store import foldcache, viewcache
from piw.store.trace import TraceEvent
from piw.views import load_run, row_cache, view_for
from tests.support.cli import Cli
from tests.support.viewer import BundleWriter

RUN_ID = "20260101T000000000Z-rows-00000001"
OTHER_ID = "20260101T000000000Z-rows-00000002"
VIEWS = ("steps", "trace")
OPS = st.lists(st.sampled_from(["ok", "ok", "ok", "fail", "update", "long"]), min_size=1, max_size=60)


class _Out(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return False


def _events(ops: list[str], *, running: bool = True, first_seq: int = 1, salt: str = "") -> list[TraceEvent]:
    """A trace of finished and failed attempts (odd text among the outputs), updates, and one attempt still
    running at the end when ``running``."""
    events: list[TraceEvent] = []

    def add(
        scope: str, kind: str, payload: dict[str, Any], node: str | None = None, att: str | None = None
    ) -> None:
        seq = first_seq + len(events)
        at = f"2026-01-01T00:{seq // 60000 % 60:02d}:{seq // 1000 % 60:02d}.{seq % 1000:03d}Z"
        events.append(TraceEvent(seq, at, scope, kind, RUN_ID, payload, node, att))  # type: ignore[arg-type]

    if first_seq == 1:
        add("run", "run_started", {"workflowName": "rows", "input": {}, "maxSteps": 100_000})
    for count, op in enumerate(ops, start=first_seq):
        node, attempt = ("work", "plan", "sub/inner")[count % 3], f"a{count:07d}{salt}"
        if op == "update":
            payload = {"updateId": f"u{count}", "type": "note", "key": "k", "data": {"text": f"é{count}"}}
            add("node", "update_published", payload, node, attempt)
            continue
        add("node", "node_started", {"nodeType": "compute", "statusDetail": f"d{count}"}, node, attempt)
        if op == "fail":
            failure = {"outcome": "failed", "durationMs": count, "error": f"broke\x1b[31m {count} ✗",
                       "traceback": [{"file": "flow.workflow.py", "line": count, "function": "step"}]}  # fmt: skip
            add("node", "node_failed", failure, node, attempt)
        else:
            output: Any = {"n": count, "text": "ü" * (count % 5) + salt}
            if op == "long":
                output = {"n": count, "long": "x" * 500, "tab": "a\tb\u202e"}
            add(
                "node",
                "node_finished",
                {"outcome": "ok", "durationMs": count * 7, "output": output},
                node,
                attempt,
            )
    if running:
        add("node", "node_started", {"nodeType": "compute", "statusDetail": "working"}, "work", f"r{salt}")
    return events


def _write(home: Path, events: list[TraceEvent], run_id: str = RUN_ID) -> Path:
    """A one-node bundle (``tests.support.viewer.BundleWriter``) whose trace is exactly ``events``, replacing any."""
    shutil.rmtree(home / "runs" / run_id, ignore_errors=True)
    writer = BundleWriter(home, run_id, {"work": "compute"}, [])
    writer.trace.write(b"".join(event.encode() for event in events))
    return writer.close(cache_state=False)


def _show(home: Path, view: str, at: int | None = None, width: int = 100, run_id: str = RUN_ID) -> str:
    """What ``piw inspect RUN --view VIEW`` prints to a pipe (the same calls, a captured stream)."""
    out = _Out()
    run = load_run(home, run_id, at)
    print_view(make_console(out, width=width), view_for(view, run))
    return out.getvalue()


def _steady(text: str) -> str:
    """``text`` with the elapsed time of running attempts (lines that end ``working``) blanked."""
    return "\n".join(
        re.sub(r"\b(\d+h)?\d+m\b", "…", line) if line.rstrip().endswith("working") else line
        for line in text.split("\n")
    )


def _reference(home: Path, view: str, at: int | None = None, width: int = 100) -> str:
    """The view built row by row: no cache is read or left."""
    saved = row_cache.MIN_ROWS
    folder = viewcache.cache_dir(home / "runs" / RUN_ID)
    hidden = folder.with_name("hidden-cache")
    if folder.exists():
        folder.rename(hidden)
    try:
        row_cache.MIN_ROWS = 1 << 40
        return _show(home, view, at, width)
    finally:
        row_cache.MIN_ROWS = saved
        shutil.rmtree(folder, ignore_errors=True)
        if hidden.exists():
            hidden.rename(folder)


def _header(home: Path, view: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (viewcache.cache_dir(home / "runs" / RUN_ID) / f"{view}.json").read_bytes()
    )
    return data


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(foldcache, "CHECKPOINT_EVERY", 4)
    monkeypatch.setattr(row_cache, "MIN_ROWS", 3)
    monkeypatch.setattr(viewcache, "INDEX_EVERY", 4)  # the row index is used inside short tables too


FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(OPS, st.sampled_from(VIEWS))
def test_at_every_split_the_cached_view_prints_what_building_it_prints(
    tmp_path: Path, ops: list[str], view: str
) -> None:
    home = tmp_path / "home"
    events = _events(ops)
    _write(home, events)
    whole = _reference(home, view)
    assert _show(home, view) == whole  # the first read: built, and leaves the cache
    assert _show(home, view) == whole  # from the cache
    for at in range(1, len(events) + 1):
        assert _show(home, view, at) == _reference(home, view, at), f"--at {at}"
    shutil.rmtree(home)


@pytest.mark.parametrize("view", VIEWS)
def test_the_first_read_leaves_the_settled_rows_and_the_next_prints_them(tmp_path: Path, view: str) -> None:
    events = _events(["ok", "fail", "long", "ok", "update", "ok", "ok"])
    _write(tmp_path, events)
    first = _show(tmp_path, view)
    header = _header(tmp_path, view)
    rows = 6 if view == "steps" else len(events)  # steps: the attempt running at the end is never cached
    assert (header["schema"], header["runId"], header["view"], header["rows"]) == (
        "piw.view-cache.v1", RUN_ID, view, rows,
    )  # fmt: skip
    text = (viewcache.cache_dir(tmp_path / "runs" / RUN_ID) / f"{view}.txt").read_bytes()
    assert first.encode().splitlines()[1 : rows + 1] == text.splitlines()
    # what is printed next comes from that text: a cache edited consistently (text and digest) shows the edit
    edited = text.replace(b"broke", b"BROKE")
    header["textSha256"] = hashlib.sha256(edited).hexdigest()
    (viewcache.cache_dir(tmp_path / "runs" / RUN_ID) / f"{view}.txt").write_bytes(edited)
    (viewcache.cache_dir(tmp_path / "runs" / RUN_ID) / f"{view}.json").write_text(json.dumps(header))
    assert _show(tmp_path, view) == first.replace("broke", "BROKE")


@pytest.mark.parametrize("view", VIEWS)
def test_a_growing_run_extends_its_cache_only_when_many_rows_came(tmp_path: Path, view: str) -> None:
    events = _events(["ok"] * 5, running=False)
    _write(tmp_path, events)
    _show(tmp_path, view)
    before = _header(tmp_path, view)
    trace = tmp_path / "runs" / RUN_ID / "trace.ndjson"
    with trace.open("ab") as out:  # two more events: fewer than MIN_ROWS new rows
        out.write(b"".join(e.encode() for e in _events(["ok"], running=False, first_seq=len(events) + 1)))
    assert _show(tmp_path, view) == _reference(tmp_path, view)
    assert _header(tmp_path, view) == before
    seq = len(events) + 3
    with trace.open("ab") as out:
        out.write(b"".join(e.encode() for e in _events(["ok", "fail", "ok"], first_seq=seq)))
    assert _show(tmp_path, view) == _reference(tmp_path, view)
    after = _header(tmp_path, view)
    assert after["rows"] > before["rows"] and after["seq"] > before["seq"]
    assert _show(tmp_path, view) == _reference(tmp_path, view)  # the extended cache


def _cache_file(home: Path, view: str, suffix: str) -> Path:
    return viewcache.cache_dir(home / "runs" / RUN_ID) / f"{view}.{suffix}"


def _damage_text(home: Path, view: str) -> None:
    path = _cache_file(home, view, "txt")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate_text(home: Path, view: str) -> None:
    path = _cache_file(home, view, "txt")
    path.write_bytes(path.read_bytes()[:-1])


def _damage_header(home: Path, view: str) -> None:
    _cache_file(home, view, "json").write_bytes(b'{"schema": "piw.view-cache.v1", "rows": ')


def _claim_more_rows(home: Path, view: str) -> None:
    header = _header(home, view)
    header["rows"] += 1
    _cache_file(home, view, "json").write_text(json.dumps(header))


def _foreign(home: Path, view: str) -> None:
    """The cache of another run (same trace shape, other outputs) put in this one."""
    other = _write(home, _events(["ok", "long", "fail", "ok", "ok"], salt="Z"), OTHER_ID)
    _show(home, view, run_id=OTHER_ID)
    shutil.rmtree(viewcache.cache_dir(home / "runs" / RUN_ID))
    shutil.copytree(viewcache.cache_dir(other), viewcache.cache_dir(home / "runs" / RUN_ID))


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("spoil", [_damage_text, _truncate_text, _damage_header, _claim_more_rows, _foreign])
def test_a_damaged_or_foreign_cache_changes_nothing(tmp_path: Path, view: str, spoil: Any) -> None:
    _write(tmp_path, _events(["ok", "long", "fail", "ok", "ok"]))
    expected = _reference(tmp_path, view)
    _show(tmp_path, view)
    spoil(tmp_path, view)
    assert _show(tmp_path, view) == expected
    assert _show(tmp_path, view) == expected  # the cache the read before left in its place


@pytest.mark.parametrize("view", VIEWS)
def test_a_cache_of_a_rewritten_trace_is_stale(tmp_path: Path, view: str) -> None:
    _write(tmp_path, _events(["ok", "ok", "ok", "ok", "ok"]))
    _show(tmp_path, view)
    trace = tmp_path / "runs" / RUN_ID / "trace.ndjson"
    rewritten = trace.read_bytes().replace(b'"text":""', b'"text":"!"', 1)  # same events, one other output
    assert rewritten != trace.read_bytes()
    trace.write_bytes(rewritten)
    assert "!" in _show(tmp_path, view)
    assert _show(tmp_path, view) == _reference(tmp_path, view)


@pytest.mark.parametrize("view", VIEWS)
def test_another_width_builds_its_own_rows(tmp_path: Path, view: str) -> None:
    _write(tmp_path, _events(["ok", "long", "fail", "ok", "ok"]))
    _show(tmp_path, view, width=100)
    narrow = _show(tmp_path, view, width=60)
    assert narrow == _reference(tmp_path, view, width=60)
    assert narrow != _reference(tmp_path, view, width=100)
    assert _show(tmp_path, view, width=100) == _reference(tmp_path, view, width=100)


@pytest.mark.parametrize("view", VIEWS)
def test_a_read_that_stops_early_leaves_no_cache_and_no_temporary_file(tmp_path: Path, view: str) -> None:
    _write(tmp_path, _events(["ok"] * 12))
    blocks = view_for(view, load_run(tmp_path, RUN_ID)).plain_blocks(100)  # type: ignore[attr-defined]
    next(blocks), next(blocks)
    blocks.close()  # (a closed pipe ends the read the same way)
    folder = viewcache.cache_dir(tmp_path / "runs" / RUN_ID)
    assert not folder.exists() or list(folder.iterdir()) == []


def test_a_short_table_leaves_no_cache(tmp_path: Path) -> None:
    row_cache.MIN_ROWS = 20  # the trace has 12 events, the steps table 6 rows
    _write(tmp_path, _events(["ok"] * 5))
    for view in VIEWS:
        _show(tmp_path, view)
    assert not viewcache.cache_dir(tmp_path / "runs" / RUN_ID).exists()


def test_the_piw_process_prints_the_cached_rows_as_it_built_them(cli: Cli) -> None:
    """The real console script (stdout a pipe with a byte buffer): built, then cached, the same bytes."""
    events = _events(["ok", "fail", "long", "ok", "ok", "update", "ok"] * 3)
    _write(cli.home, events)
    env = {"PIW_TEST_VIEW_CACHE_ROWS": "3"}
    for view in VIEWS:
        first = cli.process("inspect", RUN_ID, "--view", view, env=env)
        second = cli.process("inspect", RUN_ID, "--view", view, env=env)
        assert first.returncode == second.returncode == 0, first.stderr + second.stderr
        assert _cache_file(cli.home, view, "json").exists()
        # The attempt still running shows its time so far, which may pass a minute between two processes.
        assert _steady(second.stdout) == _steady(first.stdout) == _steady(_reference(cli.home, view))


@pytest.mark.parametrize("view", VIEWS)
def test_a_cache_is_stale_when_the_trace_after_its_anchor_checkpoint_changed(
    tmp_path: Path, view: str
) -> None:
    """Lines 13 and 14 come after the last fold checkpoint (12), which stays valid: only the cache's own prefix
    digest can tell that line 13 changed (same length, another output)."""
    _write(tmp_path, _events(["ok"] * 6))
    _show(tmp_path, view)
    assert _header(tmp_path, view)["anchorSeq"] == 12
    trace = tmp_path / "runs" / RUN_ID / "trace.ndjson"
    lines = trace.read_bytes().splitlines(keepends=True)
    assert b'"n":6,' in lines[12]
    lines[12] = lines[12].replace(b'"n":6,', b'"n":9,')
    trace.write_bytes(b"".join(lines))
    shown = _show(tmp_path, view)
    assert '"n":9' in shown and '"n":6' not in shown
    assert shown == _reference(tmp_path, view)


def test_a_pipe_closed_early_ends_a_cached_read_as_it_ends_a_built_one(cli: Cli) -> None:
    """``piw inspect RUN --view trace | head -1``: the reader closes the pipe after one line, long before the
    rows end. Built or cached, the read ends without a traceback, and a read cut short leaves no cache of a part.

    (The exit status is 1 when a write meets the closed pipe. A write that is under way when the pipe closes can
    end short without an error instead, and the status is then 0: which one happens depends on timing.)"""
    _write(cli.home, _events(["ok", "long", "ok", "fail"] * 250))  # ~2,000 rows: far more than a pipe holds
    env = cli.environment({"PIW_TEST_VIEW_CACHE_ROWS": "3"})

    def closed_after_one_line() -> int:
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from piw.cli.main import main; sys.argv[0] = 'piw'; main()",
             "inspect", RUN_ID, "--view", "trace"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().split()[:2] == [b"seq", b"at"]
        process.stdout.close()
        time.sleep(0.2)  # the writer is blocked on the full pipe, or about to be
        errors = process.stderr.read()
        assert b"Traceback" not in errors, errors
        return process.wait(timeout=60)

    built = closed_after_one_line()
    assert not _cache_file(cli.home, "trace", "json").exists()  # a read cut short leaves no cache
    assert (
        cli.process("inspect", RUN_ID, "--view", "trace", env={"PIW_TEST_VIEW_CACHE_ROWS": "3"}).returncode
        == 0
    )
    assert _cache_file(cli.home, "trace", "json").exists()
    assert built in (0, 1) and closed_after_one_line() in (0, 1)


def test_a_killed_readers_temporary_text_is_removed_by_the_next_writer_once_it_is_old(tmp_path: Path) -> None:
    _write(tmp_path, _events(["ok"] * 6))
    folder = viewcache.cache_dir(tmp_path / "runs" / RUN_ID)
    folder.mkdir(parents=True)
    old, recent, other = folder / ".trace.txt.old1", folder / ".trace.txt.new1", folder / ".steps.txt.old2"
    for path in (old, recent, other):
        path.write_bytes(b"rows of a read that was killed\n" * 100)
    long_ago = time.time() - viewcache.STALE_TEMP_S - 60
    os.utime(old, (long_ago, long_ago))
    os.utime(other, (long_ago, long_ago))
    assert _show(tmp_path, "trace") == _reference(tmp_path, "trace")
    assert not old.exists()
    assert recent.exists()  # it may be a read still going on
    assert other.exists()  # another view's: its own next writer sweeps it
    assert sorted(p.name for p in folder.iterdir()) == [
        ".steps.txt.old2",
        ".trace.txt.new1",
        "trace.json",
        "trace.txt",
    ]
