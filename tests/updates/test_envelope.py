"""Update envelope, limits, rate limit, receipts, idempotency (``updates-progress.md`` §2–§4, 10–12)."""

from __future__ import annotations

import json
import math
import re
import threading
import uuid
from types import MappingProxyType
from typing import Any

import pytest

from piw.errors import UpdateRejected
from piw.updates.envelope import (
    MAX_CURRENT_UPDATES,
    MAX_SHELL_UPDATE_LINE_BYTES,
    MAX_UPDATE_DATA_BYTES,
    MAX_UPDATE_DATA_DEPTH,
    UPDATE_RATE_BURST,
    UPDATE_RATE_PER_SECOND,
    IdempotencyLedger,
    TokenBucket,
    UpdateInput,
    UpdateReceipt,
    check_pair_limit,
    new_update_id,
    validate_update,
)

PROGRESS = {"schema": "pi-workflows.progress.v1", "status": "running"}


def rejected(raw: object) -> str:
    with pytest.raises(UpdateRejected) as caught:
        validate_update(raw)
    return str(caught.value)


def update(**overrides: Any) -> dict[str, Any]:
    return {"type": "command-batch.item", "key": "jobs/1", "data": {"n": 1}, **overrides}


def test_constants() -> None:
    assert (MAX_UPDATE_DATA_BYTES, MAX_CURRENT_UPDATES, MAX_SHELL_UPDATE_LINE_BYTES) == (
        65_536,
        1_024,
        65_536,
    )
    assert (UPDATE_RATE_PER_SECOND, UPDATE_RATE_BURST) == (20, 100)


def test_valid_update_round_trips_to_a_detached_copy() -> None:
    nested = {"rows": [1, 2.5, "x", None, True, {"deep": []}]}
    raw = update(data=nested)
    result = validate_update(raw)
    assert result == UpdateInput(type="command-batch.item", key="jobs/1", data=nested)
    nested["rows"].append(9)
    assert result.data["rows"][-1] == {"deep": []}
    assert validate_update(result) == result
    assert validate_update(update(data=MappingProxyType({"a": 1}))).data == {"a": 1}


# ------------------------------------------------------------------------------------------ item 10: regexes


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("type", "a" * 64, True),
        ("type", "a" * 65, False),
        ("type", "a-0.b", True),
        ("type", "Progress", False),
        ("type", "0abc", False),
        ("type", "progress\n", False),
        ("type", "", False),
        ("type", 7, False),
        ("key", "K" * 128, True),
        ("key", "K" * 129, False),
        ("key", "a:b/c_d.e-f", True),
        ("key", "Overall", True),
        ("key", "-x", False),
        ("key", "worker\n", False),
        ("key", "a b", False),
        ("key", None, False),
    ],
)
def test_type_and_key_patterns(field: str, value: object, ok: bool) -> None:
    raw = update(**{field: value})
    if ok:
        assert getattr(validate_update(raw), field) == value
    elif field == "type":
        assert rejected(raw) == "update.type must match [a-z][a-z0-9.-]{0,63}"
    else:
        assert rejected(raw) == "update.key must match [A-Za-z0-9][A-Za-z0-9._:/-]{0,127}"


def test_missing_fields_fail_their_rule_and_order_is_envelope_type_key_data() -> None:
    assert rejected({"key": "k", "data": {}}) == "update.type must match [a-z][a-z0-9.-]{0,63}"
    assert rejected({"type": "t", "data": {}}) == "update.key must match [A-Za-z0-9][A-Za-z0-9._:/-]{0,127}"
    assert rejected({"type": "t", "key": "k"}) == "update.data must be a non-null JSON object"
    assert rejected({"type": "T", "key": "-", "data": None}).startswith("update.type")
    assert rejected({"type": "t", "key": "-", "data": None}).startswith("update.key")
    assert rejected({"type": "T", "extra": 1}) == "update.extra is not supported"


# ------------------------------------------------------------------------------------ item 11: envelope, data


@pytest.mark.parametrize("raw", [None, [], "update", 3, ("type", "key", "data")])
def test_not_an_object(raw: object) -> None:
    assert rejected(raw) == "update must be an object"


@pytest.mark.parametrize("name", ["extra", "updateId", "seq", "at", "runId", "nodeId", "attemptId"])
def test_extra_and_runtime_owned_keys_are_rejected(name: str) -> None:
    assert rejected(update(**{name: "x"})) == f"update.{name} is not supported"


def test_unprintable_extra_key_is_not_echoed() -> None:
    numbered: dict[Any, Any] = {**update(), 3: 1}
    assert rejected(numbered) == "update.<key> is not supported"
    assert rejected({**update(), "\x1b[2J": 1}) == "update.<key> is not supported"


