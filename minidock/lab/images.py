"""The lab's images, built locally (no registry): the host image (sshd + dockerd on Debian's
essential set, with mmdebstrap and `docker import`), the ingress and name proxies' images
(Debian's caddy unpacked with what it links; haproxy on a minbase root) and the workload
images (Debian's static busybox). Only the standard library: `python3 -m
minidock.lab.prebuild` builds them before MiniDock's dependencies are installed.

Each image is labelled with a hash of its recipe, so a rebuild happens only when the recipe
changes; the host image's tag is that hash. `load_images` copies workload images into a
host container (`docker save | docker exec -i HOST docker load`). See docs/lab.md.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from minidock.lab import builds, docker, local
from minidock.lab.errors import BadInputError, LabError

__all__ = [
    "CRASH_IMAGE",
    "DEFAULT_KIND",
    "HOST_IMAGES",
    "HOST_KINDS",
    "IMAGE_REPO",
    "IMAGE_SETS",
    "KIND_NAMES",
    "LAB_LABEL",
    "NAMES_IMAGE",
    "PROXY_IMAGE",
    "SET_NAMES",
    "WEB5_IMAGE",
    "WEB6_IMAGE",
    "WEB_BROKEN_IMAGE",
    "WORKLOAD_IMAGES",
    "HostKind",
    "build_host_image",
    "build_images",
    "build_kind_image",
    "build_named",
    "build_proxy_image",
    "build_workload_image",
    "built_line",
    "data",
    "host_image_tag",
    "image_id",
    "kind_image_tag",
    "kind_recipe",
    "load_images",
    "parse_kinds",
    "parse_sets",
    "proxy_image_tag",
    "set_images",
    "start_builds",
]

IMAGE_REPO = "minidock-lab"
WEB5_IMAGE = f"{IMAGE_REPO}/web:5"
WEB6_IMAGE = f"{IMAGE_REPO}/web:6"
WEB_BROKEN_IMAGE = f"{IMAGE_REPO}/web:broken"
CRASH_IMAGE = f"{IMAGE_REPO}/crash:1"
WORKLOAD_IMAGES = (WEB5_IMAGE, WEB6_IMAGE, WEB_BROKEN_IMAGE, CRASH_IMAGE)
# The ingress proxy's default image name (minidock.model.Ingress.image): the lab's own
# build of Debian's caddy is loaded into every host under it (no registry here).
PROXY_IMAGE = "caddy:2"
# The name proxies' image name (minidock.commands.haproxy.NAMES_IMAGE): the lab's build of Debian's
# haproxy, made by the same machinery as the ingress proxy's.
NAMES_IMAGE = "haproxy:2.6"
HOST_IMAGES = (*WORKLOAD_IMAGES, PROXY_IMAGE, NAMES_IMAGE)  # what `lab up` loads into every host
RECIPE_LABEL = "minidock.lab.recipe"
# A build may start before the engine does (scripts/setup.sh --demo builds while apt-get
# installs it): an image missing because no engine answered is built, and its import waits
# this long for the engine.
ENGINE_WAIT = 180.0
LAB_LABEL = "minidock.lab"

HOST_SUITE = "bookworm"
# `mount` for the `disk` fault (mount, umount), iproute2 for `ss` (minidock.lab.faults)
HOST_PACKAGES = ("openssh-server", "docker.io", "iptables", "procps", "iproute2", "mount")
PROXY_PACKAGES = ("caddy", "coreutils", "ca-certificates", "busybox-static")
NAMES_PACKAGES = ("haproxy",)
BUSYBOX = Path("/bin/busybox")
BUSYBOX_APPLETS = (
    "sh", "sleep", "httpd", "wget", "cat", "echo", "ls", "ps", "kill", "true", "false",
    "env", "hostname", "printf", "test", "[", "nc", "timeout", "grep", "date", "id",
)  # fmt: skip


def data(name: str) -> bytes:
    """A file shipped in minidock/lab/files/."""
    return resources.files("minidock.lab").joinpath("files", name).read_bytes()


def image_recipe(tag: str) -> str | None:
    """The recipe label of a local image (None when the image is missing, or no docker
    client is installed yet: scripts/setup.sh --demo builds while apt-get installs it)."""
    if shutil.which("docker") is None:
        return None
    proc = local.run(docker.image_label_argv(tag, RECIPE_LABEL), check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def image_id(tag: str) -> str | None:
    """The id of a local image (None when missing)."""
    proc = local.run(docker.image_id_argv(tag), check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _labels(recipe: str) -> str:
    return f"LABEL {RECIPE_LABEL}={recipe} {LAB_LABEL}=image"


# -- workload images --------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """One workload image: its tag, its CMD, and the page it serves (if it serves)."""

    tag: str
    cmd: tuple[str, ...]
    page: str | None  # /www/index.html, when the image serves


WORKLOADS = (
    Workload(WEB5_IMAGE, ("httpd", "-f", "-p", "8080", "-h", "/www"), "web 5\n"),
    Workload(WEB6_IMAGE, ("httpd", "-f", "-p", "8080", "-h", "/www"), "web 6\n"),
    # Keeps running, never listens on 8080: a health check with wget fails.
    Workload(WEB_BROKEN_IMAGE, ("sleep", "2147483647"), None),
    Workload(CRASH_IMAGE, ("sh", "-c", "sleep 1; exit 1"), None),
)


def _tar_add(
    tar: tarfile.TarFile,
    name: str,
    *,
    content: bytes | None = None,
    mode: int = 0o644,
    link: str = "",
) -> None:
    """Add a directory (no data), a file or a symlink, with a fixed mtime."""
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.mode = mode
    if link:
        info.type, info.linkname = tarfile.SYMTYPE, link
    elif content is None:
        info.type = tarfile.DIRTYPE
    else:
        info.size = len(content)
    tar.addfile(info, io.BytesIO(content) if content is not None else None)


def workload_tar(work: Workload) -> bytes:
    """A root filesystem: busybox and its applet links, the init wrapper, the page."""
    if not BUSYBOX.is_file():
        raise LabError(f"{BUSYBOX} missing: install busybox-static (scripts/engine.sh)")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for directory in ("bin", "www", "etc"):
            _tar_add(tar, directory, mode=0o755)
        _tar_add(tar, "tmp", mode=0o1777)
        _tar_add(tar, "bin/busybox", content=BUSYBOX.read_bytes(), mode=0o755)
        for applet in BUSYBOX_APPLETS:
            _tar_add(tar, f"bin/{applet}", link="busybox")
        _tar_add(tar, "bin/lab-init", content=data("workload-init.sh"), mode=0o755)
        _tar_add(tar, "etc/passwd", content=b"root:x:0:0:root:/:/bin/sh\n")
        _tar_add(tar, "etc/group", content=b"root:x:0:\n")
        if work.page is not None:
            _tar_add(tar, "www/index.html", content=work.page.encode())
    return buf.getvalue()


def workload_changes(work: Workload) -> list[str]:
    """The Dockerfile instructions `docker import` applies to a workload image."""
    return [
        "ENV PATH=/bin",
        "WORKDIR /www",
        'ENTRYPOINT ["/bin/lab-init"]',
        f"CMD {json.dumps(list(work.cmd))}",
        "EXPOSE 8080",
    ]


def build_workload_image(work: Workload) -> bool:
    """Build one workload image unless the tag already holds this recipe. True if built."""
    tarball = workload_tar(work)
    changes = workload_changes(work)
    recipe = hashlib.sha256(tarball + json.dumps(changes).encode()).hexdigest()[:16]
    if image_recipe(work.tag) == recipe:
        return False
    local.wait_for_engine(ENGINE_WAIT)
    local.run(docker.import_argv(work.tag, [*changes, _labels(recipe)]), input=tarball)
    return True


# -- the host image and the proxy images (mmdebstrap roots) -----------------------------------
# Where the time of a cold build goes (docs/benchmarks.md, "The demo"): not the downloads but
# dpkg, unpacking and configuring each package on two cores. So the roots hold only what the
# lab runs, and nothing makes dpkg do more than it must:
# - merged /usr made by mmdebstrap's own hook, not by the usrmerge package, which pulls in perl
#   (46 MB, the largest thing in a minbase root after Docker);
# - no fsync per file (`force-unsafe-io`): a build that dies is thrown away whole anyway;
# - docs, man pages and translations left out by `path-exclude`, set for the packages after
#   the essential set only: set from the start, mmdebstrap filters every essential package
#   through mmtarfilter (a Python process each), which cost more than the files it saves;
#   the essential set's copies are removed at the end instead.
MMDEBSTRAP_HOOKS = Path("/usr/share/mmdebstrap/hooks")  # Debian's mmdebstrap package
MERGED_USR = f"--hook-dir={MMDEBSTRAP_HOOKS / 'merged-usr'}"
_DOCS = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*")


def _excluded(paths: Sequence[str]) -> str:
    """An essential hook: dpkg leaves `paths` out of every package installed after it."""
    lines = " ".join(f'"path-exclude={path}"' for path in paths)
    return f'--essential-hook=printf "%s\\n" {lines} > "$1"/etc/dpkg/dpkg.cfg.d/minidock-lab'


_RM_DOCS = 'rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/locale/*'
_SLIM = (
    '--aptopt=Acquire::Retries "3"',
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
)
# Docker's and containerd's tools the lab never runs (ctr, libnetwork's test tools, the
# v1 shims): 68 MB of the host image.
HOST_UNUSED = (
    "/usr/bin/ctr",
    "/usr/bin/dnet",
    "/usr/sbin/ovrouter",
    "/usr/bin/containerd-shim",
    "/usr/bin/containerd-shim-runc-v1",
)


def host_recipe() -> tuple[str, list[str], dict[str, bytes]]:
    """(recipe hash, mmdebstrap argv with {dir} for the uploads dir, files to upload).
    The essential set (no apt: the hosts install nothing) plus HOST_PACKAGES, configured
    by their own maintainer scripts (the sshd user, iptables' alternatives, ...)."""
    files = {"sshd_config": data("sshd_config"), "daemon.json": data("daemon.json")}
    argv = [
        "mmdebstrap",
        "--quiet",
        "--variant=essential",
        f"--include={','.join(HOST_PACKAGES)}",
        MERGED_USR,
        '--aptopt=Acquire::Retries "3"',
        "--dpkgopt=force-unsafe-io",
        _excluded([*_DOCS, *HOST_UNUSED]),
        f"--customize-hook={_RM_DOCS}",
        # every host makes its own host key at first start (see host-init.sh)
        '--customize-hook=rm -f "$1"/etc/ssh/ssh_host_*',
        "--customize-hook=upload {dir}/sshd_config /etc/ssh/sshd_config.d/minidock-lab.conf",
        '--customize-hook=mkdir -p "$1"/etc/docker',
        "--customize-hook=upload {dir}/daemon.json /etc/docker/daemon.json",
        HOST_SUITE,
        "-",
    ]
    return _recipe_hash(argv, files), argv, files


def _recipe_hash(argv: Sequence[str], files: dict[str, bytes], extra: Sequence[str] = ()) -> str:
    digest = hashlib.sha256(json.dumps([*argv, *extra]).encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    return digest.hexdigest()[:12]


def host_image_tag() -> str:
    """The host image's tag: derived from its recipe, so a changed recipe rebuilds it."""
    return f"{IMAGE_REPO}/host:{host_recipe()[0]}"


# -- host kinds: other engines and users, from Debian's packages (docs/lab.md) ----------------
DEFAULT_KIND = "bookworm"  # the host image above: Debian 12, Docker 20.10, root
# Debian 13's docker.io has no `docker` command: its client is the docker-cli package
DOCKER_KIND_PACKAGES = (
    "openssh-server", "docker.io", "docker-cli", "sudo", "iptables", "procps", "iproute2",
)  # fmt: skip
# Podman rootful through podman-docker, with what a Podman host's Recommends bring that
# `docker run` needs here (nftables, aardvark-dns) and runc (crun refuses hybrid cgroups)
PODMAN_KIND_PACKAGES = (
    "openssh-server", "podman", "podman-docker", "nftables", "aardvark-dns", "runc", "sudo",
    "iptables", "procps", "iproute2",
)  # fmt: skip
# the users every docker kind's image has: `deploy` in the docker group, `sudoer` whose
# docker runs through `sudo -n` (NOPASSWD, docker only) and who is not in the group
_USERS = (
    'chroot "$1" useradd -m -s /bin/sh -G docker deploy',
    'chroot "$1" useradd -m -s /bin/sh sudoer',
    "echo 'sudoer ALL=(root) NOPASSWD: /usr/bin/docker' > \"$1\"/etc/sudoers.d/sudoer",
    'chmod 440 "$1"/etc/sudoers.d/sudoer',
)


@dataclass(frozen=True)
class HostKind:
    """A kind of lab host: the Debian suite and packages its image is made of (`image`:
    the kind whose image it shares), its engine, and the user the inventory reaches it as
    (with `sudo`: whose docker runs through `sudo -n`)."""

    name: str
    suite: str
    packages: tuple[str, ...]
    engine: str  # "docker" or "podman"
    user: str = "root"
    sudo: bool = False
    image: str = ""  # another kind's name whose image this one runs ("": its own)

    @property
    def image_kind(self) -> str:
        return self.image or self.name


HOST_KINDS: dict[str, HostKind] = {
    DEFAULT_KIND: HostKind(DEFAULT_KIND, HOST_SUITE, HOST_PACKAGES, "docker"),
    "trixie": HostKind("trixie", "trixie", DOCKER_KIND_PACKAGES, "docker", user="deploy"),
    "trixie-sudo": HostKind(
        "trixie-sudo", "trixie", DOCKER_KIND_PACKAGES, "docker", "sudoer", True, "trixie"
    ),
    "sid": HostKind("sid", "sid", DOCKER_KIND_PACKAGES, "docker", user="deploy"),
    "podman": HostKind("podman", "trixie", PODMAN_KIND_PACKAGES, "podman"),
}
KIND_NAMES = tuple(HOST_KINDS)


def parse_kinds(text: str, hosts: int, *, option: str = "--kinds") -> tuple[str, ...]:
    """`lab up --kinds`: a kind per host, in host order, comma-separated; hosts beyond the
    list are `bookworm`. BadInputError (exit 2) naming the option and the kinds there are."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in words if w not in HOST_KINDS]
    if unknown or not words:
        problem = f"unknown host kind '{unknown[0]}'" if unknown else "no host kind named"
        raise BadInputError(f"{option}: {problem}: use some of {', '.join(KIND_NAMES)}")
    if len(words) > hosts:
        raise BadInputError(f"{option}: {len(words)} kinds for {hosts} hosts")
    return (*words, *[DEFAULT_KIND] * (hosts - len(words)))


def kind_recipe(kind: str) -> tuple[str, list[str], dict[str, bytes]]:
    """(recipe hash, mmdebstrap argv with {dir} for the uploads dir, files to upload) of a
    kind's host image: the default kind's is `host_recipe`; the others are minbase roots
    (useradd, sudo) of their suite with the lab's sshd config, their engine's config and
    the users `deploy` and `sudoer` (docker kinds)."""
    found = HOST_KINDS[HOST_KINDS[kind].image_kind]
    if found.name == DEFAULT_KIND:
        return host_recipe()
    files = {"sshd_config": data("sshd_config")}
    hooks = [
        'rm -f "$1"/etc/ssh/ssh_host_*',
        "upload {dir}/sshd_config /etc/ssh/sshd_config.d/minidock-lab.conf",
        _RM_DOCS,
    ]
    if found.engine == "podman":
        files |= {n: data(f"podman-{n}") for n in ("containers.conf", "storage.conf")}
        hooks += [
            "upload {dir}/containers.conf /etc/containers/containers.conf",
            "upload {dir}/storage.conf /etc/containers/storage.conf",
            'touch "$1"/etc/containers/nodocker',
            # Podman 5 warns of cgroup v1 (this machine's) on every command's stderr, which
            # `docker logs` output then carries; sshd's PAM reads /etc/environment
            'echo PODMAN_IGNORE_CGROUPSV1_WARNING=1 >> "$1"/etc/environment',
        ]
    else:
        files["daemon.json"] = data("daemon.json")
        hooks += ['mkdir -p "$1"/etc/docker', "upload {dir}/daemon.json /etc/docker/daemon.json"]
        hooks += list(_USERS)
    # the archive's sid Release can be past its Valid-Until (FLEET-NOTES)
    stale = ['--aptopt=Acquire::Check-Valid-Until "false"'] if found.suite == "sid" else []
    argv = [
        "mmdebstrap",
        "--quiet",
        "--variant=minbase",
        f"--include={','.join(found.packages)}",
        '--aptopt=Acquire::Retries "3"',
        *stale,
        "--dpkgopt=force-unsafe-io",
        *(f"--customize-hook={hook}" for hook in hooks),
        found.suite,
        "-",
    ]
    return _recipe_hash(argv, files), argv, files


def kind_image_tag(kind: str) -> str:
    """A kind's host image tag (the default kind's: `host_image_tag`)."""
    image_kind = HOST_KINDS[kind].image_kind
    if image_kind == DEFAULT_KIND:
        return host_image_tag()
    return f"{IMAGE_REPO}/host-{image_kind}:{kind_recipe(kind)[0]}"


def build_kind_image(kind: str) -> bool:
    """Build a kind's host image unless it exists (cached by recipe, as the host image
    is). True if built."""
    recipe, argv, files = kind_recipe(kind)
    return _build_root_image(kind_image_tag(kind), recipe, argv, ['CMD ["/bin/sh"]'], files)


# What `docker import` sets on the proxy image: the official caddy image's layout (config
# and data under /config and /data), so MiniDock runs either image the same way.
PROXY_CHANGES = (
    "ENV XDG_CONFIG_HOME=/config",
    "ENV XDG_DATA_HOME=/data",
    "WORKDIR /srv",
    'CMD ["caddy", "run", "--resume"]',
    "EXPOSE 80 443",
)


# The name proxy image's layout: the official haproxy image's config path (MiniDock runs
# its own command in it: minidock.commands.haproxy.run_argv).
NAMES_CHANGES = ('CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]',)


@dataclass(frozen=True)
class RootImage:
    """A lab image made of Debian packages (mmdebstrap | docker import), cached under a
    recipe-derived tag (`cache`) and tagged `name` too. `variant` and `options` are
    mmdebstrap's; `hooks` are run in the root once its packages are there (`_stage`)."""

    name: str
    cache: str  # the repository of the cache tag: IMAGE_REPO/CACHE:RECIPE
    packages: tuple[str, ...]
    changes: tuple[str, ...]
    hooks: tuple[str, ...]
    variant: str = "minbase"
    options: tuple[str, ...] = _SLIM

    def recipe(self) -> tuple[str, list[str]]:
        """(recipe hash, mmdebstrap argv)."""
        argv = [
            "mmdebstrap",
            "--quiet",
            f"--variant={self.variant}",
            f"--include={','.join(self.packages)}",
            *self.options,
            *(f"--{self._stage()}-hook={hook}" for hook in self.hooks),
            HOST_SUITE,
            "-",
        ]
        return _recipe_hash(argv, {}, self.changes), argv

    def _stage(self) -> str:
        """When `hooks` run: after everything is installed; for the `extract` variant,
        which installs nothing, after the packages are unpacked (mmdebstrap 1.3 runs no
        customize hook there: measured, none ran)."""
        return "extract" if self.variant == "extract" else "customize"

    def tag(self) -> str:
        return f"{IMAGE_REPO}/{self.cache}:{self.recipe()[0]}"

    def build(self) -> bool:
        """Build it unless it exists, and tag it `name`. True if built."""
        recipe, argv = self.recipe()
        built = _build_root_image(self.tag(), recipe, argv, self.changes, {})
        if built or image_id(self.name) != image_id(self.tag()):
            local.run(docker.tag_argv(self.tag(), self.name))
        return built


