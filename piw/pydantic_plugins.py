"""pydantic's plugin scan, skipped unless the user asks for it (``docs/providers.md``, first model request).

The first pydantic model a process builds makes pydantic look for plugins: it reads the entry points of every
installed package (``importlib.metadata.entry_points(group="pydantic")``). In piw's development environment that
scan was 22 M of the 1,161 M instructions from ``piw run`` to its first model request (2 %), for plugins piw does not
use, and importing ``importlib.metadata`` for it another 16 M. :func:`install` serves pydantic, in place of its plugin
loader, a module that answers ``get_plugins()`` with none (anything else asked of it comes from the real loader,
loaded then), so neither the import nor the scan happens. It changes nothing where ``PYDANTIC_DISABLE_PLUGINS`` is
set, to any value (``PYDANTIC_DISABLE_PLUGINS=`` empty lets pydantic load every plugin, as it does by default):
pydantic's own rules apply then. The environment of the processes piw starts is not touched.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

LOADER_MODULE = "pydantic.plugin._loader"


class _MarkLoaded:
    """Finds nothing itself: on the import of pydantic's plugin loader it serves :class:`_NoPlugins` in its place.

    A finder and loader by their methods, not ``importlib.abc``'s classes: importing ``importlib.abc`` costs 5 ms
    (it brings ``importlib.resources``, ``tempfile``, ``shutil``) on every start, ``piw --help`` too."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != LOADER_MODULE:
            return None
        sys.meta_path.remove(self)  # once: the next finders find the real module
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", _NoPlugins(spec)), origin=spec.origin)


class _NoPlugins:
    """pydantic's plugin loader without its import of ``importlib.metadata`` (17 ms, the scan's own cost aside).

    pydantic 2 asks the module for ``get_plugins()`` only; the module served here answers it with none, and anything
    else asked of it is taken from the real module, loaded then (PEP 562 ``__getattr__``)."""

    def __init__(self, real: importlib.machinery.ModuleSpec) -> None:
        self.real = real
        self.loaded: ModuleType | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__.update(
            PYDANTIC_ENTRY_POINT_GROUP="pydantic",
            _plugins={},
            _loading_plugins=False,
            get_plugins=no_plugins,
            __getattr__=self.real_attribute,
        )

    def real_attribute(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if self.loaded is None:
            import importlib.util

            loaded = importlib.util.module_from_spec(self.real)
            assert self.real.loader is not None
            self.real.loader.exec_module(loaded)
            mark_no_plugins(loaded)
            self.loaded = loaded
        return getattr(self.loaded, name)


def no_plugins() -> tuple[()]:
    """``get_plugins()`` of the module served in place of pydantic's loader: no plugin."""
    return ()


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
