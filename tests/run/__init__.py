"""Tests of ``piw/run``: executing a run: engine, resume, host, lifecycle, budgets, fork."""
