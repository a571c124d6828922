"""A package's public names loaded when first used (PEP 562): what its `__init__` lists in
`__all__` without importing the modules behind them, so that importing the package stays
cheap (a re-scoring worker, the command line's start-up)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["load"]


def load(package: str, name: str, modules: Mapping[str, str]) -> Any:
    """`name` of `package`, from its module in `modules` (a module's full name, or its name
    within `package`); `AttributeError` for a name not listed there. A package's
    `__getattr__` calls it."""
    module = modules.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    if "." not in module:
        module = f"{package}.{module}"
    return getattr(importlib.import_module(module), name)
