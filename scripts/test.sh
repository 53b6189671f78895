#!/usr/bin/env bash
# The project's test command (README "Testing"): set up, then check, then run every test,
# unit and integration (the integration tests start and remove their own lab fleet).
# Extra arguments go to pytest, e.g. `scripts/test.sh -m "not integration"`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

# -- checks: the one place for lint and type checks (e.g. `.venv/bin/nox -s lint typecheck`) --
# The commands are CHECKS in noxfile.py (the nox lint/typecheck sessions run the same ones);
# here they run with .venv's ruff and mypy, so CI builds no extra virtualenvs.
.venv/bin/python noxfile.py lint typecheck

# -- tests: any non-zero pytest exit fails this script, 5 ("no tests collected") included ----
# Two pytest-xdist workers, a test file to each at a time (--dist loadfile): the lab tests
# mostly wait on health checks and timeouts, so two labs (one per worker, 4 hosts each)
# halve the suite's wall time on two cores (docs/testing.md). The files go out in the
# order tests/conftest.py sorts them, longest first (--no-loadscope-reorder: not xdist's
# most-tests-first, which left the one-test kill -9 matrix for last). `-n 0`: one process.
.venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder "$@"