# The ingress proxy: Debian's caddy with what it links (libc, libzstd, ...), coreutils for
# the `cat` a pass reads the saved config with (minidock.commands.caddy), the CA bundle the
# official image has, and its busybox `sh`, `wget` and `grep` (static busybox, linked),
# which `minidock metrics` reads the proxy's request metrics with (request_metrics_argv).
# Caddy needs no maintainer script, so the packages are only unpacked (mmdebstrap's
# `extract` variant: no essential set, no dpkg run): 5 s of CPU where a minbase root took
# 28 (docs/benchmarks.md, "The demo").
INGRESS_PROXY = RootImage(
    PROXY_IMAGE,
    "proxy",
    PROXY_PACKAGES,
    PROXY_CHANGES,
    (
        'mkdir -p "$1"/config "$1"/data "$1"/srv "$1"/etc/ssl/certs "$1"/tmp',
        'chmod 1777 "$1"/tmp',
        'cat "$1"/usr/share/ca-certificates/mozilla/*.crt > "$1"/etc/ssl/certs/ca-certificates.crt',
        'for a in sh wget grep; do ln -sf busybox "$1"/usr/bin/$a; done',
        _RM_DOCS,
    ),
    variant="extract",
    options=(MERGED_USR, '--aptopt=Acquire::Retries "3"'),
)
# the name proxies: Debian's haproxy (docs/discovery.md); a minbase root, whose perl and
# bash the lab's by-name test clients use
NAME_PROXY = RootImage(
    NAMES_IMAGE, "names", NAMES_PACKAGES, NAMES_CHANGES, ('mkdir -p "$1"/usr/local/etc/haproxy',)
)


