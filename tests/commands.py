"""The `tapis` command line as the tests run it: a child process of this Python, on the
working tree, with nothing of the caller's environment but what it is given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def tapis(
    *args: str | Path,
    cwd: Path | None = None,
    memory_limit: int | None = None,
    setup: str = "",
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """Run `tapis ARGS...` (text output captured, two minutes at most); `memory_limit`
    bounds the child's address space in bytes (a hostile record cannot take the machine down
    with it); `setup`: Python run in the child before the command (to inject); `env` adds
    environment variables."""

    if memory_limit is not None:  # set by the child itself, first (no `preexec_fn`: CHILD_FIRST)
        limit = f"resource.setrlimit(resource.RLIMIT_AS, ({memory_limit}, {memory_limit}))"
        setup = f"import resource\n{limit}\n{setup}"
    return subprocess.run(
        cli_command(setup, *args),
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **_data_home(), **env},
    )


def _data_home() -> dict[str, str]:
    """The run's own data folder (conftest.py `own_data_home`), for the commands too."""
    home = os.environ.get("XDG_DATA_HOME")
    return {} if home is None else {"XDG_DATA_HOME": home}


# What a child sets itself, first, rather than a `preexec_fn`: with one, the child is forked
# to run Python code before its program, and the fork runs gRPC's fork handlers (this process
# has gRPC loaded, its threads running), which can abort the child ("epoll_wait error: Bad file
# descriptor", SIGABRT); without, it is started without them.
# As from a terminal: Ctrl-C not ignored (a test run in the background inherits SIGINT ignored).
INTERRUPTIBLE = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"


def cli_command(setup: str, *args: str | Path) -> list[str]:
    """The child's command: `tapis ARGS...`, after `setup` if any."""
    if not setup:
        return [sys.executable, "-m", "tapis_cartes.clients.cli", *map(str, args)]
    main = "import sys\nfrom tapis_cartes.clients.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return [sys.executable, "-c", setup + "\n" + main, *map(str, args)]
