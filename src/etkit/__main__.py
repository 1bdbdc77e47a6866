"""``python -m etkit``: the same as the ``etkit`` command."""

from .cli.main import run

run()
