"""Tests of the built-in workflows (``workflows/builtins``), one module per built-in."""
