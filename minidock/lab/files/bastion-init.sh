# PID 1 of the lab's bastion container (run by /bin/sh; the lab inlines it into the compose
# file): sshd only, no dockerd. The bastion is the one lab machine that the controller
# reaches through `inventory/lab-bastion.toml`; it forwards SSH to the hosts (ProxyJump).
trap 'exit 0' TERM INT
mkdir -p /run/sshd /var/log
if [ ! -s /etc/ssh/ssh_host_ed25519_key ]; then
    ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
/usr/sbin/sshd -E /var/log/sshd.log
while :; do
    sleep 3600 &
    wait $!
done
