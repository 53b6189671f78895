#!/usr/bin/env bash
# The demo (README Quickstart): four route workers on a local lab fleet of three SSH +
# Docker hosts; lose the host that carries two of them; MiniDock starts exactly two
# replacements; bring the host back; its stale workers are removed. Real hosts, real output.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh --demo  # the engine and the lab's tools only (scripts/engine.sh)
md() { .venv/bin/minidock "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
started=0
reconcile_until_converged() {  # like cron: one pass at a time; counts the tasks it starts
  started=0
  for pass in $(seq 1 20); do
    set +e
    output=$(md reconcile 2>&1)
    code=$?
    set -e
    echo "-- pass $pass: exit $code"
    [ -n "$output" ] && echo "$output"
    started=$((started + $(grep -c '^started ' <<<"$output" || true)))
    # 0 converged; 4 degraded: a host is down and everything that can run runs
    { [ "$code" = 0 ] || [ "$code" = 4 ]; } && return 0
    sleep 1
  done
  return 1
}
export MINIDOCK_STATE="$PWD/.minidock-demo"
rm -rf "$MINIDOCK_STATE"

say "A lab fleet: three hosts, each running sshd and dockerd, reachable only on 127.0.0.1"
md lab down >/dev/null 2>&1 || true  # start from empty hosts, so every act shows below
md lab up --hosts 3
md lab status

say "Apply playbooks/route-workers.toml: four route workers, spread over the hosts"
md apply playbooks/route-workers.toml --wait --timeout 2m
md status

lost=$(md status --json | python3 -c '
import collections, json, sys
tasks = json.load(sys.stdin)["tasks"]
per_host = collections.Counter(t["host"] for t in tasks if t["state"] == "running")
print(max(sorted(per_host), key=lambda h: per_host[h]))')
carried=$(md status --json | python3 -c "
import json, sys
print(sum(1 for t in json.load(sys.stdin)['tasks'] if t['host'] == '$lost' and t['state'] == 'running'))")

say "Lose $lost, which carries $carried workers: its container is stopped (the host is off)"
md lab kill "$lost" --mode stop

say "Reconcile as cron would, once per pass, until settled (exit 0; 3 means work remains, 4 a host is down)"
reconcile_until_converged
echo
echo "The first pass saw one failed probe (down_after = 2), so it replaced nothing yet."
echo "Then $lost was down: replacements started: $started (it carried $carried; never 4)."
md status

say "Bring $lost back: its old workers are stale, since their slots were refilled elsewhere"
md lab revive "$lost"
reconcile_until_converged
md status

say "Every change is in the event log"
md events --limit 20

echo
echo "The lab is still up: try \`minidock lab kill host2 --mode pause\` then \`minidock reconcile\`"
echo "(with MINIDOCK_STATE=$MINIDOCK_STATE). Tear it down with \`.venv/bin/minidock lab down\`."
