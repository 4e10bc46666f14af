"""A progress update whose ``updateId`` is not a string is skipped like any malformed update (issue 26 item 13).

``progress_records_from_trace`` reads traces that piw may not have written (an older version, a hand-edited file):
a line without the update shape is skipped, never fatal. ``updateId`` used to be turned into text with ``str()``,
so ``7`` or ``null`` became a record with update id ``"7"``/``"None"`` that views then kept as a sample.
"""

from __future__ import annotations

from typing import Any

import pytest

from piw.progress import progress_records_from_trace

DATA = {"schema": "pi-workflows.progress.v1", "status": "running", "completed": 1, "total": 4, "unit": "rows"}


def _line(seq: int, update_id: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"type": "progress", "key": "rows", "data": DATA}
    if update_id is not ...:
        payload["updateId"] = update_id
    return {"seq": seq, "at": "2026-11-30T06:00:00.000Z", "scope": "node", "type": "update_published",
            "runId": "run-1", "nodeId": "work", "attemptId": "a" * 32, "payload": payload}  # fmt: skip


@pytest.mark.parametrize("update_id", [7, None, ["upd_1"], {"id": "upd_1"}, True, ...],
                         ids=["int", "null", "list", "object", "bool", "missing"])  # fmt: skip
def test_an_update_id_that_is_not_a_string_is_not_kept(update_id: Any) -> None:
    records = progress_records_from_trace([_line(1, update_id), _line(2, "upd_good")])
    assert [(record.seq, record.update_id) for record in records] == [(2, "upd_good")]
