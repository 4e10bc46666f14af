"""``python -m piw`` runs the CLI (the same as the ``piw`` console script)."""

from piw.cli.main import main

main()
