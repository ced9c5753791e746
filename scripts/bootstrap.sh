#!/usr/bin/env bash
# Create (or reuse) .venv with Python >= 3.12 and install bayes_rvm into it (editable).
#   bash scripts/bootstrap.sh        the package and what its default paths need
#   bash scripts/bootstrap.sh dev    also the development extras (tests, docs, JAX, Dask, benchmarks)
# Any other argument names extras to add, e.g. "jax,dask".
# Looks for a suitable interpreter on PATH first, then among pyenv's installed versions.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
case "$extras" in
    "" | [a-z]*) ;;
    *) echo "bootstrap: the argument is a list of extras such as dev or jax,dask, got '$extras'." >&2; exit 1 ;;
esac

ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

find_python() {
    local cand
    for cand in "${PYTHON:-}" python3.12 python3.13 python3.14 python3 python; do
        [ -n "$cand" ] || continue
        if command -v "$cand" >/dev/null 2>&1 && ok "$(command -v "$cand")"; then
            command -v "$cand"; return 0
        fi
    done
    local root="${PYENV_ROOT:-$HOME/.pyenv}"
    for cand in $(ls -d "$root"/versions/3.* 2>/dev/null | sort -V); do
        if [ -x "$cand/bin/python3" ] && ok "$cand/bin/python3"; then
            echo "$cand/bin/python3"; return 0
        fi
    done
    return 1
}

if [ -x .venv/bin/python ] && ok .venv/bin/python; then
    PY=.venv/bin/python
else
    if ! base=$(find_python); then
        echo "bootstrap: no Python >= 3.12 found on PATH or under pyenv (${PYENV_ROOT:-$HOME/.pyenv}/versions)." >&2
        echo "bootstrap: install one (e.g. 'pyenv install 3.12') or set PYTHON=/path/to/python3.12." >&2
        exit 1
    fi
    echo "bootstrap: creating .venv with $base" >&2
    rm -rf .venv
    "$base" -m venv .venv
    PY=.venv/bin/python
fi
# The editable install follows the sources; only a change of pyproject.toml (the dependencies,
# the entry points) needs pip again. The stamp records the pyproject.toml last installed with
# these extras.
stamp=".venv/.bootstrap-${extras:-core}"
target="."
[ -z "$extras" ] || target=".[$extras]"
if cmp -s pyproject.toml "$stamp"; then
    echo "bootstrap: .venv is up to date with pyproject.toml ($target)" >&2
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && ! ls "$site"/numpy/__pycache__/*.pyc >/dev/null 2>&1; then
        # Installed by an earlier bootstrap without bytecode (see below): compile it once.
        echo "bootstrap: compiling the installed packages' bytecode" >&2
        "$PY" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
    fi
else
    # uv installs the same releases as pip in a third of the time (parallel downloads and
    # unpacking: 40 s against 110 s for the dev extras on 2 cores); pip is the fallback.
    # uv leaves the bytecode to Python, which writes each module's at its first import. Where
    # PYTHONDONTWRITEBYTECODE forbids that, every process would compile each module it imports
    # from source (3x the import time of scikit-learn, PyMC and ArviZ; 10-11 s of CPU for the
    # first MCMC fit in a fresh process against 7.6-7.8 s): there --compile-bytecode writes all
    # of it at install, as pip does (about 30 s for the dev extras on 2 cores).
    compile=""
    [ -z "${PYTHONDONTWRITEBYTECODE:-}" ] || compile="--compile-bytecode"
    echo "bootstrap: installing $target into .venv (the installer's progress follows)" >&2
    if ! { "$PY" -m pip install --quiet uv >&2 && "$PY" -m uv pip install $compile --python "$PY" -e "$target" >&2; }; then
        echo "bootstrap: uv did not install it; installing with pip" >&2
        "$PY" -m pip install --quiet --upgrade pip >&2
        "$PY" -m pip install --progress-bar on -e "$target" >&2
    fi
    cp pyproject.toml "$stamp"
fi
echo "bootstrap: ready in $SECONDS s" >&2
