"""Tests of ``piw/run/executors``: the node executors."""
