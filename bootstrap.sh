#!/usr/bin/env bash
# Fresh machine -> running demo or test suite.
#   ./bootstrap.sh demo   install everything, then run `cdcctl demo`
#   ./bootstrap.sh test   install everything (with test extras), then run the whole suite
#   ./bootstrap.sh lint   install the test extras, then ruff, mypy and the import contracts
#   ./bootstrap.sh peers  install what the tests need beside Python (PostgreSQL with PostGIS,
#                         MariaDB, Maven) and resolve the pinned JVM peers under interop/
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

py_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  # Probe quietly: version-manager shims (pyenv) exist on PATH but fail loudly when unset.
  for cand in python3.13 python3.12 python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && py_ok "$cand"; then PY="$cand"; break; fi
  done
fi
[ -n "$PY" ] || { echo "bootstrap: Python 3.11+ is required (set PYTHON=/path/to/python3.11+)" >&2; exit 2; }
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $PY" >&2
  "$PY" -m venv .venv >/dev/null 2>&1 || {
    echo "bootstrap: installing python3-venv" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
    "$PY" -m venv .venv
  }
fi
extras=""; case "$what" in test|lint|peers) extras="[test]" ;; esac
stamp=".venv/.installed$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "bootstrap: installing cdcctl$extras into .venv (log: .venv/install.log)" >&2
  if ! { .venv/bin/python -m pip install --upgrade pip \
         && .venv/bin/python -m pip install -e ".$extras"; } >.venv/install.log 2>&1; then
    tail -n 30 .venv/install.log >&2
    echo "bootstrap: installing failed; the whole log is in .venv/install.log" >&2
    exit 1
  fi
  touch "$stamp"
fi
# Spark's classes as a class-data archive for this Java (~15 s once; Spark then starts ~3 s sooner).
[ "$what" = "lint" ] || .venv/bin/python -m engine.spark build-class-archive || true

# The tests' own servers and JVM peers: Debian's PostgreSQL and MariaDB (the tests start
# scratch servers on free loopback ports; nothing is started here), Maven, then the pinned
# sets under interop/ resolved once into ~/.cache/cdcctl/interop (tests/peers/jars.py).
peers() {
  local need=()
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
  command -v mvn >/dev/null 2>&1 || need+=(maven)
  if [ "${#need[@]}" -gt 0 ]; then
    echo "bootstrap: installing ${need[*]} (Debian packages the tests use)" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    # Installing a server package starts its service on Debian; the tests need none running.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
    for svc in postgresql mariadb; do $SUDO service "$svc" stop >/dev/null 2>&1 || true; done
  fi
  # PostGIS for the PostgreSQL major the scratch servers run (the highest installed).
  local pg_major
  pg_major=$(compgen -G "/usr/lib/postgresql/*/bin/initdb" | sed 's|/usr/lib/postgresql/||; s|/.*||' | sort -V | tail -1 || true)
  if [ -n "$pg_major" ] && [ ! -f "/usr/share/postgresql/$pg_major/extension/postgis.control" ]; then
    echo "bootstrap: installing postgresql-$pg_major-postgis-3 (PostGIS, for the Debezium tests)" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "postgresql-$pg_major-postgis-3" >/dev/null
  fi
  .venv/bin/python -m tests.peers.jars
}

case "$what" in
  demo) exec .venv/bin/cdcctl demo "$@" ;;
  peers) peers ;;
  test)
    peers
    # Tables written by Apache Hudi (hudi-rs's test data, from its PyPI source archive).
    .venv/bin/python -m tests.hudi_rs_data
    # Two workers (CDCCTL_TEST_WORKERS=0 runs in one process): ~11 min instead of ~18.
    # loadgroup: tests sharing an expensive module fixture (xdist_group) stay on one worker.
    # --durations=25: the 25 slowest tests are listed at the end of every run.
    exec .venv/bin/python -m pytest -n "${CDCCTL_TEST_WORKERS:-2}" --dist loadgroup \
      --durations=25 "$@" ;;
  lint)
    .venv/bin/ruff check .
    .venv/bin/ruff format --check .
    .venv/bin/mypy
    .venv/bin/lint-imports
    ;;
  install) echo "installed: .venv/bin/cdcctl" ;;
  *) echo "usage: ./bootstrap.sh demo|test|lint|peers|install" >&2; exit 2 ;;
esac
