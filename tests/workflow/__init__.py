"""Tests of ``piw/workflow``: what a workflow is: definition, graph, loader, routing."""
