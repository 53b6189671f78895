"""A service's `build`: the content tag (files as .dockerignore leaves them, Dockerfile,
args, target, labels), the Compose `build:` key, and apply's build step with a fake
engine (tests/integration/test_build.py builds and rolls out on the lab)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from minidock import usecases
from minidock.act.build import BuildFailed, NoEngine
from minidock.commands.docker import build_argv
from minidock.model import Build, Cluster
from minidock.spec import SpecError, load_cluster
from minidock.spec.buildctx import IgnoreRules
from minidock.usecases.images import build_images
from minidock.usecases.outcomes import ImageBuilt, UseCaseError

TOML = """\
cluster = "shop"
inventory = "inventory.toml"
[services.web]
build = { context = "app", args = { A = "1" } }
"""


def spec(root: Path, body: str = TOML) -> Cluster:
    (root / "cluster.toml").write_text(body)
    return load_cluster(root / "cluster.toml")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    app = tmp_path / "app"
    app.mkdir()
    (app / "Dockerfile").write_text("FROM minidock-lab/web:5\nCOPY . /www/\n")
    (app / "index.html").write_text("v1\n")
    return tmp_path


def tag(root: Path, body: str = TOML) -> str:
    return spec(root, body).services[0].image


def test_a_built_service_runs_its_content_tag_pushed_from_the_controller(root: Path) -> None:
    web = spec(root).services[0]
    assert web.build is not None
    assert web.image == web.build.tag
    assert web.image.startswith("shop-web:")
    assert len(web.image.split(":")[1]) == 12
    assert web.image_source == "controller"
    assert web.build.context == str(root / "app")


def test_the_tag_changes_with_the_context_and_only_with_what_is_built(root: Path) -> None:
    first = tag(root)
    assert tag(root) == first  # deterministic
    (root / "app" / "index.html").write_text("v2\n")
    second = tag(root)
    assert second != first
    (root / "app" / "index.html").write_text("v1\n")
    assert tag(root) == first  # content, not times
    assert tag(root, TOML.replace('A = "1"', 'A = "2"')) != first
    assert tag(root, TOML.replace("}\n", ', target = "x" }\n')) != first
    (root / "app" / "Dockerfile").write_text("FROM minidock-lab/web:6\nCOPY . /www/\n")
    assert tag(root) != first


def test_dockerignore_leaves_files_out_of_the_tag(root: Path) -> None:
    (root / "app" / ".dockerignore").write_text("# notes\nnode_modules\n*.log\n!keep.log\n")
    before = tag(root)
    (root / "app" / "node_modules").mkdir()
    (root / "app" / "node_modules" / "x.js").write_text("x")
    (root / "app" / "debug.log").write_text("noise")
    assert tag(root) == before
    (root / "app" / "keep.log").write_text("kept")
    assert tag(root) != before


@pytest.mark.parametrize(
    ("pattern", "path", "ignored"),
    [
        ("foo", "foo", True),
        ("foo", "foo/bar.txt", True),  # a directory's pattern covers what is under it
        ("foo", "sub/foo", False),  # anchored at the context, unlike .gitignore
        ("*.md", "README.md", True),
        ("*.md", "docs/a.md", False),  # * stays within one path element
        ("**/*.md", "docs/a.md", True),
        ("**/*.md", "a.md", True),
        ("docs/**", "docs/x/y", True),
        ("/build", "build/out", True),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("[ab].txt", "b.txt", True),
    ],
)
def test_ignore_patterns_match_as_dockers(pattern: str, path: str, ignored: bool) -> None:
    assert IgnoreRules([pattern]).ignored(path) is ignored


def test_the_last_matching_pattern_wins() -> None:
    rules = IgnoreRules(["*.log", "!keep.log", "keep.log"])
    assert rules.ignored("keep.log")
    assert not IgnoreRules(["*.log", "!keep.log"]).ignored("keep.log")


def test_image_beside_build_names_the_repository_and_is_tagged_too(root: Path) -> None:
    body = TOML.replace("[services.web]\n", '[services.web]\nimage = "reg:5000/web:1"\n')
    web = spec(root, body).services[0]
    assert web.build is not None
    assert web.image.startswith("reg:5000/web:")
    assert web.image != "reg:5000/web:1"
    assert web.build.also == "reg:5000/web:1"
    argv = build_argv(web.build)
    assert argv[:4] == ["docker", "build", "--file", str(root / "app" / "Dockerfile")]
    assert argv[4:8] == ["--tag", web.image, "--tag", "reg:5000/web:1"]
    assert argv[-2:] == ["--", str(root / "app")]
    assert argv[8:10] == ["--build-arg", "A=1"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (TOML.replace('"app"', '"nowhere"'), "services.web.build.context: build context nowhere"),
        (
            TOML.replace("}\n", ', dockerfile = "Nope" }\n'),
            "services.web.build.dockerfile: cannot read app/Nope",
        ),
        (
            TOML.replace("[services.web]\n", '[services.web]\nimage_source = "registry"\n'),
            "services.web.image_source: a built image is pushed from the controller",
        ),
        ('cluster = "c"\ninventory = "i.toml"\n[services.web]\n', "missing required key 'image'"),
    ],
)
def test_bad_builds_are_one_line(root: Path, body: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        spec(root, body)
    assert message in str(caught.value)


COMPOSE = """\
name: shop
x-minidock: {inventory: inventory.toml}
services:
  web:
    build:
      context: app
      args: [A=1]
      target: final
      labels: {team: web}
      cache_from: [x]
    pull_policy: build
  api:
    build: ./app
