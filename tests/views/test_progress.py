"""The progress view and panel (``updates-progress.md`` §8) on a real run with several kinds of tracks.

The run is executed by the engine once; the views are then rendered at chosen instants, since they are pure
functions of the trace and ``now`` — which is also how the tests show that clocks move without any write.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from piw.progress import parse_instant
from piw.run.runner import ForegroundOptions, start_run
from piw.views import load_run, view_for
from piw.views.frame import FrameModel
from piw.views.progress import progress_view
from piw.views.source import RunData
from tests.support.views import assert_terminal_safe, render

WORKFLOW = """
from datetime import datetime, timedelta, timezone
from piw import action, define_workflow

P = "pi-workflows.progress.v1"


def publish(ctx):
    def track(key, **data):
        ctx.publish_update("progress", key, {"schema": P, **data})

    track("rows", status="running", label="Rows", completed=100, total=1000, unit="rows")
    track("overall", status="running", label="Overall", completed=1, total=4, unit="stages")
    track("gate", status="blocked", label="Gate")
    track("approval", status="waiting", label="Approval")
    track("done", status="completed", label="Done", completed=5, total=5, unit="files")
    track("batch/worker/one", status="running", label="Worker one", completed=3, total=9, unit="items")
    ctx.sleep(0.2)
    track("rows", status="running", label="Rows", completed=200, total=1000, unit="rows")
    now = datetime.now(timezone.utc)
    ctx.publish_update("monitor.schedule", "monitor", {"schema": "pi-workflows.monitor-schedule.v1",
                       "lastCheckAt": now.isoformat(), "everyMinutes": 30,
                       "nextCheckAt": (now + timedelta(minutes=30)).isoformat()})
    return {"ok": True}


workflow = define_workflow(name="tracks", start_at="publish", nodes={"publish": action(publish)})
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    root = tmp_path_factory.mktemp("tracks")
    path = root / "tracks.workflow.py"
    path.write_text(WORKFLOW, encoding="utf-8")
    state = start_run(str(path), root / "home", {}, None, ForegroundOptions())
    assert state.status == "completed"
    return load_run(root / "home", state.run_id)


def _latest(run: RunData) -> datetime:
    moment = parse_instant(run.state.sorted_updates()[-1].at)
    assert moment is not None
    return moment


def test_priority_order_and_nesting(run: RunData) -> None:
    lines = render(progress_view(run.events(), _latest(run)), 120).splitlines()
    heads = [line for line in lines if not line.lstrip().startswith(tuple("0123456789"))]
    order = [head.split()[0] for head in heads]
    assert order == ["Overall", "Gate", "Approval", "Rows", "Done", "Worker"]
    assert heads[-1].startswith("  Worker one"), "a key of three segments is indented one level"
    assert "Gate  blocked  ETA unavailable (progress is blocked)" in heads[1]
    assert any(line.strip().startswith("2 samples · low confidence · updated ") for line in lines)


def _first(run: RunData) -> datetime:
    moment = parse_instant(next(e.at for e in run.events() if e.type == "update_published"))
    assert moment is not None
    return moment


BAR = re.compile(r"^[━╸╺ ]+ (\d+%|…|\S+ \S+/min)  ")
"""A panel line's bar and its percent (or rate) in front of the progress line."""


def test_stale_track_and_next_check(run: RunData) -> None:
    later = _first(run) + timedelta(minutes=7)
    full = render(progress_view(run.events(), later), 120)
    assert "Last update 7m ago" in full
    model = FrameModel(run.snapshot)
    model.add_events(run.events())
    panel = render(model.frame(later), 120)
    # the schedule was published a moment after the first sample, so its countdown rounds up to 23m or 24m
    assert re.search(r"Last update 7m ago  next check 2[34]m\n", panel), panel
    assert "+2 more" in panel, "the panel shows four tracks, then how many it left out"
    panel_tracks = panel.split("Progress\n", 1)[1].splitlines()[:4]
    labels = [BAR.sub("", line).split()[0] for line in panel_tracks]
    assert labels == ["Overall", "Gate", "Approval", "Rows"]


def test_eta_counts_down_then_awaits_a_sample(run: RunData) -> None:
    latest = _latest(run)
    first = render(progress_view(run.events(), latest), 120)
    assert "Rows  200/1,000 rows  ETA" in first and "awaiting" not in first.split("Rows", 1)[1].split("\n")[0]
    much_later = render(progress_view(run.events(), latest + timedelta(hours=5)), 120)
    assert "Rows  200/1,000 rows  ETA awaiting a new sample" in much_later
    assert "200/1,000 rows" in much_later, "counters are never extrapolated"


def test_clocks_move_without_writes(run: RunData) -> None:
    bundle = run.bundle.path
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in bundle.rglob("*") if p.is_file()}
    renders = {
        render(progress_view(run.events(), _latest(run) + timedelta(minutes=m)), 120) for m in (0, 2, 9)
    }
    assert len(renders) == 3
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in bundle.rglob("*") if p.is_file()}
    assert before == after


def test_no_progress_means_no_panel(tmp_path: Path) -> None:
    path = tmp_path / "plain.workflow.py"
    path.write_text("from piw import compute, define_workflow\nworkflow = define_workflow(name='plain', "
                    "start_at='a', nodes={'a': compute(1)})\n", encoding="utf-8")  # fmt: skip
    state = start_run(str(path), tmp_path / "home", {}, None, ForegroundOptions())
    data = load_run(tmp_path / "home", state.run_id)
    model = FrameModel(data.snapshot)
    model.add_events(data.events())
    frame = render(model.frame(data.now), 80)
    assert "Progress" not in frame and frame.rstrip().endswith("◉ end")
    assert render(view_for("progress", data), 80).strip() == "No progress updates."


def test_the_live_frame_draws_a_bar_per_track(tmp_path: Path) -> None:
    """``piw watch``/``piw run``'s frame: bars at 0 %, part-way and 100 %, and a pulse with the rate without a
    total — all from the frame's own sample windows."""
    from tests.support.viewer import NOW, PROGRESS_RUN, write_progress_run

    home = tmp_path / "home"
    write_progress_run(home)
    run = load_run(home, PROGRESS_RUN, clock=lambda: NOW)
    model = FrameModel(run.snapshot)
    model.add_events(run.events())
    lines = render(model.frame(NOW), 100).split("Progress\n", 1)[1].splitlines()[:4]
    by_label = {BAR.sub("", line).split()[0]: line for line in lines}
    assert set(by_label) == {"Load", "Rows", "Scan", "Copy"}
    assert "  0%  Load  0/50 files" in by_label["Load"]
    assert " 46%  Rows  460/1,000 rows" in by_label["Rows"] and by_label["Rows"].startswith("━━━━━")
    assert "100%  Copy  10/10 files" in by_label["Copy"] and by_label["Copy"].startswith("━" * 12)
    assert "items/min  Scan  1,000 items" in by_label["Scan"], "the pulse shows the measured rate"
    assert_terminal_safe("\n".join(lines))
