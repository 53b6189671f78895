# PID 1 of a lab host container (run by /bin/sh; the lab inlines it into the compose file).
# sshd and dockerd run as background children, so killing either leaves the host up, and
# this shell reaps orphans and exits at once on SIGTERM (a fast `docker stop`). dockerd also
# listens in /run/minidock-lab-engine, which the lab binds to .lab/engines/HOST on the machine.
trap 'exit 0' TERM INT
rm -f /run/minidock-lab.ready
mkdir -p /run/sshd /var/log /run/minidock-lab-engine
if [ ! -s /etc/ssh/ssh_host_ed25519_key ]; then
    ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
/usr/sbin/sshd -E /var/log/sshd.log
setsid dockerd -H unix:///var/run/docker.sock -H unix:///run/minidock-lab-engine/docker.sock >>/var/log/dockerd.log 2>&1 </dev/null &
touch /run/minidock-lab.ready
while :; do
    sleep 3600 &
    wait $!
done
