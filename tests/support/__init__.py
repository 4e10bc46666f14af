"""Helpers the tests share: the ``piw`` command in process and as a subprocess, runs, bundles and paths.

Fixtures live in ``tests/conftest.py`` (and the harnesses it registers as plugins); these modules hold the plain
functions and classes behind them.
"""
