"""Which engines MiniDock drives: the oldest release of each, and what a host whose
engine is refused is told. Pure (docs/hosts.md, "Engines").

Docker Engine 20.10 is the oldest: `docker run --pull never` (how a task starts from an
image already on the host, never a registry's newer one) came with it. Podman 4.0 is the
oldest: netavark and aardvark-dns came with it, and with them the names a cluster's
network resolves (tasks reach each other by service name); Debian 12 ships 4.3. Rootless
Docker is refused: its daemon and its published ports live in the user's own namespace
(rootlesskit), which no lab host can run, so nothing MiniDock does there is tested.
"""

from __future__ import annotations

from minidock.model import Engine, EngineKind, Observed

__all__ = ["OLDEST", "health_checks_due", "refusal"]

# the oldest release of each engine MiniDock drives, and the feature that sets it
OLDEST: dict[EngineKind, tuple[tuple[int, int], str]] = {
    "docker": ((20, 10), "`docker run --pull never`"),
    "podman": ((4, 0), "service names on a cluster network (netavark, aardvark-dns)"),
}


def refusal(engine: Engine) -> str | None:
    """Why MiniDock does not drive this engine, as the one line a host's probe fails
    with (the host is named where the line is printed), or None when it does."""
    if engine.rootless:
        return f"{engine} refused: rootless Docker is not supported (run the daemon as root)"
    (major, minor), feature = OLDEST[engine.kind]
    if engine.release < (major, minor):
        return (
            f"{engine} refused: MiniDock needs {engine.name} {major}.{minor} or newer for {feature}"
        )
    return None


def health_checks_due(observed: Observed, cluster: str) -> dict[str, tuple[str, ...]]:
    """The health checks MiniDock runs itself in a pass, by host: on each host whose probe
    found Podman, the ids of this cluster's running tasks that have a health check (their
    health is not "none"). Podman runs health checks from systemd timers, and a host
    without systemd (a container, a minimal VM) never runs them: a task would stay
    `starting` for ever. Run where a timer runs them too, a check only runs once more."""
    due: dict[str, tuple[str, ...]] = {}
    for name, seen in observed.hosts.items():
        if not seen.ok or seen.engine is None or seen.engine.kind != "podman":
            continue
        ids = tuple(
            c.id
            for c in seen.containers
            if c.cluster == cluster and c.state == "running" and c.health != "none"
        )
        if ids:
            due[name] = ids
    return due
