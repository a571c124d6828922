"""The referee's log (JSON lines): gRPC's own errors for a caller gone while its answer was
sent, and for metadata that is not UTF-8, are warning lines; gRPC's other errors stay
errors."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.commands import ROOT

_CHILD = """
import logging
from tapis_cartes.referee.server.app import setup_logging
setup_logging()
log = logging.getLogger("grpc._cython.cygrpc")
try:
    raise RuntimeError("Failed execute_batch: SendStatusFromServerOperation")
except RuntimeError:
    log.exception("ExecuteBatchError raised in core by servicer method [%s]", "/GetView")
    log.exception("Unexpected [%s] raised by servicer method [%s]", "ValueError", "/x")
try:
    b"Bearer \\xe9\\xff".decode("utf8")
except UnicodeDecodeError:
    log.exception("Invalid encoding on %s", b"Bearer \\xe9\\xff")
"""


def test_a_caller_gone_while_answered_is_a_warning_not_an_error() -> None:
    """The fuzzer's referee log once held gRPC's ExecuteBatchError as an error with its
    traceback: a submission on a short deadline whose caller was gone when the answer went
    out. A caller may go away at any moment; the log says so as a warning."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    gone, other, encoding = (json.loads(line) for line in done.stderr.splitlines())
    assert gone["level"] == "warning" and gone["event"].startswith("ExecuteBatchError")
    assert "Traceback" not in json.dumps(gone)
    assert other["level"] == "error" and "Traceback" in json.dumps(other)
    # Metadata that is not UTF-8 (an `authorization` of any bytes, answered PERMISSION_DENIED):
    # the client's doing, a warning.
    assert encoding["level"] == "warning" and encoding["event"].startswith("Invalid encoding")
    assert "Traceback" not in json.dumps(encoding)
