"""Compiled code for the methods ``dataclasses`` generates, kept between runs as ``.pyc`` files keep a module's.

``@dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``… as source
text and compiles it with ``exec`` when the class is defined. ``piw run`` defines about 170 dataclasses (its own,
pydantic's, typer's) before its first model request, and that parsing and compiling was a third of the instructions
it ran until then (``docs/providers.md``, first model request). The text is the same on every start, so its
compiled code is kept in ``piw/__pycache__`` beside the byte code, and :func:`install` lets ``dataclasses`` execute
the kept code instead of compiling the text again; ``typing``'s compile of each string annotation (a
``ForwardRef``, about 1,100 of them) is kept the same way.

The methods are the same: the text is compiled exactly as ``exec`` compiles it (no ``__future__`` flags are
inherited, the file name is ``<string>``), and only ``dataclasses``' own ``exec`` and ``typing``'s own ``compile``
are replaced. The file is written as byte code is (not under ``PYTHONDONTWRITEBYTECODE``, not where ``__pycache__``
is read-only), atomically, and one that cannot be read is ignored; it is named by the interpreter's byte-code tag, so
another Python never reads it.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import marshal
import os
import sys
import threading
import typing
from pathlib import Path
from types import CodeType
from typing import Any

MAX_ENTRIES = 3_000
"""The most texts the file keeps. Every start reads the whole file (about 5 ms a megabyte, some 800 bytes a text),
and every process that compiles a new text adds it (workflow files and test suites define dataclasses too), so a
file with no bound would make every later start slower. When a save would go over, the texts this process used or
compiled are kept first, then the others as they came, up to the bound: ``piw`` itself uses about 1,200."""

_compile = builtins.compile
_exec = builtins.exec


class _Cache:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.codes: dict[str, CodeType] = {}
        self.used: set[str] = set()
        """The keys this process looked up: kept first when the file is full."""
        self.added = False
        self.lock = threading.Lock()

    def load(self) -> None:
        if self.path is None:
            return
        try:
            loaded = marshal.loads(self.path.read_bytes())
        except (OSError, ValueError, EOFError, TypeError):
            return
        if isinstance(loaded, dict):
            self.codes = {text: code for text, code in loaded.items() if isinstance(code, CodeType)}

    def code_for(self, text: str, mode: str = "exec") -> CodeType:
        key = text if mode == "exec" else f"\0{mode}\0{text}"
        code = self.codes.get(key)
        if code is None:
            code = _compile(text, "<string>", mode, dont_inherit=True)
            with self.lock:
                self.codes[key] = code
                self.added = True
        self.used.add(key)
        return code

    def save(self) -> None:
        if not self.added or self.path is None or sys.dont_write_bytecode:
            return
        with self.lock:
            data = marshal.dumps(self._kept())
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(exist_ok=True)
            partial.write_bytes(data)
            os.replace(partial, self.path)
        with contextlib.suppress(OSError):
            partial.unlink()

    def _kept(self) -> dict[str, CodeType]:
        """What the file keeps: every text while they fit, else the ones used here first (see MAX_ENTRIES)."""
        if len(self.codes) <= MAX_ENTRIES:
            return dict(self.codes)
        kept: dict[str, CodeType] = {}
        for key in self.used:
            if len(kept) >= MAX_ENTRIES:
                return kept
            kept[key] = self.codes[key]
        for key, code in self.codes.items():
            if len(kept) >= MAX_ENTRIES:
                break
            kept.setdefault(key, code)
        return kept


_installed: _Cache | None = None


def cache_path() -> Path | None:
    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    return Path(__file__).resolve().parent / "__pycache__" / f"dataclass-code.{tag}.marshal"


def install() -> None:
    """Let ``dataclasses`` run kept code for the method texts it has compiled before (idempotent)."""
    global _installed
    if _installed is not None or os.environ.get("PIW_NO_DATACLASS_CODE"):
        return
    cache = _Cache(cache_path())
    cache.load()
    _installed = cache

    def kept_exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:
        if isinstance(source, str):
            source = cache.code_for(source)
        _exec(source, globals, locals)

    def kept_compile(
        source: Any, filename: Any, mode: str, flags: int = 0, dont_inherit: bool = False, optimize: int = -1
    ) -> Any:
        # typing compiles each string annotation (ForwardRef); as from typing, no __future__ flag is inherited.
        if (
            isinstance(source, str)
            and filename == "<string>"
            and mode == "eval"
            and not flags
            and optimize == -1
        ):
            return cache.code_for(source, "eval")
        return _compile(source, filename, mode, flags, dont_inherit=True, optimize=optimize)

    dataclasses.exec = kept_exec  # type: ignore[attr-defined]  # shadows the builtin in that module only
    typing.compile = kept_compile  # type: ignore[attr-defined]
    atexit.register(cache.save)
