"""pydantic's plugin scan, skipped unless the user asks for it (``docs/providers.md``, first model request).

The first pydantic model a process builds makes pydantic look for plugins: it reads the entry points of every
installed package (``importlib.metadata.entry_points(group="pydantic")``). In piw's development environment that
scan was 22 M of the 1,161 M instructions from ``piw run`` to its first model request (2 %), for plugins piw does not
use. :func:`install` lets pydantic import its plugin loader as usual, then marks the plugins as already loaded
(none), so the scan never runs. It changes nothing where ``PYDANTIC_DISABLE_PLUGINS`` is set, to any value
(``PYDANTIC_DISABLE_PLUGINS=`` empty lets pydantic load every plugin, as it does by default): pydantic's own rules
apply then. The environment of the processes piw starts is not touched. Should pydantic rename what it keeps, the
mark is not made and pydantic scans as before.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

LOADER_MODULE = "pydantic.plugin._loader"


class _MarkLoaded(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on the import of pydantic's plugin loader it wraps the real loader's ``exec_module``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != LOADER_MODULE:
            return None
        sys.meta_path.remove(self)  # once: the next finders find the real module
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return real.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                real.exec_module(module)
                mark_no_plugins(module)

        spec.loader = _Loader()
        return spec


def mark_no_plugins(loader_module: Any) -> None:
    """Mark pydantic's plugins as loaded, with none, if the module keeps them where pydantic 2 does."""
    if getattr(loader_module, "_plugins", False) is None:
        loader_module._plugins = {}


def install() -> None:
    """Skip the scan in this process unless ``PYDANTIC_DISABLE_PLUGINS`` is set (idempotent; imports no pydantic)."""
    if "PYDANTIC_DISABLE_PLUGINS" in os.environ:
        return
    loaded = sys.modules.get(LOADER_MODULE)
    if loaded is not None:
        mark_no_plugins(loaded)
        return
    if not any(isinstance(finder, _MarkLoaded) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MarkLoaded())
