"""``python -m tailgate`` is the ``tailgate`` command."""

from tailgate.cli import main

main()
