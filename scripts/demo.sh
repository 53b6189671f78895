#!/usr/bin/env bash
# A short tour: a lab fleet of three SSH + Docker hosts, and what it looks like.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

.venv/bin/minidock lab up --hosts 3
.venv/bin/minidock lab status
