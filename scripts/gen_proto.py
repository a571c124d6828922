"""Generate the Python code of `proto/` into `tapis/` (the one way to make it).

    python scripts/gen_proto.py            # regenerate in place
    python scripts/gen_proto.py --out DIR  # generate elsewhere (the staleness test uses it)

protoc's generated imports are absolute (`from tapis_cartes.v1 import ...`), so the output lives in
the importable package `tapis/v1/`, which holds nothing hand-written. Type stubs (`.pyi`)
come from mypy-protobuf; gRPC stubs from grpcio-tools.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto"
GENERATED = "Generated from proto/ by scripts/gen_proto.py: do not edit."
# A module path in the generated code (protoc imports tapis.v1 and names its modules after it),
# never a proto name (`.tapis.v1.Rules`, `tapis/v1/record.proto`, `/tapis.v1.Referee/`).
_MODULE = re.compile(r"(?<![\w./-])tapis\.v1(?=\s+import\b|\.\w+_pb2\b)")
NAMESPACE = "tapis_cartes.v1"


def generate(out: Path) -> list[Path]:
    """Run protoc on every .proto under proto/; return the files written under `out`."""
    from grpc_tools import protoc  # dev dependency: grpcio-tools

    protos = sorted(str(p.relative_to(PROTO)) for p in PROTO.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    plugin = shutil.which("protoc-gen-mypy") or str(Path(sys.executable).parent / "protoc-gen-mypy")
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--plugin=protoc-gen-mypy={plugin}",
        f"--mypy_out={out}",
        f"--plugin=protoc-gen-mypy_grpc={plugin}_grpc",
        f"--mypy_grpc_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = []
    for pkg in {Path(p).parent for p in protos}:
        (out / pkg / "__init__.py").write_text(f'"""{GENERATED}"""\n')
    for path in sorted(out.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.parent != out / "tapis":
            if path.suffix in {".py", ".pyi"}:
                path.write_text(_MODULE.sub(NAMESPACE, path.read_text()))
            written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT)
    args = parser.parse_args()
    if args.out == ROOT:
        shutil.rmtree(ROOT / "tapis" / "v1", ignore_errors=True)
    for path in generate(args.out):
        if path.suffix in {".py", ".pyi"} and "tapis" in path.parts:
            print(path.relative_to(args.out))


if __name__ == "__main__":
    main()
