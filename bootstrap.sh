#!/usr/bin/env bash
# Fresh machine -> running demo or test suite.
#   ./bootstrap.sh demo   install everything, then run `cdcctl demo`
#   ./bootstrap.sh test   install everything (with test extras), then run the whole suite
# Installs Java 17 from Debian when no Java 17+ is found, creates .venv with Python 3.11+,
# and installs cdcctl into it. Safe to re-run: every step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")"
what="${1:-demo}"; shift || true

java_ok() {
  local j="${JAVA_HOME:+$JAVA_HOME/bin/}java"
  command -v "$j" >/dev/null 2>&1 || return 1
  local v; v=$("$j" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [ -n "$v" ] && [ "$v" -ge 17 ]
}
if ! java_ok; then
  echo "bootstrap: installing Java 17 (openjdk-17-jre-headless)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.13 python3.12 python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      PY="$cand"; break
    fi
  done
fi
[ -n "$PY" ] || { echo "bootstrap: Python 3.11+ is required" >&2; exit 2; }
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv 2>/dev/null || {
    echo "bootstrap: installing python3-venv" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
    "$PY" -m venv .venv
  }
fi
extras=""; [ "$what" = "test" ] && extras="[test]"
stamp=".venv/.installed$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".$extras"
  touch "$stamp"
fi
# Spark's classes as a class-data archive for this Java (~15 s once; Spark then starts ~3 s sooner).
.venv/bin/python -m engine.spark build-class-archive 2>/dev/null || true

case "$what" in
  demo) exec .venv/bin/cdcctl demo "$@" ;;
  test) exec .venv/bin/python -m pytest "$@" ;;
  install) echo "installed: .venv/bin/cdcctl" ;;
  *) echo "usage: ./bootstrap.sh demo|test|install" >&2; exit 2 ;;
esac
