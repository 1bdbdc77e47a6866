"""Package names imported when first used (PEP 562), so that importing a package costs only what is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["LazyModule", "lazy_names"]


def lazy_names(package: str, names: dict[str, str], namespace: dict[str, Any]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (whose globals are ``namespace``): each of ``names``
    (name -> the module defining it, relative to the package) is imported on first use, then kept."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__


class LazyModule:
    """A module imported when one of its names is first read: the first read imports it and puts the module
    itself in ``namespace[alias]`` in this object's place, so that the importing module's later reads of
    ``alias`` cost a plain global look-up. For a heavy module (numpy) that only some functions of a light
    module use: bind it as ``np = LazyModule("numpy", "np", globals())`` (with ``import numpy as np`` under
    ``TYPE_CHECKING`` for the type checker)."""

    __slots__ = ("_name", "_alias", "_namespace")

    def __init__(self, name: str, alias: str, namespace: dict[str, Any]) -> None:
        self._name = name
        self._alias = alias
        self._namespace = namespace

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        if self._namespace.get(self._alias) is self:
            self._namespace[self._alias] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r} (imported when first used)>"