@pytest.mark.parametrize("data", [None, [], "text", 1, True])
def test_data_must_be_an_object(data: object) -> None:
    assert rejected(update(data=data)) == "update.data must be a non-null JSON object"


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"a": math.nan}, "update.data.a"),
        ({"a": {"b": [1, math.inf]}}, "update.data.a.b[1]"),
        ({"x y": -math.inf}, 'update.data["x y"]'),
        ({"ok": 1, "rows": [{"v": 1}, {"v": math.nan}]}, "update.data.rows[1].v"),
    ],
)
def test_non_finite_numbers_name_their_path(data: dict[str, Any], path: str) -> None:
    assert rejected(update(data=data)) == f"{path} contains a non-finite number"


class Opaque:
    pass


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"a": Opaque()}, "update.data.a"),
        ({"a": (1, 2)}, "update.data.a"),
        ({"a": {1, 2}}, "update.data.a"),
        ({"a": b"bytes"}, "update.data.a"),
        ({"a": [1, {"b": MappingProxyType({})}]}, "update.data.a[1].b"),
        ({"a": "lone \ud800 surrogate"}, "update.data.a"),
        ({1: "x"}, "update.data"),
        ({"a": {None: 1}}, "update.data.a"),
        ({"a": {"\udfff": 1}}, "update.data.a"),
    ],
)
def test_non_json_values_name_their_path(data: dict[Any, Any], path: str) -> None:
    assert rejected(update(data=data)) == f"{path} contains a non-JSON value"


def test_non_finite_is_reported_before_an_earlier_non_json_value() -> None:
    assert (
        rejected(update(data={"a": Opaque(), "b": math.nan})) == "update.data.b contains a non-finite number"
    )


def test_cycles_and_depth_are_rejected_without_recursion_errors() -> None:
    cyclic: dict[str, Any] = {"a": []}
    cyclic["a"].append(cyclic)
    assert rejected(update(data=cyclic)) == "update.data.a[0] contains a non-JSON value"
    deep: dict[str, Any] = {}
    cursor = deep
    for _ in range(MAX_UPDATE_DATA_DEPTH):
        cursor["d"] = {}
        cursor = cursor["d"]
    assert rejected(update(data=deep)) == "update.data must be nested at most 100 levels deep"
    ok = deep["d"]
    assert validate_update(update(data=ok)).data == ok


def test_long_key_in_a_path_is_clipped() -> None:
    message = rejected(update(data={"k" * 500 + " ": math.nan}))
    assert message == 'update.data["' + "k" * 61 + '..."] contains a non-finite number'


