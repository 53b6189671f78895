#!/bin/sh
# A `cat` stand-in for the scale fleet (benchmarks/scale_fleet.py): every host of the fleet
# shares this machine's kernel, so its /proc/net socket tables would list the whole fleet's
# sshd listeners and connections. Each host reads a recorded table of one host instead
# ($STANDIN_HOST/proc/net, from tests/data/host); any other file is the real one.
first=1
for a in "$@"; do
    if [ "$first" = 1 ]; then set --; first=0; fi
    case $a in /proc/net/*) a="$STANDIN_HOST/proc/net/${a#/proc/net/}" ;; esac
    set -- "$@" "$a"
done
exec /bin/cat "$@"
