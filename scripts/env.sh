# Sourced by scripts/run and scripts/test: make ./.venv with what the project needs.
# TAPIS_EXTRAS names the extras to install: scripts/run installs none (what serving needs),
# scripts/test "dev" (the default: the tests, OpenSpiel, Dask, the linters ...).
# (Re)installs when pyproject.toml, setup.py or a compiled module (referee/engine/_native.py
# lists them) changed since the last install; the install compiles them with mypyc when it
# can (setup.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TAPIS_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.tapis-installed"
EXTRAS="${TAPIS_EXTRAS-dev}"
WANT="$(cd "$ROOT" && cat pyproject.toml setup.py referee/engine/_native.py $(grep -o "\"[a-z_/]*\.py\"" referee/engine/_native.py | tr -d "\"") | sha256sum | cut -d' ' -f1)${TAPIS_PURE_PYTHON:-}"
# An install with the dev extras also serves; one without them does not run the tests.
HAVE="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$HAVE" != "$WANT:$EXTRAS" ] && [ "$HAVE" != "$WANT:dev" ]; then
  echo "installing Tapis and its dependencies into $VENV (a few minutes the first time) ..." >&2
  LOG="$VENV/install.log"
  : > "$LOG"
  # A download the network cuts is resumed (PIP_RESUME_RETRIES, which the build's own pip
  # reads too), and an install that fails all the same is tried again, twice: pip keeps what
  # it downloaded. (A cut download of mypy once failed an install.)
  export PIP_RESUME_RETRIES="${PIP_RESUME_RETRIES:-10}"
  installed=""
  for attempt in 1 2 3; do
    # Tapis was once installed as the distribution "tapis" (top-level packages of other names).
    if { "$VENV/bin/python" -m pip install --upgrade pip && \
         "$VENV/bin/python" -m pip uninstall -y -q tapis && \
         "$VENV/bin/python" -m pip install -e "$ROOT${EXTRAS:+[$EXTRAS]}"; } >> "$LOG" 2>&1; then
      installed=1
      break
    fi
    echo "install attempt $attempt failed" >> "$LOG"
  done
  if [ -z "$installed" ]; then
    tail -n 40 "$LOG" >&2
    echo "install failed (3 attempts); the whole log is $LOG" >&2
    exit 1
  fi
  echo "$WANT:$EXTRAS" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
