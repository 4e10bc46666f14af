"""The ``piw`` command line: ``main`` is the entry point, each module registers its commands on ``app``."""
