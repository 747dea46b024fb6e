"""``python -m parcat``."""

from parcat.cli.main import run

run()
