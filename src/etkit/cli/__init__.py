"""The ``etkit`` command line: one small module per verb (see :mod:`etkit.cli.main`)."""
