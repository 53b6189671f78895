#!/bin/sh
# ENTRYPOINT of the lab workload images: run the command as a child, pass SIGTERM/SIGINT
# on and exit with its status. A bare PID 1 ignores SIGTERM, so without this `docker stop`
# would always wait out its timeout.
[ "$#" -gt 0 ] || set -- sh
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
"$@" &
child=$!
while :; do
    wait "$child"
    status=$?
    kill -0 "$child" 2>/dev/null || exit "$status"
done
