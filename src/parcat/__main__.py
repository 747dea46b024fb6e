"""``python -m parcat``."""

from parcat.cli.entry import main

main()