def test_data_size_boundary_counts_utf8_bytes() -> None:
    # {"t":"…"} is 8 bytes of structure; "é" is two bytes of UTF-8.
    exact = {"t": "é" * ((MAX_UPDATE_DATA_BYTES - 8) // 2)}
    assert len(json.dumps(exact, separators=(",", ":"), ensure_ascii=False).encode()) == 65_536
    assert validate_update(update(data=exact)).data == exact
    over = {"t": exact["t"] + "a"}
    assert rejected(update(data=over)) == "update.data must be at most 65536 bytes"


def test_huge_shared_structure_is_too_big_without_walking_it_all() -> None:
    row = list(range(1000))
    assert rejected(update(data={"rows": [row] * 10_000})) == "update.data must be at most 65536 bytes"


def test_rejections_never_echo_data() -> None:
    secret = "sk-SECRET-VALUE"
    for data in ({"a": secret, "b": math.nan}, {"a": secret * 10_000}, {"a": [secret, Opaque()]}):
        assert secret not in rejected(update(data=data))
    assert (
        rejected(update(data={"\u202e\x1b": math.nan}))
        == 'update.data["\\u202e\\u001b"] contains a non-finite number'
    )


def test_progress_updates_are_validated_by_the_profile() -> None:
    ok = validate_update({"type": "progress", "key": "overall", "data": PROGRESS})
    assert ok.data == PROGRESS
    bool_count = {**PROGRESS, "completed": True, "unit": "rows"}
    message = rejected({"type": "progress", "key": "w", "data": bool_count})
    assert message == "progress.completed must be a finite non-negative number"
    assert (
        rejected({"type": "progress", "key": "w", "data": {**PROGRESS, "eta": 1}})
        == "progress.eta is not supported"
    )
    assert rejected({"type": "progress", "key": "w", "data": {**PROGRESS, "n": math.nan}}).endswith(
        "non-finite number"
    )
    assert validate_update({"type": "progress.v2", "key": "w", "data": {"eta": 1}}).type == "progress.v2"


def test_update_input_model_is_strict_and_closed() -> None:
    with pytest.raises(ValueError):
        UpdateInput.model_validate({"type": "t", "key": "k", "data": {}, "seq": 1})
    with pytest.raises(ValueError):
        UpdateInput.model_validate({"type": 1, "key": "k", "data": {}})
    assert rejected(UpdateInput(type="Bad", key="k", data={})).startswith("update.type must match")


# ---------------------------------------------------------------------------------- item 12: limits and rates


def test_pair_limit_allows_replacement_but_not_the_1025th_pair() -> None:
    pairs = {("progress", f"w{i}") for i in range(1_023)}
    check_pair_limit(pairs, "progress", "w1023")
    pairs.add(("progress", "w1023"))
    assert len(pairs) == 1_024
    with pytest.raises(UpdateRejected, match=re.escape("too many current updates (limit 1024)")):
        check_pair_limit(pairs, "progress", "w1024")
    with pytest.raises(UpdateRejected):
        check_pair_limit(pairs, "other", "w0")  # same key, other type: a new pair
    check_pair_limit(pairs, "progress", "w0")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float, cancel: threading.Event | None) -> bool:
        self.sleeps.append(seconds)
        if cancel is not None and cancel.is_set():
            return True
        self.now += seconds
        return False


def test_token_bucket_burst_then_reject_then_refill() -> None:
    clock = FakeClock()
    bucket = TokenBucket(clock=clock)
    for _ in range(100):
        bucket.take_or_reject()
    with pytest.raises(UpdateRejected, match=r"^workflow update rate limit exceeded$"):
        bucket.take_or_reject()
    assert not bucket.try_take()
    clock.now = 1.0
    assert sum(bucket.try_take() for _ in range(25)) == 20
    clock.now = 1.25
    assert sum(bucket.try_take() for _ in range(10)) == 5
    clock.now = 1_000.0
    assert bucket.tokens == 100  # refills cap at the burst


def test_token_bucket_wait_take_sleeps_until_a_token_is_due() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=20, burst=2, clock=clock, sleep=clock.sleep)
    assert bucket.wait_take() and bucket.wait_take()
    assert bucket.wait_take()
    assert clock.sleeps == [0.05] and clock.now == 0.05
    cancel = threading.Event()
    cancel.set()
    assert bucket.wait_take(cancel) is False


def test_token_bucket_real_wait_is_cancellable() -> None:
    bucket = TokenBucket(rate=0.001, burst=1)
    assert bucket.try_take()
    cancel = threading.Event()
    threading.Timer(0.05, cancel.set).start()
    assert bucket.wait_take(cancel) is False


def test_token_bucket_is_shared_safely_between_threads() -> None:
    bucket = TokenBucket(clock=lambda: 0.0)
    taken: list[bool] = []
    lock = threading.Lock()

    def publish() -> None:
        for _ in range(50):
            result = bucket.try_take()
            with lock:
                taken.append(result)

    threads = [threading.Thread(target=publish) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(taken) == 100


# ----------------------------------------------------------------------------------- receipts and idempotency


def test_receipt_json_and_update_ids() -> None:
    receipt = UpdateReceipt("upd_1", 7, "2025-03-01T12:00:00.000Z", "progress", "overall")
    assert receipt.to_json() == {
        "updateId": "upd_1",
        "seq": 7,
        "at": "2025-03-01T12:00:00.000Z",
        "type": "progress",
        "key": "overall",
    }
    first, second = new_update_id(), new_update_id()
    assert first != second and first.startswith("upd_")
    assert uuid.UUID(first.removeprefix("upd_")).version == 4


def test_idempotency_ledger_adopts_identical_and_rejects_different_content() -> None:
    receipt = UpdateReceipt("upd_1", 3, "2025-03-01T12:00:00.000Z", "progress", "w")
    content: dict[str, Any] = {"type": "progress", "key": "w", "data": {"n": 1, "ok": True}}
    ledger = IdempotencyLedger({"call_1": (content, receipt)})
    assert ledger.check("call_2", content) is None
    assert ledger.check("call_1", {"data": {"ok": True, "n": 1}, "key": "w", "type": "progress"}) is receipt
    assert ledger.check("call_1", UpdateInput(**content)) is receipt
    message = "update reuses tool call id call_1 with different content"
    for different in (
        {**content, "key": "v"},
        {**content, "data": {"n": 1, "ok": 1}},
        {**content, "extra": 1},
        {**content, "data": {"n": Opaque()}},
        "not an object",
    ):
        with pytest.raises(UpdateRejected) as caught:
            ledger.check("call_1", different)
        assert str(caught.value) == message
    ledger.record("call_2", content, receipt)
    assert ledger.check("call_2", content) is receipt