def proxy_recipe() -> tuple[str, list[str]]:
    """(recipe hash, mmdebstrap argv) of the lab's ingress proxy image."""
    return INGRESS_PROXY.recipe()


def proxy_image_tag() -> str:
    """The proxy image's cache tag (recipe-derived); it is also tagged PROXY_IMAGE."""
    return INGRESS_PROXY.tag()


def _build_root_image(
    tag: str, recipe: str, argv: Sequence[str], changes: Sequence[str], files: dict[str, bytes]
) -> bool:
    """mmdebstrap | docker import into `tag` unless it holds `recipe`. True if built.
    It is imported under a temporary tag and tagged only when both steps succeeded."""
    if image_recipe(tag) == recipe:
        return False
    if shutil.which("mmdebstrap") is None:
        raise LabError("mmdebstrap not installed (run scripts/engine.sh)")
    repo = tag.rpartition(":")[0]
    staging = f"{repo}:building-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="minidock-lab-") as tmp:
        for name, content in files.items():
            Path(tmp, name).write_bytes(content)
        debs, imported = local.pipe(
            [arg.replace("{dir}", tmp) for arg in argv],
            docker.import_argv(staging, [_labels(recipe), *changes]),
            timeout=900,
            before_consumer=lambda: local.wait_for_engine(ENGINE_WAIT),
        )
    if debs.returncode != 0 or imported.returncode != 0:
        local.run(docker.rmi_argv(staging, force=True), check=False)
        detail = (debs.stderr or imported.stderr).strip()
        if len(detail) > 3000:  # mmdebstrap: the error comes first, then its usage text
            detail = f"{detail[:1500]}\n...\n{detail[-1500:]}"
        raise LabError(f"building {tag} failed: {detail}")
    local.run(docker.tag_argv(staging, tag))
    local.run(docker.rmi_argv(staging), check=False)
    return True