"""


def test_compose_build_is_the_toml_build(root: Path) -> None:
    (root / "compose.yaml").write_text(COMPOSE)
    web, api = load_cluster(root / "compose.yaml").services
    assert web.build is not None
    assert api.build is not None
    assert (web.build.args, web.build.target, web.build.labels) == (
        (("A", "1"),),
        "final",
        (("team", "web"),),
    )
    assert web.build.always
    assert not api.build.always
    assert api.image.startswith("shop-api:")
    same = TOML.replace('args = { A = "1" }', 'args = { A = "1" }, target = "final", '
                        'labels = { team = "web" }, always = true')  # fmt: skip
    assert spec(root, same).services[0].image == web.image


def test_compose_pull_policy_build_without_build_is_refused(root: Path) -> None:
    (root / "compose.yaml").write_text(
        "name: c\nx-minidock: {inventory: i.toml}\nservices:\n"
        "  web: {image: web:5, pull_policy: build}\n"
    )
    with pytest.raises(SpecError, match="pull_policy: build needs a build section"):
        load_cluster(root / "compose.yaml")


@dataclass
class FakeBuilder:
    engine: bool = True
    held: set[str] = field(default_factory=set)
    built: list[str] = field(default_factory=list)
    fails: bool = False

    async def check(self) -> None:
        if not self.engine:
            raise NoEngine("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")

    async def has(self, image: str) -> bool:
        return image in self.held

    async def build(self, build: Build) -> None:
        if self.fails:
            raise BuildFailed("COPY failed: no source files were specified")
        self.built.append(build.tag)
        self.held.add(build.tag)


def built(cluster: Cluster, builder: FakeBuilder) -> list[ImageBuilt]:
    clock = usecases.Clock(time.time, time.monotonic, asyncio.sleep)
    runtime = usecases.Runtime(executor=lambda: None, clock=clock, builder=lambda: builder)  # type: ignore[arg-type,return-value]
    seen: list[ImageBuilt] = []
    asyncio.run(build_images(cluster, runtime, Path("cluster.toml"), seen.append))
    return seen


def test_apply_builds_what_the_engine_lacks_and_only_that(root: Path) -> None:
    cluster = spec(root)
    builder = FakeBuilder()
    first = built(cluster, builder)
    assert builder.built == [cluster.services[0].image]
    assert [(b.service, b.built) for b in first] == [("web", True)]
    again = built(cluster, builder)
    assert builder.built == [cluster.services[0].image]  # held: not built again
    assert [(b.service, b.built) for b in again] == [("web", False)]
    always = spec(root, TOML.replace("}\n", ", always = true }\n"))
    built(always, builder)
    assert builder.built == [cluster.services[0].image, always.services[0].image]
    assert always.services[0].image == cluster.services[0].image


def test_a_controller_without_an_engine_gets_one_line(root: Path) -> None:
    with pytest.raises(UseCaseError) as caught:
        built(spec(root), FakeBuilder(engine=False))
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("cluster.toml: services.web.build: building an image needs a Docker")
    assert "Cannot connect to the Docker daemon" in line
    assert caught.value.exit_code is usecases.ExitCode.FAILED


def test_a_failed_build_says_its_last_line(root: Path) -> None:
    with pytest.raises(UseCaseError, match="COPY failed: no source files"):
        built(spec(root), FakeBuilder(fails=True))


def test_services_without_build_need_no_engine(root: Path) -> None:
    body = 'cluster = "c"\ninventory = "i.toml"\n[services.web]\nimage = "web:5"\n'
    assert built(spec(root, body), FakeBuilder(engine=False)) == []
