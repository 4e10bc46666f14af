"""Tests of ``piw/store``: what a run leaves on disk: trace, fold, bundles, artifacts."""