def build_host_image() -> bool:
    """Build the host image (mmdebstrap | docker import) unless it exists. True if built."""
    recipe, argv, files = host_recipe()
    return _build_root_image(host_image_tag(), recipe, argv, ['CMD ["/bin/sh"]'], files)


def build_proxy_image() -> bool:
    """Build the proxy image unless it exists, and tag it PROXY_IMAGE. True if built."""
    return INGRESS_PROXY.build()


# -- what a lab builds: the host image and image sets, built side by side ---------------------
# The sets `lab up --images` and `lab build` / `lab load` name (docs/lab.md), each what one
# kind of test or demo needs in every host. The host image is no set: every lab needs it.
IMAGE_SETS: dict[str, tuple[str, ...]] = {
    "workloads": WORKLOAD_IMAGES,
    "ingress": (PROXY_IMAGE,),
    "names": (NAMES_IMAGE,),
}
SET_NAMES = tuple(IMAGE_SETS)
# Rough seconds each build takes from nothing (docs/benchmarks.md): the start order after
# the host image, cheapest first (minidock.lab.builds.build_order).
BUILD_COST = {builds.HOST: 20.0, "workloads": 1.0, "ingress": 5.0, "names": 25.0}


def parse_sets(text: str, *, option: str) -> tuple[str, ...]:
    """A comma-separated list of image sets (`all` for every one), checked: LabError (exit 2)
    naming the option and the sets there are."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if words == ["all"]:
        return SET_NAMES
    unknown = [w for w in words if w not in IMAGE_SETS]
    if unknown or not words:
        problem = f"unknown image set '{unknown[0]}'" if unknown else "no image set named"
        raise BadInputError(f"{option}: {problem}: use all, or some of {', '.join(SET_NAMES)}")
    return tuple(dict.fromkeys(words))


def set_images(sets: Sequence[str]) -> tuple[str, ...]:
    """The images of these sets, in the sets' order."""
    return tuple(image for name in sets for image in IMAGE_SETS[name])


