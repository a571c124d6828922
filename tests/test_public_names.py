"""Every public module of referee/, records/ and clients/ (a module whose name starts with `_`
excepted; a package is public) says what it exports in `__all__`, and every name it lists
exists."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

PACKAGES = ("tapis_cartes", "tapis_cartes.referee", "tapis_cartes.records", "tapis_cartes.clients")


def public_modules() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        if package == "tapis_cartes":
            continue  # its subpackages are the three others and the generated v1
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            if not info.name.rsplit(".", 1)[1].startswith("_"):
                names.append(info.name)
    return sorted(names)


def test_the_modules_are_found() -> None:
    found = public_modules()
    for name in (
        "tapis_cartes.records.library",
        "tapis_cartes.referee.engine.tricks",
        "tapis_cartes.clients.sdk",
        "tapis_cartes.referee.server",
    ):
        assert name in found


@pytest.mark.parametrize("name", public_modules())
def test_all_lists_names_that_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list | tuple), f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}: a name twice in __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"
