"""Tests of ``piw/views``: the pure views of a run bundle."""
