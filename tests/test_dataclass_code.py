"""Kept dataclass method code (``piw/dataclass_code.py``): the methods are the ones ``dataclasses`` makes, and the
kept file is reused, rewritten only when new texts were compiled, and ignored when unreadable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from piw.dataclass_code import _Cache

PROBE = """
import dataclasses, json, sys, typing
import piw
from dataclasses import dataclass, field

@dataclass(frozen=True, order=True)
class Point:
    x: int
    y: "list[str]" = field(default_factory=list)
    z: float = 1.5

p = Point(1, ["a"])
methods = {}
for name in ("__init__", "__repr__", "__eq__", "__lt__", "__hash__", "__setattr__", "__delattr__"):
    code = getattr(Point, name).__code__
    methods[name] = [code.co_code.hex(), repr(code.co_consts), code.co_names, code.co_varnames, code.co_flags]
try:
    p.x = 2
    frozen = False
except dataclasses.FrozenInstanceError:
    frozen = True
print(json.dumps({"methods": methods, "repr": repr(p), "eq": p == Point(1, ["a"]), "lt": p < Point(2),
                  "frozen": frozen, "hints": {k: str(v) for k, v in typing.get_type_hints(Point).items()},
                  "hint_code": typing.ForwardRef("dict[str, int | None]").__forward_code__.co_code.hex(),
                  "annotations": {k: str(v) for k, v in Point.__init__.__annotations__.items()},
                  "kept": dataclasses.__dict__.get("exec") is not None}))
"""


def _probe(**env: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_the_methods_are_those_dataclasses_compiles() -> None:
    kept = _probe()
    plain = _probe(PIW_NO_DATACLASS_CODE="1")
    assert kept.pop("kept") is True and plain.pop("kept") is False
    assert kept == plain
    assert kept["frozen"] is True and kept["repr"] == "Point(x=1, y=['a'], z=1.5)"


def test_kept_code_is_reused_and_rewritten_only_with_new_texts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "kept.marshal"
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    unwritten = _Cache(path)
    unwritten.code_for("x = 1")
    unwritten.save()
    assert not path.exists()  # PYTHONDONTWRITEBYTECODE: nothing written, as for byte code
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    first = _Cache(path)
    text = "def __create_fn__():\n def f(self):\n  return 1\n return f"
    code = first.code_for(text)
    first.save()
    assert path.is_file()
    second = _Cache(path)
    second.load()
    assert second.code_for(text) == code and not second.added
    written = path.stat().st_mtime_ns
    second.save()
    assert path.stat().st_mtime_ns == written


def test_a_bad_annotation_fails_as_before() -> None:
    import typing

    with pytest.raises(SyntaxError, match="Forward reference must be an expression"):
        typing.ForwardRef("not ) valid")


def test_an_unreadable_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "kept.marshal"
    path.write_bytes(b"\x00not marshal")
    cache = _Cache(path)
    cache.load()
    namespace: dict[str, object] = {}
    exec(cache.code_for("value = 41 + 1"), namespace)
    assert namespace["value"] == 42


def test_a_full_file_keeps_the_texts_this_process_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every start reads the whole file, so it stays bounded: over the bound, what this process used wins."""
    import marshal

    import piw.dataclass_code as kept_code

    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(kept_code, "MAX_ENTRIES", 5)
    path = tmp_path / "kept.marshal"
    filler = _Cache(path)
    for n in range(5):
        filler.code_for(f"old_{n} = {n}")
    filler.save()
    assert len(marshal.loads(path.read_bytes())) == 5
    later = _Cache(path)
    later.load()
    later.code_for("old_3 = 3")  # used again
    for n in range(3):
        later.code_for(f"new_{n} = {n}")
    later.save()
    kept = marshal.loads(path.read_bytes())
    assert len(kept) == 5
    assert {"old_3 = 3", "new_0 = 0", "new_1 = 1", "new_2 = 2"} <= kept.keys()