def _timed(build: Callable[[], bool], tag: Callable[[], str]) -> builds.Job:
    def job() -> dict[str, float]:
        started = time.monotonic()
        return {tag(): time.monotonic() - started} if build() else {}

    return job


def _workloads() -> dict[str, float]:
    timings: dict[str, float] = {}
    for work in WORKLOADS:
        started = time.monotonic()
        if build_workload_image(work):
            timings[work.tag] = time.monotonic() - started
    return timings


JOBS: dict[str, builds.Job] = {
    builds.HOST: _timed(build_host_image, host_image_tag),
    "workloads": _workloads,
    "ingress": _timed(INGRESS_PROXY.build, INGRESS_PROXY.tag),
    "names": _timed(NAME_PROXY.build, NAME_PROXY.tag),
}


def start_builds(sets: Sequence[str] = SET_NAMES, *, host: bool = True) -> builds.Builds:
    """Start building the host image (unless `host` is false) and these sets, side by side
    (minidock.lab.builds): `with start_builds(...) as b: b.wait("host")`."""
    names = builds.build_order([*([builds.HOST] if host else []), *sets], BUILD_COST)
    return builds.Builds({name: JOBS[name] for name in names})


def build_images(sets: Sequence[str] = SET_NAMES, *, host: bool = True) -> dict[str, float]:
    """Make the host image and these sets present locally, side by side; seconds spent
    per image built."""
    with start_builds(sets, host=host) as running:
        return running.wait_all()


