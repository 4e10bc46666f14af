"""Run references: full ids, unique prefixes, ``latest`` and ``-N``, with candidates and suggestions on errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from piw.errors import RunNotFound, UsageError
from piw.store.runref import resolve_run_id, run_ids

IDS = [
    "20260816T100000123Z-import-2f81a9c3",
    "20260816T100500000Z-import-7d00aa01",
    "20260817T090000000Z-triage-0badc0de",
]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    for run_id in IDS:
        bundle = tmp_path / "runs" / run_id
        bundle.mkdir(parents=True)
        (bundle / "manifest.json").write_text("{}")
    (tmp_path / "runs" / ".incomplete-x").mkdir()
    (tmp_path / "runs" / "20260818T000000000Z-nomanifest-00000000").mkdir()
    return tmp_path


def test_ids_are_listed_newest_first_and_incomplete_bundles_are_skipped(home: Path) -> None:
    assert run_ids(home) == list(reversed(IDS))


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (IDS[0], IDS[0]),
        ("20260817", IDS[2]),
        ("20260816T1005", IDS[1]),
        ("latest", IDS[2]),
        ("-1", IDS[2]),
        ("-3", IDS[0]),
        (" latest ", IDS[2]),
    ],
)
def test_references_resolve_to_one_run(home: Path, ref: str, expected: str) -> None:
    assert resolve_run_id(home, ref) == expected


def test_an_ambiguous_prefix_lists_the_candidates(home: Path) -> None:
    with pytest.raises(UsageError) as error:
        resolve_run_id(home, "20260816")
    assert "ambiguous" in str(error.value) and IDS[0] in str(error.value) and IDS[1] in str(error.value)


def test_an_unknown_id_suggests_the_closest(home: Path) -> None:
    with pytest.raises(RunNotFound) as error:
        resolve_run_id(home, "20260817T090000000Z-triage-0badc0dx")
    assert f"Did you mean {IDS[2]}?" in str(error.value)


def test_a_position_past_the_end_says_how_many_runs_exist(home: Path) -> None:
    with pytest.raises(RunNotFound, match="only 3 runs"):
        resolve_run_id(home, "-4")


def test_garbage_is_a_usage_error(home: Path) -> None:
    with pytest.raises(UsageError, match="not a run id"):
        resolve_run_id(home, "../etc")
