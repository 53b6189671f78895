#!/usr/bin/env bash
# Make sure a Docker engine answers `docker info`, plus the tools the lab builds with.
#
#   bash scripts/engine.sh          everything the tests need (scripts/test.sh, .ci/run)
#   bash scripts/engine.sh --demo   only what `minidock lab up` needs (scripts/demo.sh)
#   bash scripts/engine.sh --tools  only the lab's tools below (mmdebstrap, busybox-static,
#                                   curl), no engine: scripts/setup.sh --demo starts the lab's
#                                   image builds with them while the engine is installed
#
# Idempotent: packages are installed only when missing, and dockerd is started only when
# no engine answers (and none is already starting). Safe to run on every CI step.
# The lab's packages (--demo installs only these):
#   - docker.io iptables: the engine (Debian's; FLEET-NOTES "Docker engine")
#   - docker-compose:     Compose v1 (1.29), which pytest-docker and `minidock lab` drive
#   - mmdebstrap:         builds the lab host image (sshd + dockerd) and the proxies' images
#                         (Debian's caddy unpacked, haproxy on a minbase root) without a registry
#   - busybox-static:     the one binary inside every lab workload image
#   - curl:               the demo's requests through the ingress and to the dashboard
# The tests' packages (added without --demo):
#   - docker-registry:    Debian's distribution registry (2.8), the integration tests'
#                         private registry (tests/integration/registry.py)
#   - apache2-utils:      htpasswd, for that registry's password file
#   - etcd-server etcd-client: etcd 3.4 and etcdctl, for the etcd store's tests (the test
#                         fixtures start their own members on free 127.0.0.1 ports)
#   - openssh-client:     ssh-agent, ssh-add and ssh-keygen, for the SSH tests (a real
#                         agent through the lab's bastion; fingerprints as OpenSSH prints them)
#   - prometheus:         Prometheus 2.42, which the observability tests start on a free
#                         127.0.0.1 port to scrape `minidock serve` (tests/integration/test_serve.py)
#   - chromium:           a headless browser that Playwright drives (executable_path) to load
#                         the dashboard in those tests
#   - pebble:             Debian's ACME test server and its mock DNS (pebble-challtestsrv),
#                         the lab's ACME CA for `tls = "acme"` (minidock/lab/acme.py); a lab
#                         made without it has no ACME server (`lab status` says so)
#   - haproxy:            HAProxy 2.6, the name proxies' TCP proxy (docs/discovery.md): the unit
#                         tests check the configs MiniDock builds with `haproxy -c`
#   - age:                age 1.1 and age-keygen, for `age_file` secret sources and
#                         `minidock secrets edit` (the unit tests make and read real age files)
#   - restic:             restic 0.14, the backup repository `minidock backup` writes to and
#                         `minidock restore` reads from (docs/backups.md); runs on the controller
#   - caddy:              Caddy 2.6, the lab proxy's own package, run locally by the unit tests
#                         of what MiniDock's proxy configs do in it (tests/localcaddy.py)
#   - pipx:               installs MiniDock's wheel as docs/operations.md does, in
#                         tests/integration/test_operations.py
set -euo pipefail

profile=tests
case "${1:-}" in
    --demo) profile=demo ;;
    --tools) profile=tools ;;
    "") ;;
    *) echo "engine.sh: unknown argument '$1' (use --demo, --tools, or nothing for the tests' set)" >&2; exit 2 ;;
esac

LOG=${MINIDOCK_DOCKERD_LOG:-/var/log/minidock-dockerd.log}
DOCKERD_PIDFILE=${MINIDOCK_DOCKERD_PIDFILE:-/var/run/docker.pid}
CONTAINERD_PIDFILE=${MINIDOCK_CONTAINERD_PIDFILE:-/var/run/docker/containerd/containerd.pid}
TIMEOUT=${MINIDOCK_ENGINE_TIMEOUT:-60}

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "engine.sh: not root and no sudo: cannot install or start the engine" >&2
    fi
fi

log() { echo "engine.sh: $*" >&2; }

engine_answers() { docker info >/dev/null 2>&1; }

# -- packages: install whatever is missing ------------------------------------------------
need=()
engine_pkgs=(docker.io iptables)
lab_pkgs=(docker-compose mmdebstrap busybox-static curl)
test_pkgs=(docker-registry apache2-utils etcd-server etcd-client openssh-client prometheus chromium pebble haproxy age restic caddy pipx)
pkgs=("${lab_pkgs[@]}")
if [ "$profile" = tests ]; then
    pkgs+=("${test_pkgs[@]}")
fi
if [ "$profile" != tools ] && ! engine_answers; then
    pkgs+=("${engine_pkgs[@]}")
fi
for pkg in "${pkgs[@]}"; do
    if ! dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
        need+=("$pkg")
    fi
done
# The package lists are fetched once for the runs of the next 10 minutes (`--tools`, then
# `--demo` or the tests' set): the stamp is in /run, so a reboot forgets it.
updated=/run/minidock-engine-apt-updated
if [ "${#need[@]}" -gt 0 ]; then
    log "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$(find "$updated" -mmin -10 2>/dev/null)" ]; then
        "${SUDO[@]}" apt-get update -qq
        "${SUDO[@]}" touch "$updated"
    fi
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ "$profile" = tools ] && exit 0

# -- engine: start dockerd only when nothing answers -----------------------------------------
if engine_answers; then
    exit 0
fi
if pgrep -x dockerd >/dev/null 2>&1; then
    log "dockerd is running but not answering yet; waiting"
else
    # A pid file left by an engine that is gone (a machine restored from an image taken
    # while dockerd ran) stops the next one from starting when a live process has its pid:
    # "pid file found, ensure docker is not running". No dockerd runs here, so the file
    # is stale; so is containerd's, which dockerd would otherwise wait on forever.
    for daemon_pidfile in "dockerd:$DOCKERD_PIDFILE" "containerd:$CONTAINERD_PIDFILE"; do
        daemon=${daemon_pidfile%%:*} pidfile=${daemon_pidfile#*:}
        if [ -e "$pidfile" ] && ! pgrep -x "$daemon" >/dev/null 2>&1; then
            log "removing the stale $pidfile (pid $(cat "$pidfile" 2>/dev/null || echo '?'), no $daemon runs)"
            "${SUDO[@]}" rm -f "$pidfile"
        fi
    done
    log "starting dockerd (log: $LOG)"
    "${SUDO[@]}" mkdir -p "$(dirname "$LOG")"
    # setsid + nohup: the daemon outlives this script and the CI step's process group.
    "${SUDO[@]}" sh -c "setsid nohup dockerd >>'$LOG' 2>&1 </dev/null &"
fi
start=$SECONDS
until engine_answers; do
    if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
        log "no engine answered within ${TIMEOUT}s; last lines of $LOG:"
        tail -n 30 "$LOG" >&2 || true
        exit 1
    fi
    sleep 0.5
done
log "engine up after $((SECONDS - start))s"