def build_named(words: Sequence[str]) -> dict[str, float]:
    """`lab build [host] [SET...]`: the image sets named (`all`, the default: every set and
    the host image), and the host image when `host` is named; seconds per image built.
    BadInputError (exit 2) for an unknown set."""
    words = list(words) or ["all"]
    named = [w for w in words if w != builds.HOST]
    sets = parse_sets(",".join(named), option="IMAGE_SETS") if named else ()
    return build_images(sets, host=builds.HOST in words or named == ["all"])


def built_line(built: dict[str, float]) -> str:
    """What `lab build` prints: each image built and its seconds."""
    done = ", ".join(f"{tag} {seconds:.1f}s" for tag, seconds in built.items())
    return f"lab build: {done or 'every image already built'}"


def load_images(container: str, images: Sequence[str], *, hint: str) -> list[str]:
    """Copy images into a running host container unless it holds the same image id
    already. Returns the images that were loaded. `hint` is the command that builds them."""
    ids = {image: image_id(image) for image in images}
    missing = [image for image, found in ids.items() if found is None]
    if missing:
        raise LabError(f"images missing locally: {missing} (run `{hint}`)")
    inside = local.run(docker.exec_argv(container, docker.image_tags_argv(images)), check=False)
    present = docker.parse_image_tags(inside.stdout)
    wanted = [image for image in images if (image, ids[image]) not in present]
    if not wanted:
        return []
    save, load = local.pipe(
        docker.save_argv(wanted), docker.exec_argv(container, docker.load_argv(), stdin=True)
    )
    if save.returncode != 0 or load.returncode != 0:
        detail = (load.stderr or save.stderr).strip()
        raise LabError(f"{container}: loading {wanted} failed: {detail}")
    return wanted
