#!/usr/bin/env bash
# The demo as on a fresh machine, run on this one (docs/benchmarks.md, "The demo"), as root:
#
#   bash benchmarks/demo_fresh.sh [WORKDIR]     # default /tmp/minidock-demo-fresh
#
# What a fresh machine lacks is taken away or hidden, for this run only:
#   - .venv is removed, and pip runs without its cache;
#   - the tags of this checkout's host and ingress images are removed (the images stay while
#     a container uses them; `caddy:2` and every other recipe's tags are left alone), so the
#     demo builds both from nothing;
#   - the engine is hidden (DOCKER_HOST names a socket that is not there yet, and /usr/sbin is
#     off the PATH), while its packages are installed for real into a fresh Debian root
#     (WORKDIR/root, made once with mmdebstrap; chroot, empty apt cache, purged before each
#     run): first the lab's tools, which the image builds wait for, then the engine's
#     packages, beside the builds; then the socket is linked to the real engine, and the demo
#     sees the engine answer when a fresh machine's would.
# The demo's lab is this checkout's (the compose project $MINIDOCK_LAB_PROJECT, else the
# default: another checkout's lab is refused, never touched), its dashboard on
# $MINIDOCK_DEMO_SERVE_PORT (else 9440). The demo prints its phase times; the stand-in's log
# says when the tools were in and when the engine answered.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

work=${1:-/tmp/minidock-demo-fresh}
root=$work/root
packages=(docker.io iptables docker-compose mmdebstrap busybox-static curl)
mkdir -p "$work/wrap"
if [ ! -x "$root/usr/bin/python3" ]; then
    rm -rf "$root"
    mmdebstrap --quiet --variant=minbase --include=python3 bookworm "$root"
fi
# the stand-in's two steps, timed inside the fresh root
cat >"$root/tmp/tools.sh" <<'EOF'
set -e
export DEBIAN_FRONTEND=noninteractive
t() { python3 -c 'import time; print(time.time())'; }
s=$(t); apt-get update -qq
u=$(t); apt-get install -y -qq --no-install-recommends mmdebstrap busybox-static curl >/dev/null 2>&1
i=$(t)
python3 -c "import sys; s,u,i=map(float,sys.argv[1:]); print(f'tools: update {u-s:.1f} s; install {i-u:.1f} s')" $s $u $i
EOF
cat >"$root/tmp/engine.sh" <<'EOF'
set -e
export DEBIAN_FRONTEND=noninteractive
t() { python3 -c 'import time; print(time.time())'; }
u=$(t); apt-get install -y -qq --no-install-recommends --download-only docker.io iptables docker-compose >/dev/null
d=$(t); apt-get install -y -qq --no-install-recommends docker.io iptables docker-compose >/dev/null 2>&1
i=$(t)
python3 -c "import sys; u,d,i=map(float,sys.argv[1:]); print(f'engine: download {d-u:.1f} s; install {i-d:.1f} s')" $u $d $i
EOF
cleanup() {
    umount "$root/proc" 2>/dev/null || true
    rm -f "$work/docker.sock" "$work/tools-done"
}
trap cleanup EXIT
cleanup
mount -t proc proc "$root/proc"
chroot "$root" sh -c "DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq ${packages[*]} >/dev/null 2>&1;
    apt-get autoremove --purge -y -qq >/dev/null 2>&1; apt-get clean; rm -rf /var/lib/apt/lists/*"

# the image builds start once the tools are in (scripts/setup.sh --demo runs them with python3)
python=$(command -v python3)
cat >"$work/wrap/python3" <<EOF
#!/bin/sh
case "\$*" in *minidock.lab.prebuild*) until [ -e "$work/tools-done" ]; do sleep 0.1; done ;; esac
exec "$python" "\$@"
EOF
chmod +x "$work/wrap/python3"

read -r host_tag proxy_tag < <(PYTHONPATH="$PWD" python3 -c '
from minidock.lab.images import host_image_tag, proxy_image_tag
print(host_image_tag(), proxy_image_tag())')
docker rmi -f "$host_tag" "$proxy_tag" >/dev/null 2>&1 || true
rm -rf .venv

(
    t0=$(date +%s.%N)
    since() { python3 -c "import time; print(f'{time.time() - $t0:.1f}')"; }
    chroot "$root" sh /tmp/tools.sh
    touch "$work/tools-done"
    echo "stand-in: the lab's tools in at +$(since) s"
    chroot "$root" sh /tmp/engine.sh
    ln -s /var/run/docker.sock "$work/docker.sock"
    echo "stand-in: the engine answers at +$(since) s"
) >"$work/engine.log" 2>&1 &
standin=$!

sbinless=$(tr ':' '\n' <<<"$PATH" | grep -v 'sbin$' | paste -sd:)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
code=0
# engine.sh waits for the hidden engine from the start, not after an install of its own
PIP_NO_CACHE_DIR=1 DOCKER_HOST="unix://$work/docker.sock" PATH="$work/wrap:$sbinless" \
    MINIDOCK_ENGINE_TIMEOUT=600 bash scripts/demo.sh || code=$?
wait "$standin" || true
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$work/engine.log"
exit "$code"
