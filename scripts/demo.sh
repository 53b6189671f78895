#!/usr/bin/env bash
# The demo (README Quickstart), on a local lab fleet of three SSH + Docker hosts:
#   1. host loss: four route workers; lose the host that carries two of them; MiniDock starts
#      exactly two replacements; bring the host back; its stale workers are removed;
#   2. the application layer: a Compose file (playbooks/shop.compose.yaml) applied, reached
#      through the ingress, updated to a new image under load with every request counted;
#   3. the dashboard (`minidock serve`), left running beside the lab, and its address.
# Real hosts, real output. It installs only what the lab needs (scripts/engine.sh --demo).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

phases=() marks=()
phase() { phases+=("$1"); marks+=("$SECONDS"); }  # the time each part takes, printed at the end
phase "set-up (packages, engine, .venv)"
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
phase "lab up (images built where missing)"
# start from empty hosts, so every act shows below (a checkout that never made a lab has none)
if [ -e .lab/lab.json ]; then md lab down >/dev/null 2>&1 || true; fi
mkdir -p -m 700 "$MINIDOCK_STATE"
# The application layer's ingress proxy (Caddy) is only needed after the host loss, and only
# on host3, the ingress host of playbooks/shop.compose.yaml: its image builds beside the host
# image (two builds, two cores) and loads into host3 while the host loss plays out.
edge_host=host3
(
    md lab build ingress
    until [ -e "$MINIDOCK_STATE/lab-is-up" ]; do sleep 0.5; done
    md lab load ingress --host "$edge_host"
    md lab status --json >"$MINIDOCK_STATE/lab-status.json"
) >"$MINIDOCK_STATE/ingress.log" 2>&1 &
ingress_job=$!
ingress_ready() {  # the background job's end; its log when it failed
    [ -z "$ingress_job" ] && return 0
    wait "$ingress_job" && ingress_job="" && return 0
    echo "preparing the ingress image failed:" >&2
    cat "$MINIDOCK_STATE/ingress.log" >&2
    exit 1
}
md lab up --hosts 3 --images workloads  # the host image and the busybox workloads only
touch "$MINIDOCK_STATE/lab-is-up"
md lab status

say "Apply playbooks/route-workers.toml: four route workers, spread over the hosts"
phase "host loss: apply, lose a host, replace, revive"
md apply playbooks/route-workers.toml --wait --timeout 2m  # its lines say where each one runs
md status --json >"$MINIDOCK_STATE/status.json"

read -r lost carried < <(python3 -c '
import collections, json, sys
tasks = json.load(open(sys.argv[1]))["tasks"]
per_host = collections.Counter(t["host"] for t in tasks if t["state"] == "running")
lost = max(sorted(per_host), key=lambda h: per_host[h])
print(lost, per_host[lost])' "$MINIDOCK_STATE/status.json")

say "Lose $lost, which carries $carried workers: its container is stopped (the host is off)"
[ "$lost" = "$edge_host" ] && ingress_ready  # the ingress image goes into $edge_host first
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

say "Every change is in the event log"
md events --limit 12

say "The application layer: playbooks/shop.compose.yaml, a web app behind the ingress (Caddy on $edge_host)"
phase "application: apply the Compose file, curl"
ingress_ready
md apply playbooks/shop.compose.yaml --wait --timeout 2m
edge=$(python3 -c '
import json, sys
hosts = json.load(open(sys.argv[1]))["hosts"]
print(next(h["http_port"] for h in hosts if h["name"] == sys.argv[2]))' \
    "$MINIDOCK_STATE/lab-status.json" "$edge_host")
echo "\$ curl -H 'Host: app.test' http://127.0.0.1:$edge/    # $edge_host's port 80"
curl -sS --max-time 5 -H 'Host: app.test' "http://127.0.0.1:$edge/"
echo

say "A rolling update to web 6 (WEB_TAG=6) while a client sends a request every 0.1 s through the ingress"
phase "application: rolling update under load"
load=$MINIDOCK_STATE/load
: >"$load.log"
rm -f "$load.stop"
(   # one request at a time; each line is the answer's body and HTTP status (000: none)
    while [ ! -e "$load.stop" ]; do
        out=$(curl -s --max-time 5 -w ' %{http_code}' -H 'Host: app.test' "http://127.0.0.1:$edge/" || true)
        echo "${out//$'\n'/}" >>"$load.log"
        sleep 0.1
    done
) &
loader=$!
sleep 1
WEB_TAG=6 md apply playbooks/shop.compose.yaml --wait --timeout 2m
sleep 1
touch "$load.stop"
wait "$loader"
total=$(wc -l <"$load.log")
failed=$(grep -cv ' 200$' "$load.log" || true)
echo "requests through the ingress during the update: $total;" \
    "answered by web 5: $(grep -c '^web 5 200$' "$load.log" || true)," \
    "by web 6: $(grep -c '^web 6 200$' "$load.log" || true); failed: $failed"
echo "\$ curl -H 'Host: app.test' http://127.0.0.1:$edge/"
curl -sS --max-time 5 -H 'Host: app.test' "http://127.0.0.1:$edge/"

say "The dashboard: \`minidock serve\`, which only reads (no lock), left running beside the lab"
phase "dashboard"
serve_port=${MINIDOCK_DEMO_SERVE_PORT:-9440}
if [ -f "$MINIDOCK_STATE/serve.pid" ]; then kill "$(cat "$MINIDOCK_STATE/serve.pid")" 2>/dev/null || true; fi
setsid nohup .venv/bin/minidock serve --listen "127.0.0.1:$serve_port" \
    >"$MINIDOCK_STATE/serve.log" 2>&1 </dev/null &
echo $! >"$MINIDOCK_STATE/serve.pid"
for _ in $(seq 1 100); do  # up once it serves a page (the fleet is observed on request)
    curl -sf --max-time 2 -o /dev/null "http://127.0.0.1:$serve_port/static/style.css" && break
    sleep 0.2
done
curl -sS --max-time 5 "http://127.0.0.1:$serve_port/metrics" | grep '^minidock_service_tasks{.*state="running"' || true
echo "The dashboard: http://127.0.0.1:$serve_port/ (also /metrics, /api/status, /api/events);"
echo "its log: $MINIDOCK_STATE/serve.log; stop it with \`kill \$(cat $MINIDOCK_STATE/serve.pid)\`."

phase end
echo
printf 'The demo took %s s:' "$SECONDS"
for i in $(seq 0 $((${#phases[@]} - 2))); do
    printf ' %s %s s;' "${phases[$i]}" "$((marks[i + 1] - marks[i]))"
done
echo
echo
echo "The lab is still up: try \`minidock lab kill host2 --mode pause\` then \`minidock reconcile\`"
echo "(with MINIDOCK_STATE=$MINIDOCK_STATE). Tear it down with \`.venv/bin/minidock lab down\`."
[ "$failed" = 0 ]  # the demo fails if a request failed during the update
