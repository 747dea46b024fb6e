"""``python -m parcat``."""

from parcat.cli.entry import run

run()
