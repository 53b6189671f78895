"""`minidock push IMAGE`: put an image from the controller's engine on hosts over SSH, with
no registry (docker save | docker load, `minidock.act.push`). It changes no state and takes no
lock; the hosts are the stored desired state's inventory, or an inventory file given.

`build_images`: what `apply` does first for services with a `build` (docs/compose.md#build):
each image built on the controller's engine under its content tag, unless the engine holds
that tag already; the passes then push it to the hosts that run it, as any image with
`image_source = "controller"`. Nothing is stored when a build fails."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from minidock.act.build import BuildFailed, NoEngine
from minidock.act.push import Pushed, PushError, push_image
from minidock.model import Cluster, Host
from minidock.ssh import CommandTimeout, Unreachable
from minidock.store import StateLocation
from minidock.usecases.common import chosen_hosts, fleet_inventory
from minidock.usecases.outcomes import (
    BadInput,
    HostProblem,
    ImageBuilt,
    OnPushProgress,
    PushOutcome,
    PushProgress,
    UseCaseError,
)
from minidock.usecases.runtime import Runtime, connected

PUSHES_AT_ONCE = 4  # hosts streamed to at the same time (each reads its own docker save)


async def push(
    image: str,
    directory: StateLocation,
    runtime: Runtime,
    on_progress: OnPushProgress,
    *,
    hosts: Sequence[str] | None = None,
    inventory: Path | None = None,
) -> PushOutcome:
    """Stream IMAGE to every host (or those named) that does not hold it yet; hosts that
    have the same image id are left alone. A host that fails does not stop the others."""
    targets = chosen_hosts(fleet_inventory(directory, inventory), hosts)
    engine = runtime.engine()
    local = await engine.inspect(image)
    if local is None:
        raise BadInput(
            f"image {image!r} is not in the controller's Docker engine: build, pull or tag it "
            "there first (docker image ls)"
        )
    bound = asyncio.Semaphore(PUSHES_AT_ONCE)
    async with connected(runtime) as executor:

        async def one(host: Host) -> Pushed | HostProblem:
            def sent(n: int) -> None:
                on_progress(PushProgress(host.name, image, n, local.size))

            async with bound:
                try:
                    return await push_image(executor, engine, host, local, on_sent=sent)
                except (PushError, Unreachable, CommandTimeout) as exc:
                    return HostProblem(host.name, str(exc))

        results = await asyncio.gather(*(one(h) for h in targets))
    return PushOutcome(
        image,
        local.size,
        tuple(r for r in results if isinstance(r, Pushed)),
        tuple(r for r in results if isinstance(r, HostProblem)),
    )


async def build_images(
    cluster: Cluster, runtime: Runtime, file: Path, report: Callable[[ImageBuilt], None]
) -> None:
    """Build each service's image that has a `build`, in file order, unless the controller's
    engine holds its content tag already (and the build is not `always`). Raises
    UseCaseError (exit 1, one line) when no Docker engine answers or a build fails."""
    builds = [s for s in cluster.services if s.build is not None]
    if not builds:
        return
    builder = runtime.builder()
    try:
        await builder.check()
    except NoEngine as exc:
        raise UseCaseError(
            f"{file}: services.{builds[0].name}.build: building an image needs a Docker "
            f"engine on this controller, and none answers ({exc}): start one, or build the "
            "image elsewhere, `minidock push` it and give image instead of build"
        ) from None
    for service in builds:
        build = service.build
        assert build is not None
        if not build.always and await builder.has(build.tag):
            report(ImageBuilt(service.name, build.tag, 0.0, built=False))
            continue
        started = runtime.clock.monotonic()
        try:
            await builder.build(build)
        except BuildFailed as exc:
            raise UseCaseError(
                f"{file}: services.{service.name}.build: docker build of {build.context} "
                f"failed: {exc}; nothing was applied"
            ) from None
        report(ImageBuilt(service.name, build.tag, runtime.clock.monotonic() - started))
