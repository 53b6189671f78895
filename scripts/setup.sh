#!/usr/bin/env bash
# Prepare this machine for MiniDock's tests and demo. Idempotent and quick when done before:
#   1. a Docker engine and the lab's tools (scripts/engine.sh),
#   2. the virtualenv .venv with MiniDock installed editable with its dev extras
#      (pip runs beside 1's apt-get; python3-venv, when missing, is installed first).
# `setup.sh --demo` (scripts/demo.sh) installs only what the demo runs: the engine and the
# lab's tools (`engine.sh --tools`, then `--demo`), and MiniDock without its dev and test
# extras; on a fresh machine it also builds the lab's images beside the engine's install.
# A later `setup.sh` (scripts/test.sh) adds the rest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=tests
case "${1:-}" in
    --demo) profile=demo ;;
    "") ;;
    *) echo "setup.sh: unknown argument '$1' (use --demo, or nothing for the tests' set)" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/python ]; then
    if ! python3 -m venv .venv 2>/dev/null; then
        # Debian's python3 ships venv/ensurepip separately
        rm -rf .venv
        SUDO=(); [ "$(id -u)" -eq 0 ] || SUDO=(sudo)
        "${SUDO[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
            python3-venv >/dev/null
        python3 -m venv .venv
    fi
fi

# Reinstall only when the packaging changed (the install is editable: code changes need none).
# The stamp is the hash of pyproject.toml and the extras installed ("dev" or "base"): a demo
# set-up after a full one installs nothing; a full one after the demo's adds the extras.
stamp=.venv/.minidock-setup
hash=$(sha256sum pyproject.toml | cut -d' ' -f1)
have=$(cat "$stamp" 2>/dev/null || true)
[ "$have" = "$hash" ] && have="$hash dev"  # a stamp written before the profiles: a dev install
if [ "$profile" = demo ] && [ "$have" = "$hash dev" ]; then
    want=$have
elif [ "$profile" = demo ]; then
    want="$hash base"
else
    want="$hash dev"
fi
install_minidock() {
    if [ "$have" != "$want" ] || ! .venv/bin/python -c 'import minidock' 2>/dev/null; then
        if [ "$want" = "$hash base" ]; then
            .venv/bin/python -m pip install -q --disable-pip-version-check -e .
        else
            .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
        fi
        echo "$want" >"$stamp"
    fi
    # MiniDock's own bytecode, compiled once here: an environment that sets
    # PYTHONDONTWRITEBYTECODE (this machine's does) never writes it, and then every
    # `minidock` process (the suite starts some 1,100) compiles its 130 modules again: about
    # 0.3 s of CPU each (docs/benchmarks.md "The test suite"). compileall writes it whatever
    # that variable says, and an edited module is compiled again the next time.
    .venv/bin/python -m compileall -q minidock >/dev/null
}

# The install (pip, from the package index) and the engine's packages (apt) are
# independent: they run side by side, and setup waits for both.
install_minidock &
installing=$!
if [ "$profile" = tests ]; then
    if ! bash scripts/engine.sh; then
        wait "$installing" || true
        exit 1
    fi
    if ! wait "$installing"; then
        echo "setup.sh: installing MiniDock into .venv failed (see above)" >&2
        exit 1
    fi
    exit 0
fi

# The demo's set-up on a fresh machine (no engine installed, so no lab image either) also
# builds the lab's images (the host image, the ingress proxy, the workloads), started as
# soon as the lab's tools are installed: with the system's python3 and nothing but the
# standard library (`python3 -m minidock.lab.prebuild`), beside pip and beside apt-get
# installing the engine. The builds are mmdebstrap's (dpkg's) work, the engine's install
# mostly dpkg's and Python's byte-compiling, pip mostly waiting on the index: the two cores
# stay busy (docs/benchmarks.md, "The demo"). Each build's `docker import` waits for the
# engine (minidock.lab.local.wait_for_engine).
if ! bash scripts/engine.sh --tools; then
    wait "$installing" || true
    exit 1
fi
building=""
built=$(mktemp)
trap 'rm -f "$built"' EXIT
if ! docker info >/dev/null 2>&1 && ! command -v dockerd >/dev/null 2>&1; then
    PYTHONPATH="$PWD" python3 -m minidock.lab.prebuild host ingress workloads >"$built" 2>&1 &
    building=$!
fi
failed=0
bash scripts/engine.sh --demo || failed=1
if ! wait "$installing"; then
    echo "setup.sh: installing MiniDock into .venv failed (see above)" >&2
    failed=1
fi
if [ -n "$building" ]; then
    if wait "$building"; then
        cat "$built"
    else
        echo "setup.sh: building the lab's images failed:" >&2
        cat "$built" >&2
        failed=1
    fi
fi
exit "$failed"
