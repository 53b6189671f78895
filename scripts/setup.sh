#!/usr/bin/env bash
# Prepare this machine for MiniDock's tests and demo. Idempotent and quick when done before:
#   1. a Docker engine and the lab's tools (scripts/engine.sh),
#   2. the virtualenv .venv with MiniDock installed editable with its dev extras.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/engine.sh

if [ ! -x .venv/bin/python ]; then
    if ! python3 -m venv .venv 2>/dev/null; then
        # Debian's python3 ships venv/ensurepip separately
        rm -rf .venv
        SUDO=(); [ "$(id -u)" -eq 0 ] || SUDO=(sudo)
        DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
            python3-venv >/dev/null
        python3 -m venv .venv
    fi
fi

# Reinstall only when the packaging changed (the install is editable: code changes need none).
stamp=.venv/.minidock-setup
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! .venv/bin/python -c 'import minidock' 2>/dev/null; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
    echo "$want" >"$stamp"
fi

# MiniDock's own bytecode, compiled once here: an environment that sets
# PYTHONDONTWRITEBYTECODE (this machine's does) never writes it, and then every `minidock`
# process (the suite starts some 1,100) compiles its 130 modules again: about 0.3 s of
# CPU each (docs/benchmarks.md "The test suite"). compileall writes it whatever that
# variable says, and an edited module is compiled again the next time; quick when current.
.venv/bin/python -m compileall -q minidock >/dev/null
