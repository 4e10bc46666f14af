"""``piw runs --json`` builds its text straight from the index rows (``piw.store.history.listing_json``): it must be
the text the summaries give, byte for byte, on the same home (``docs/cli.md``, "Finding runs")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piw.store import history
from piw.store.db.database import open_database
from piw.store.db.index import COLUMN_NAMES, decode_row
from piw.store.history import _json_of, _NotForMsgspec, _raw_usage, _summary, find_runs, listing_json
from piw.store.run_query import RunQuery
from piw.terminal import json_text
from tests.support.cli import Cli
from tests.support.generated import plan_runs, write_home

COUNT = 2_500  # over history.MSGSPEC_FROM: the whole listing takes the msgspec encoder

USAGES: list[Any] = [
    {"cost": 1e-05, "input": 12, "output": 3, "requests": 1},  # msgspec alone writes 1e-05 as 0.00001
    {"cost": 1.2345678901234567e19, "input": 2**70},
    {"cost": 0.1 + 0.2, "cacheRead": 0, "cacheWrite": 5},
    {"note": 'Zürich \u202e \x7f \\ " \n'},  # escaped in the stored text
    {},
    [1, 2.5, None, True],
]
TITLES = [
    "bidi \u202e override",
    "DEL \x7f and C1 \x85",
    'quote " back \\ newline \n tab \t bell \x07',
    "line separator \u2028 and 🙂",
    "",
    None,
]


def _usage_text(usage: Any) -> str:
    """As the index stores a run's usage (``piw.store.db.index._usage_json``)."""
    return json.dumps(usage, sort_keys=True, separators=(",", ":"))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated home whose rows also carry usage, damage, a script phase, odd titles and running runs."""
    home = tmp_path_factory.mktemp("listing")
    runs = plan_runs(COUNT)
    write_home(home, runs, whole=False)
    db = open_database(home)
    with db.transaction() as conn:
        for index, run in enumerate(reversed(runs[-200:])):
            changes: dict[str, Any] = {"usage_json": _usage_text(USAGES[index % len(USAGES)])}
            if index % 7 == 0:
                changes["run_title"] = TITLES[(index // 7) % len(TITLES)]
            if index % 11 == 0:
                changes.update(damage_line=index + 2, notice="damaged")
            if index % 13 == 0:
                changes.update(status="running", current_node="fan › review", finished_at=None, paused=1)
            if index % 17 == 0:
                changes["current_node"] = "only-a-node"
            sets = ", ".join(f"{name} = ?" for name in changes)
            conn.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", (*changes.values(), run.run_id))
    return home


def regular(home: Path, query: RunQuery) -> bytes:
    return json.dumps([row.to_json() for row in find_runs(home, query)], ensure_ascii=False).encode()


QUERIES = [
    RunQuery(),
    RunQuery(limit=40),
    RunQuery(statuses=("running", "waiting")),
    RunQuery(statuses=("failed", "cancelled")),
    RunQuery(search="zürich"),
    RunQuery(workflow="digest"),
    RunQuery(schedule="nightly", limit=500),
]


@pytest.mark.parametrize("encoder_from", [0, 10**9], ids=["msgspec", "json"])
@pytest.mark.parametrize("query", QUERIES, ids=repr)
def test_the_json_listing_is_the_summaries_text(
    home: Path, query: RunQuery, encoder_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "MSGSPEC_FROM", encoder_from)
    expected = regular(home, query)
    assert json.loads(expected), "every query lists runs"
    monkeypatch.setattr(history, "find_runs", _not_called)  # the listing's own text, not its fallback's
    formatted: list[int] = []
    real_format = msgspec.json.format

    def counted_format(*args: Any, **kwargs: Any) -> Any:
        formatted.append(1)
        return real_format(*args, **kwargs)

    monkeypatch.setattr(msgspec.json, "format", counted_format)
    assert listing_json(home, query) == expected
    assert formatted == ([1] if encoder_from == 0 else []), "the encoder the test names is the one used"


@pytest.mark.parametrize("usage", [{"cost": float("nan")}, {"cost": float("inf"), "note": "-Infinity"}])
def test_a_usage_msgspec_cannot_write_sends_the_listing_to_json(
    home: Path, usage: dict[str, float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runs = plan_runs(30)
    write_home(tmp_path, runs, whole=False)
    with open_database(tmp_path).transaction() as conn:
        conn.execute("UPDATE runs SET usage_json = ? WHERE run_id = ?", (_usage_text(usage), runs[4].run_id))
    monkeypatch.setattr(history, "MSGSPEC_FROM", 0)
    expected = regular(tmp_path, RunQuery())
    assert "NaN" in expected.decode() or "Infinity" in expected.decode()
    assert listing_json(tmp_path, RunQuery()) == expected


def _not_called(*args: object) -> None:
    raise AssertionError("listing_json fell back to find_runs")


def test_the_generated_home_has_what_the_encoders_differ_on(home: Path) -> None:
    rows = find_runs(home, RunQuery())
    assert len(rows) == COUNT >= history.MSGSPEC_FROM
    assert any(row.damage for row in rows) and any(row.current_phase for row in rows)
    assert any(row.wait for row in rows) and any(row.status == "running" for row in rows)
    assert any(row.usage and row.usage.get("cost") == 1e-05 for row in rows if isinstance(row.usage, dict))
    assert msgspec.json.encode(1e-05) != json.dumps(1e-05).encode()  # why usage goes through as its own text


def test_piw_runs_json_prints_what_the_summaries_print(home: Path, tmp_path: Path) -> None:
    cli = Cli(home, tmp_path)
    for args in ([], ["--limit", "40"], ["--status", "running"]):
        query = RunQuery(limit=40) if args[:1] == ["--limit"] else RunQuery(statuses=tuple(args[1:]))
        shown = cli.process("runs", "--json", *args)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == json_text([row.to_json() for row in find_runs(home, query)]) + "\n"
        assert "\\u202e" in shown.stdout or args  # terminal-safe: the bidi override is escaped


_text = st.one_of(st.none(), st.text())
_numbers = st.one_of(st.integers(), st.floats(), st.booleans(), st.none())
_usage = st.one_of(
    st.none(),
    st.dictionaries(st.text(max_size=8), st.one_of(_numbers, st.text(max_size=8)), max_size=6),
)


@settings(max_examples=300, deadline=None)
@given(
    title=_text,
    name=st.text(min_size=1),
    place=st.one_of(st.none(), st.text(), st.tuples(st.text(), st.text()).map(" › ".join)),
    usage=_usage,
    started=st.one_of(st.none(), st.integers(0, 253_402_300_799_999)),
    line=st.one_of(st.none(), st.integers(1, 10**6)),
    schedule=_text,
)
def test_one_row_encodes_alike(
    title: str | None,
    name: str,
    place: str | None,
    usage: dict[str, Any] | None,
    started: int | None,
    line: int | None,
    schedule: str | None,
) -> None:
    """Any row's text, by msgspec and by json, is the text its summary gives."""
    stored = {
        "run_id": "20260601T000000000Z-x-00000001",
        "workflow_name": name,
        "run_title": title,
        "status": "completed",
        "paused": 0,
        "parent_run_id": title,
        "started_at": started,
        "updated_at": None,
        "finished_at": started,
        "trace_seq": 0,
        "current_node": place,
        "notice": None,
        "cost": None,
        "damage_line": line,
        "usage_json": _usage_text(usage) if usage else None,
        "trace_stamp": None,
        "search_text": None,
        "schedule_name": schedule,
        "fire_at": started,
    }
    values = tuple(stored[column] for column in COLUMN_NAMES)
    expected = json.dumps([_summary(decode_row(values), None, False, None).to_json()], ensure_ascii=False)
    try:
        by_msgspec = msgspec.json.format(msgspec.json.encode([_json_of(values, None, _raw_usage)]), indent=0)
    except _NotForMsgspec:  # listing_json then encodes the whole list with json (checked below)
        assert usage and any(word in _usage_text(usage) for word in ("NaN", "Infinity"))
    else:
        assert by_msgspec.decode() == expected
    assert json.dumps([_json_of(values, None, json.loads)], ensure_ascii=False) == expected
