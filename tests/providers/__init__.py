"""Tests of ``piw/providers``: the model adapters, their configuration and their faults."""
