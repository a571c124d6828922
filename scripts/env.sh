# Sourced by scripts/run and scripts/test: make ./.venv with everything the project needs.
# (Re)installs when pyproject.toml, setup.py or a compiled engine module changed since the
# last install; the install compiles the engine with mypyc when it can (setup.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TAPIS_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.tapis-installed"
WANT="$(cd "$ROOT" && cat pyproject.toml setup.py referee/engine/{cards,shuffle,actions,tricks,base,dame_de_pique,napoleon,triomphe,imperiale}.py | sha256sum | cut -d' ' -f1)${TAPIS_PURE_PYTHON:-}"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "installing Tapis and its dependencies into $VENV (a few minutes the first time) ..." >&2
  LOG="$VENV/install.log"
  if ! { "$VENV/bin/python" -m pip install --upgrade pip && \
         "$VENV/bin/python" -m pip install -e "$ROOT[dev]"; } > "$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    echo "install failed; the whole log is $LOG" >&2
    exit 1
  fi
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
