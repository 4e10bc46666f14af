"""Tests of ``piw/store/db``: the run database (queue, decisions, outbox, index)."""
