"""Run bundles on disk: home, run ids, private permissions, the writer lock and listing."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from piw.errors import RunLocked, RunNotFound, TraceCorrupt, UsageError
from piw.store.bundle import (
    Bundle,
    WriterLock,
    check_run_id,
    list_bundles,
    new_run_id,
    open_bundle,
    piw_home,
    run_is_live,
    slugify,
    write_private_file,
)
from piw.store.file_store import FileRunStore
from tests.support.cli import Cli
from tests.support.runs import RunWorkflow, WorkflowMaker


def test_piw_home_from_env_created_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "a" / "home"
    monkeypatch.setenv("PIW_HOME", str(target))
    assert piw_home() == target.resolve()
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    os.chmod(target, 0o755)
    (target / "runs").mkdir(mode=0o755)
    os.chmod(target / "runs", 0o755)
    piw_home()  # tightened at startup
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert stat.S_IMODE((target / "runs").stat().st_mode) == 0o700
    monkeypatch.setenv("PIW_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert piw_home() == (tmp_path / "user" / ".local" / "share" / "piw").resolve()


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("Import", "import"),
        ("  Hello, World!  ", "hello-world"),
        ("ünïcode", "n-code"),
        ("---", "workflow"),
        ("", "workflow"),
        ("a" * 60, "a" * 40),
        ("x" * 39 + "-y", "x" * 39),
    ],
)
def test_slug(name: str, slug: str) -> None:
    assert slugify(name) == slug


def test_run_id_format_and_order() -> None:
    moment = datetime(2026, 8, 16, 10, 0, 0, 123456, tzinfo=UTC)
    run_id = new_run_id("Import", moment)
    assert re.fullmatch(r"20260816T100000123Z-import-[0-9a-f]{8}", run_id)
    later = new_run_id("aaa", datetime(2026, 8, 16, 10, 0, 0, 124000, tzinfo=UTC))
    assert later > run_id  # lexical order is chronological to the millisecond
    assert check_run_id(run_id) == run_id


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden", "-x", "x" * 201, "a b", "ä"])
def test_run_ids_from_users_are_checked(bad: str, piw_home: Path) -> None:
    with pytest.raises(UsageError):
        check_run_id(bad)
    with pytest.raises(UsageError):
        open_bundle(piw_home, bad)


def test_open_unknown_bundle(piw_home: Path) -> None:
    with pytest.raises(RunNotFound, match="piw runs"):
        open_bundle(piw_home, "20260101T000000000Z-x-00000000")


def test_write_private_file_is_atomic_and_private(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    write_private_file(target, b"one")
    write_private_file(target, b"two", fsync=True)
    assert target.read_bytes() == b"two"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp files left


def test_every_directory_and_file_of_a_run_is_private(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path
) -> None:
    path = make_workflow(
        "private",
        """
        from piw import compute, define_workflow, edge, notify
        workflow = define_workflow(name="private", start_at="big", nodes={
            "big": compute(lambda c: {"text": "é" * 3000}), "tell": notify("hi")},
            edges=[edge("big", "tell")])
        """,
    )
    old = os.umask(0o022)  # a typical umask: piw must not rely on it
    try:
        state = run_workflow(path)
    finally:
        os.umask(old)
    bundle = piw_home / "runs" / state.run_id
    assert (bundle / "artifacts").is_dir() and (bundle / "session" / "entries.ndjson").is_file()
    checked = 0
    for item in [piw_home, *piw_home.rglob("*")]:
        mode = stat.S_IMODE(item.stat().st_mode)
        assert mode == (0o700 if item.is_dir() else 0o600), (item, oct(mode))
        checked += 1
    assert checked >= 10


def test_writer_lock_is_exclusive_across_processes(piw_home: Path, tmp_path: Path) -> None:
    path = piw_home / "runs" / "20260101T000000000Z-x-00000000"
    path.mkdir(parents=True)
    bundle = Bundle(path.name, path)
    assert not run_is_live(bundle)
    store = FileRunStore(bundle).acquire()  # the run's store holds the bundle's writer lock
    try:
        assert run_is_live(bundle)
        store.fence()
        with pytest.raises(RunLocked):
            WriterLock(bundle).acquire()
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pathlib import Path; from piw.store.bundle import Bundle, WriterLock, run_is_live;"
                f"b = Bundle('x', Path({str(path)!r})); print(run_is_live(b));"
                "WriterLock(b).acquire()",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert probe.stdout.strip() == "True" and "RunLocked" in probe.stderr
    finally:
        store.release()
    with pytest.raises(RunLocked):
        store.fence()  # released: no more writes
    WriterLock(bundle).acquire().release()
    assert not run_is_live(bundle)


def test_list_bundles_skips_incomplete_and_foreign_entries(cli: Cli, piw_home: Path) -> None:
    done = cli("run", "hello", "--json")
    assert done.returncode == 0
    runs = piw_home / "runs"
    (runs / ".incomplete-x-1").mkdir()
    (runs / "not a run").mkdir()
    (runs / "20990101T000000000Z-nomanifest-00000000").mkdir()
    listed = [bundle.run_id for bundle in list_bundles(piw_home)]
    assert len(listed) == 1
    assert len(cli.json("runs")) == 1


def test_a_current_state_json_is_read_without_replaying_the_trace(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path
) -> None:
    """``piw runs`` reads many bundles: a cache whose traceSeq is the trace's last seq is taken as it is."""
    import json

    from piw.store.bundle import load_state, open_bundle
    from piw.store.fold import fold

    source = (
        "from piw import compute, define_workflow\nworkflow = define_workflow(name='cached', start_at='a', "
    )
    source += "nodes={'a': compute({'x': 1})})\n"
    state = run_workflow(make_workflow("cached", source))
    bundle = open_bundle(piw_home, state.run_id)
    cache = json.loads(bundle.state_path.read_text())
    cache["runTitle"] = "from the cache"
    bundle.state_path.write_text(json.dumps(cache))
    assert load_state(bundle).run_title == "from the cache"  # traceSeq matches the trace's last line
    torn = bundle.trace_path.read_bytes() + b'{"seq": 99, "torn'
    bundle.trace_path.write_bytes(torn + b"\n")
    bundle.state_path.write_text(json.dumps(cache))  # the cache is newer than the trace again
    assert load_state(bundle).run_title == "from the cache"  # a torn last line is not a line
    lines = bundle.trace_path.read_bytes().split(b"\n")
    lines[1] = b"{damaged"
    bundle.trace_path.write_bytes(b"\n".join(lines))  # edited after the cache was written: parsed again
    with pytest.raises(TraceCorrupt):
        load_state(bundle)
    bundle.trace_path.write_bytes(torn + b"\n")
    cache["traceSeq"] -= 1
    bundle.state_path.write_text(json.dumps(cache))
    refolded = load_state(bundle)  # behind the trace: the tail is folded onto the cache
    assert refolded.trace_seq == state.trace_seq and refolded.run_title == "from the cache"
    cache["traceSeq"] += 5
    bundle.state_path.write_text(json.dumps(cache))
    assert load_state(bundle) == fold(bundle.read_trace().events)  # ahead of the trace: not trusted
