"""etkit's optional C extensions are built wherever the machine has a C compiler.

Each extension has a numpy or Python twin, and the kernel tests (``tests/format/test_walk_kernel.py`` and the
like) run both and compare them. Where an extension failed to build, both sides of such a comparison would be
the twin, and the comparison could not fail: this test makes that a failure instead, on every machine that
could have built them (CI included)."""

from __future__ import annotations

import importlib
import re
import shutil
import sysconfig

import pytest

from .conftest import REPO


def _extensions() -> list[str]:
    """The modules of pyproject.toml's ``[[tool.setuptools.ext-modules]]`` tables (read without tomllib: 3.10)."""
    text = (REPO / "pyproject.toml").read_text()
    return re.findall(r'^\[\[tool\.setuptools\.ext-modules\]\]\s*\nname\s*=\s*"([^"]+)"', text, re.M)


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


def test_pyproject_lists_extensions() -> None:
    assert "etkit.format._walk" in _extensions()


@pytest.mark.parametrize("name", _extensions())
def test_extension_is_built(name: str) -> None:
    if _compiler() is None:
        pytest.skip("no C compiler on this machine: etkit runs on the extensions' twins")
    module = importlib.import_module(name)
    assert module.__file__ and module.__file__.endswith(sysconfig.get_config_var("EXT_SUFFIX"))
