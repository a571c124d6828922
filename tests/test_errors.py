"""The one error tree (referee/errors.py) and its table (docs/errors.md): every exception the
project defines is a `TapisError` of that module, and the table lists each with the gRPC status
and the exit code its class carries."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import code_pb2

from tapis_cartes import clients, records, referee
from tapis_cartes.referee import errors
from tapis_cartes.referee.errors import TapisError

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "errors.md"
DASH = "—"


def _import_all() -> None:
    """Every module of the packages, so that a subclass defined anywhere is seen."""
    for package in (referee, records, clients):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            importlib.import_module(info.name)


def _tree(cls: type[TapisError] = TapisError) -> Iterator[type[TapisError]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _tree(sub)


def _table() -> dict[str, tuple[str, str]]:
    """Error name -> (gRPC status, exit code) as docs/errors.md writes them."""
    rows: dict[str, tuple[str, str]] = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"\| `(\w+)` \| .+ \| ([A-Z_]+|—) \| ([0-9]+|—) \|", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} twice in docs/errors.md"
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def _shown(value: object) -> str:
    return DASH if value is None else str(value)


def test_every_error_is_a_tapis_error_of_the_one_module() -> None:
    _import_all()
    classes = list(_tree())
    assert len(classes) == len(set(classes))
    for cls in classes:
        assert cls.__module__ == "tapis_cartes.referee.errors", cls
        assert cls.__name__ in errors.__all__, cls
        assert cls.__doc__ and cls.__doc__.strip().splitlines()[0].strip(), cls
    names = [cls.__name__ for cls in classes]
    assert len(names) == len(set(names)), "one name, one error"


def test_no_exception_class_outside_the_one_module() -> None:
    """No module of the packages defines an exception class of its own (read from the
    source: a class whose base is an exception or a class of the tree)."""
    tree_names = set(errors.__all__)
    found = []
    for package in ("referee", "records", "clients"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "referee" / "errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ClassDef):
                    continue
                for base in node.bases:
                    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                    if name in tree_names or name.endswith(("Error", "Exception")):
                        found.append(f"{path.relative_to(ROOT)}: {node.name}({name})")
    assert not found, found


def test_the_table_lists_every_error_with_its_status_and_exit_code() -> None:
    _import_all()
    table = _table()
    carried = {cls.__name__: (_shown(cls.grpc_status), _shown(cls.exit_code)) for cls in _tree()}
    assert set(table) == set(carried), (
        f"missing in docs/errors.md: {sorted(set(carried) - set(table))}; "
        f"not errors: {sorted(set(table) - set(carried))}"
    )
    wrong = {name: (table[name], carried[name]) for name in carried if table[name] != carried[name]}
    assert not wrong, f"(table, class) disagree: {wrong}"


def test_every_status_is_a_code_a_client_may_get() -> None:
    codes = set(code_pb2.Code.keys())
    for cls in _tree():
        if cls.grpc_status is not None:
            assert cls.grpc_status in codes, cls
            assert cls.grpc_status not in ("OK", "UNKNOWN", "INTERNAL"), cls
        assert cls.exit_code in (None, 1, 2), cls


# Arguments for the classes whose `__init__` is their own (the others take a message).
_SAMPLES: dict[type[TapisError], Callable[[type], TapisError]] = {
    errors.IllegalAction: lambda c: c("must-follow", "follow suit", "DP.FOLLOW", legal=(1, 2)),
    errors.RulesError: lambda c: c("bad option", "end_threshold"),
    errors.RecordError: lambda c: c("decode", "bad bytes", hand=1),
    errors.SignatureError: lambda c: c("invalid", "signature-invalid", "does not hold"),
    errors.NotReplayable: lambda c: c("DP.FOLLOW", "hand 1"),
    errors.BadRequest: lambda c: c("too long", "name"),
    errors.Stale: lambda c: c("stale", 3),
    errors.Stopping: lambda c: c(12),
    errors.RefereeError: lambda c: c(grpc.StatusCode.NOT_FOUND, "no table"),
    errors.ActionRefused: lambda c: c("refused", "DP.FOLLOW", "must-follow", "follow", []),
    errors.StaleAction: lambda c: c("stale", 3),
}


def _sample(cls: type[TapisError]) -> TapisError:
    for base in cls.__mro__:
        if base in _SAMPLES:
            return _SAMPLES[base](cls)
    return cls("a message")


@pytest.mark.parametrize("cls", list(_tree()), ids=lambda c: c.__name__)
def test_the_service_answers_with_the_status_a_class_carries(cls: type[TapisError]) -> None:
    from tapis_cartes.referee.server.service import _status_of

    status = _status_of(_sample(cls))
    if cls.grpc_status is None:  # never returned by the referee: a bug if it were
        assert status.code == code_pb2.INTERNAL
    else:
        assert status.code == code_pb2.Code.Value(cls.grpc_status)
