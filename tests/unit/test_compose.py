"""Compose files read as cluster specs (minidock.spec.compose), over the corpus in
tests/data/compose/: each realistic file gives, value for value, the model its hand-written
TOML twin gives; `minidock convert` prints TOML that loads to the same model; every bad
file gets its one-line error at the command line (exit 2, no SSH, no state)."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from minidock.model import Cluster
from minidock.spec import SpecError, load, load_cluster
from minidock.spec.cluster import cluster_document
from minidock.spec.compose import is_compose_file
from minidock.spec.compose.interpolate import InterpolationError, substitute
from minidock.spec.compose.translation import translate_file
from minidock.spec.compose.yamldoc import parse
from tests.unit.test_cli import in_tmp, invoke, one_line_error, ssh_calls

__all__ = ["in_tmp", "ssh_calls"]  # fixtures used here, defined with the CLI tests

CORPUS = Path(__file__).parent.parent / "data" / "compose"
GOOD = ["webapp", "agent", "secrets", "deploy", "syntax", "interpolation"]
BAD = sorted(p.stem for p in (CORPUS / "bad").glob("*.yaml"))

# The controller's environment the corpus is read in: set, and unset.
ENVIRONMENT = {
    "STACK_NAME": "interp",
    "REGION": "eu-from-env",
    "FROM_CONTROLLER": "from the controller",
    "BILLING_STRIPE_KEY": "sk_test_51",
    "BILLING_REGISTRY_TOKEN": "registry-token-9",
}
UNSET = (
    "TAG", "WEB_TAG", "INVENTORY", "WEB_REPLICAS", "UNSET_VAR", "HOME_TOWN", "EMPTY_VAR",
    "COMPOSE_PROFILES", "NOT_SET_ANYWHERE",
)  # fmt: skip


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the corpus (secret files 0600, as MiniDock requires; git keeps no modes),
    read in ENVIRONMENT."""
    copy = tmp_path / "compose"
    shutil.copytree(CORPUS, copy)
    for secret in ("db_password.txt", "session.txt"):
        os.chmod(copy / "secrets" / secret, 0o600)
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    return copy


def comparable(cluster: Cluster) -> Cluster:
    """The cluster without the path of the file it was read from."""
    return replace(cluster, path="")


@pytest.mark.parametrize("name", GOOD)
def test_a_compose_file_is_the_model_its_toml_spec_is(corpus: Path, name: str) -> None:
    from_compose = load_cluster(corpus / name / "compose.yaml")
    from_toml = load_cluster(corpus / name / "cluster.toml")
    assert [s.name for s in from_compose.services] == [s.name for s in from_toml.services]
    for mine, theirs in zip(from_compose.services, from_toml.services, strict=True):
        assert mine == theirs
        assert mine.secrets == theirs.secrets  # not in the dataclass's repr: checked apart
        assert mine.registry_auth == theirs.registry_auth
        assert mine.spec_hash() == theirs.spec_hash()
    assert comparable(from_compose) == comparable(from_toml)


@pytest.mark.parametrize("name", GOOD)
def test_convert_prints_toml_that_loads_to_the_same_model(corpus: Path, name: str) -> None:
    result = invoke("convert", str(corpus / name / "compose.yaml"))
    assert result.exit_code == 0, result.output
    converted = corpus / name / "converted.toml"
    converted.write_text(result.stdout)
    assert result.stdout.startswith("# The cluster spec of compose.yaml")
    assert comparable(load_cluster(converted)) == comparable(
        load_cluster(corpus / name / "compose.yaml")
    )


def test_the_corpus_warns_of_what_it_cannot_apply(corpus: Path) -> None:
    def warnings(name: str) -> list[str]:
        path = corpus / name / "compose.yaml"
        return [w.removeprefix(f"{path}: ") for w in translate_file(path, str(path)).warnings]

    shared = (
        "not created: its services are on the cluster's network (minidock-CLUSTER), shared "
        "with every service of the cluster on a host; use external: true to join a network "
        "that exists on the hosts"
    )
    assert warnings("webapp") == [
        f"networks.frontend (line 113): {shared}",
        f"networks.backend (line 114): {shared}",
    ]
    assert warnings("secrets") == [
        "services.api.configs[0].mode (line 25): ignored: a config is read-only, mode 0444 "
        "(readable by all)"
    ]
    assert warnings("deploy") == [
        "services.api.deploy.endpoint_mode (line 21): ignored: a service name resolves to "
        "its tasks on the same host (as dnsrr)",
        "services.api.deploy.resources.reservations.memory (line 35): MiniDock reserves what "
        "a task may use: the limit (1G) is reserved",
    ]
    assert warnings("interpolation") == []
    assert warnings("agent") == []


@pytest.mark.parametrize("name", BAD)
@pytest.mark.parametrize("command", ["validate", "plan", "apply"])
def test_a_bad_compose_file_is_one_line_at_exit_2(
    corpus: Path, name: str, command: str, in_tmp: Path, ssh_calls: list[str]
) -> None:
    path = corpus / "bad" / f"{name}.yaml"
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ")
    expected = expected.replace("/CORPUS", str(corpus))
    assert one_line_error(invoke(command, str(path))) == f"{path}: {expected}"
    assert ssh_calls == []
    assert not (in_tmp / ".minidock").exists()


def test_convert_refuses_a_toml_file_and_a_bad_compose_file(corpus: Path) -> None:
    toml = corpus / "webapp" / "cluster.toml"
    assert one_line_error(invoke("convert", str(toml))) == (
        f"{toml}: not a Compose file (*.yaml, *.yml or compose*): nothing to convert"
    )
    bad = corpus / "bad" / "build-context.yaml"
    assert one_line_error(invoke("convert", str(bad))).startswith(f"{bad}: services.web.build")


def test_warnings_reach_the_command_line_on_stderr(corpus: Path) -> None:
    result = invoke("validate", str(corpus / "deploy" / "compose.yaml"))
    assert result.exit_code == 0
    assert result.stdout.startswith("OK: ")
    warned = result.stderr.splitlines()
    assert len(warned) == 2
    assert all(line.startswith("minidock: warning: ") for line in warned)
    assert "endpoint_mode" in warned[0]


@pytest.mark.parametrize(
    ("name", "compose"),
    [
        ("compose.yaml", True),
        ("docker-compose.yml", True),
        ("stack.YAML", True),
        ("compose.prod", True),
        ("compose.toml", False),
        ("cluster.toml", False),
        ("prod", False),
    ],
)
def test_which_files_are_read_as_compose(name: str, compose: bool) -> None:
    assert is_compose_file(Path(name)) is compose


# -- YAML as Compose reads it -------------------------------------------------------------------
def test_yaml_12_scalars_as_compose_reads_them() -> None:
    doc = parse("a: no\nb: 8080:80\nc: on\nd: 2024-01-02\ne: true\nf: 010\ng: 0x1f\nh: 1.5\ni: ~\n")
    assert doc == {
        "a": "no",
        "b": "8080:80",
        "c": "on",
        "d": "2024-01-02",
        "e": True,
        "f": 8,  # YAML 1.1's octal 010, which Go's yaml.v3 (Compose) still reads as octal
        "g": 31,
        "h": 1.5,
        "i": None,
    }


def test_merge_keys_keep_the_line_where_each_key_is_written() -> None:
    doc = parse("base: &b\n  x: 1\n  y: 2\nthing:\n  <<: *b\n  y: 3\n")
    assert doc["thing"] == {"x": 1, "y": 3}
    assert doc["thing"].lines == {"x": 2, "y": 6}


# -- interpolation, as compose-go's template package --------------------------------------------
LOOKUP = {"A": "alpha", "EMPTY": "", "N": "3"}


@pytest.mark.parametrize(
    ("template", "result"),
    [
        ("$A", "alpha"),
        ("${A}", "alpha"),
        ("x${A}y$A", "xalphayalpha"),
        ("$$A", "$A"),
        ("$${A}", "${A}"),
        ("${B:-dflt}", "dflt"),
        ("${EMPTY:-dflt}", "dflt"),
        ("${EMPTY-dflt}", ""),
        ("${B-dflt}", "dflt"),
        ("${A:-dflt}", "alpha"),
        ("${A:+alt}", "alt"),
        ("${EMPTY:+alt}", ""),
        ("${EMPTY+alt}", "alt"),
        ("${B+alt}", ""),
        ("${B:-${A}-${N}}", "alpha-3"),
        ("${B:-a}}", "a}"),
        ("${B:-x} and ${A}", "x and alpha"),
        ("$1 and $ alone", "$1 and $ alone"),
        ("${EMPTY?must be set}", ""),
        ("${a}", ""),
    ],
)
def test_interpolation(template: str, result: str) -> None:
    assert substitute(template, LOOKUP) == result


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("${B:?give B}", "required variable B is missing a value: give B"),
        ("${EMPTY:?}", "required variable EMPTY is missing a value"),
        ("${B?}", "required variable B is missing a value"),
        ("${", "invalid interpolation format"),
        ("${1x}", "invalid interpolation format"),
    ],
)
def test_interpolation_errors(template: str, message: str) -> None:
    with pytest.raises(InterpolationError, match=message.replace("?", r"\?")):
        substitute(template, LOOKUP)


def test_an_unset_variable_is_empty_and_reported() -> None:
    unset: list[str] = []
    assert substitute("[$NOPE][${NOPE2}][${NOPE3:-d}]", {}, unset.append) == "[][][d]"
    assert unset == ["NOPE", "NOPE2"]


@given(st.text(alphabet=st.sampled_from("ab$${}:-?+ _x")))
def test_a_template_without_dollar_signs_is_itself_and_escapes_round_trip(text: str) -> None:
    escaped = text.replace("$", "$$")
    assert substitute(escaped, LOOKUP) == text


# -- the TOML document: what other keys flow through ----------------------------------------------
def test_x_minidock_passes_minidock_keys_through(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text('[[hosts]]\nname = "h1"\n')
    (tmp_path / "compose.yaml").write_text(
        "name: c\nx-minidock:\n  inventory: inventory.toml\nservices:\n  web:\n"
        "    image: web:5\n    x-minidock:\n      image_source: controller\n"
        '      desired: stopped\n      health: {cmd: ["true"], interval: 1s}\n'
    )
    doc = translate_file(tmp_path / "compose.yaml", "compose.yaml").document
    assert doc["services"]["web"] == {
        "image": "web:5",
        "desired": "stopped",
        "health": {"cmd": ["true"], "interval": "1s"},
        "image_source": "controller",
    }
    assert tomli_w.dumps(doc)
    service = load_cluster(tmp_path / "compose.yaml").services[0]
    assert (service.image_source, service.desired, service.health is not None) == (
        "controller",
        "stopped",
        True,
    )


def test_x_minidock_expose_is_the_service_name_across_hosts(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text('[[hosts]]\nname = "h1"\n')
    (tmp_path / "compose.yaml").write_text(
        "name: c\nx-minidock:\n  inventory: inventory.toml\nservices:\n  api:\n"
        "    image: api:3\n    expose: ['9000']\n    x-minidock:\n      expose: [8080, 5432]\n"
    )
    translation = translate_file(tmp_path / "compose.yaml", "compose.yaml")
    assert translation.document["services"]["api"]["expose"] == [8080, 5432]
    assert any("services.api.expose" in w for w in translation.warnings)  # Compose's: ignored
    assert load_cluster(tmp_path / "compose.yaml").services[0].expose == (5432, 8080)


def test_the_cluster_is_name_else_compose_project_name_else_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COMPOSE_PROJECT_NAME", raising=False)
    monkeypatch.delenv("MINIDOCK_INVENTORY", raising=False)
    project = tmp_path / "-My Shop.2"
    project.mkdir()
    path = project / "compose.yaml"
    path.write_text("services: {}\n")
    assert load_cluster(path).name == "myshop2"  # compose-go's NormalizeProjectName
    assert load_cluster(path).inventory_path == str(project / "inventory.toml")
    (project / ".env").write_text("COMPOSE_PROJECT_NAME=from_dotenv\n")
    assert load_cluster(path).name == "from_dotenv"
    monkeypatch.setenv("COMPOSE_PROJECT_NAME", "from-env")
    assert load_cluster(path).name == "from-env"
    path.write_text("name: Shop\nservices: {}\n")
    translation = translate_file(path, "compose.yaml")
    assert translation.document["cluster"] == "shop"
    assert translation.warnings == (
        "compose.yaml: name (line 1): taken as 'shop', normalised as Compose normalises it",
    )
    path.write_text("name: shop\nx-minidock: {cluster: own}\nservices: {}\n")
    assert load_cluster(path).name == "own"


def test_a_project_name_compose_would_refuse_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "compose.yaml"
    path.write_text("services: {}\n")
    monkeypatch.setenv("COMPOSE_PROJECT_NAME", "Shop")
    with pytest.raises(SpecError, match="COMPOSE_PROJECT_NAME 'Shop' is not a project name"):
        load_cluster(path)
    path.write_text("name: '--'\nservices: {}\n")
    with pytest.raises(SpecError, match="name \\(line 1\\): '--' has no letter or digit"):
        load_cluster(path)


def test_the_inventory_is_x_minidock_else_the_flag_else_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIDOCK_INVENTORY", "env.toml")
    for name in ("env.toml", "flag.toml", "own.toml"):
        (tmp_path / name).write_text('[[hosts]]\nname = "h1"\n')
    path = tmp_path / "compose.yaml"
    path.write_text("name: c\nservices: {}\n")
    assert load(path)[0].inventory_path == str(tmp_path / "env.toml")
    assert load(path, "flag.toml")[0].inventory_path == str(tmp_path / "flag.toml")
    assert "inventory" not in cluster_document(path)  # convert's TOML: the same rule applies
    path.write_text("name: c\nx-minidock: {inventory: own.toml}\nservices: {}\n")
    assert load(path, "flag.toml")[0].inventory_path == str(tmp_path / "own.toml")


WARNED = """\
name: warned
x-minidock: {inventory: inventory.toml}
services:
  web:
    image: web:5
    user: "1000"
    pull_policy: always
    platform: linux/amd64
    links: [db]
    expose: ["8080"]
    restart: always
    init: yes
    command: ["echo", "$NOT_SET"]
    healthcheck:
      test: ["NONE"]
    deploy:
      restart_policy: {condition: on-failure}
      resources:
        reservations: {cpus: "0.25"}
  db:
    image: postgres:16
    volumes: [pg:/data:cached]
    healthcheck:
      test: pg_isready
      start_interval: 1s
  one:
    image: one:1
    container_name: one
    hostname: one
    domainname: example.com
    mac_address: 02:42:ac:11:00:02
    healthcheck: {disable: true}
volumes:
  pg:
    labels: {team: data}
secrets:
  token:
    name: prod_token
    environment: TOKEN
"""


def test_keys_that_change_nothing_are_warnings_each_naming_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOT_SET", raising=False)
    path = tmp_path / "compose.yaml"
    path.write_text(WARNED)
    (tmp_path / "inventory.toml").write_text('[[hosts]]\nname = "h1"\n')
    warned = [w.removeprefix("compose.yaml: ") for w in translate_file(path, path.name).warnings]
    assert warned == [
        "variable NOT_SET is not set: it is taken as empty",
        "volumes.pg.labels (line 35): ignored: MiniDock labels its volumes itself",
        "secrets.token.name (line 38): ignored: MiniDock has no secret store to name it in",
        "services.web.platform (line 8): ignored: each host pulls the image for its own platform",
        "services.web.pull_policy (line 7): ignored: a host pulls an image only when it lacks "
        "it; give each build a new tag",
        "services.web.expose (line 10): ignored: tasks on one host reach each other by service "
        "name on any port; to reach it by name from every host, give x-minidock: "
        "{expose: [PORT, ...]}",
        "services.web.healthcheck (line 14): no health check is set; an image's own "
        "HEALTHCHECK, if it has one, runs",
        "services.web.restart (line 11): ignored: deploy.restart_policy is used",
        "services.web.init (line 12): 'yes' for a boolean is not YAML 1.2: write true",
        "services.web.links (line 9): ignored: tasks on one host reach each other by service name",
        "services.web.deploy.resources.reservations.cpus (line 19): MiniDock also limits a task "
        "to what it reserves",
        "services.db.volumes[0] (line 22): 'cached' is ignored (it changes nothing on Linux)",
        "services.db.healthcheck.start_interval (line 25): ignored: checks run every interval "
        "from the start",
        "services.one.container_name (line 28): ignored: a fixed name cannot apply to "
        "replicas; MiniDock names each task SERVICE.SLOT.TASKID, and tasks reach each other "
        "by service name",
        "services.one.hostname (line 29): ignored: one hostname cannot apply to replicas; "
        "each task's hostname is its container ID, and tasks reach each other by service name",
        "services.one.domainname (line 30): ignored: tasks reach each other by service name "
        "on the cluster's network",
        "services.one.mac_address (line 31): ignored: one MAC address cannot apply to "
        "replicas; Docker gives each task its own",
        "services.one.healthcheck (line 32): no health check is set; an image's own "
        "HEALTHCHECK, if it has one, runs",
    ]
    web, db, one = load_cluster(path).services
    assert (one.name, one.health) == ("one", None)
    assert (web.health, web.restart.condition, web.cpus, web.init) == (
        None,
        "on-failure",
        0.25,
        True,
    )
    assert db.health is not None
    assert db.health.cmd == ("/bin/sh", "-c", "pg_isready")


def test_the_example_compose_stack_is_the_example_toml_stack() -> None:
    playbooks = Path(__file__).parent.parent.parent / "playbooks"
    from_compose = load_cluster(playbooks / "stack.compose.yaml")
    assert comparable(from_compose) == comparable(load_cluster(playbooks / "stack.toml"))


def test_validate_takes_the_inventory_from_the_flag(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINIDOCK_INVENTORY", raising=False)
    (in_tmp / "hosts.toml").write_text('[[hosts]]\nname = "h1"\n')
    (in_tmp / "compose.yaml").write_text("name: c\nservices: {web: {image: web:5}}\n")
    result = invoke("validate", "compose.yaml", "--inventory", "hosts.toml")
    assert result.exit_code == 0, result.output
    assert result.stdout == "OK: compose.yaml: cluster c, 1 services, 1 hosts\n"
    assert "inventory.toml (the default" in one_line_error(invoke("validate", "compose.yaml"))


def test_a_secret_file_a_git_checkout_left_0664_is_a_warning(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINIDOCK_INVENTORY", raising=False)
    (in_tmp / "inventory.toml").write_text('[[hosts]]\nname = "h1"\n')
    (in_tmp / "db_password.txt").write_text("hunter2\n")
    os.chmod(in_tmp / "db_password.txt", 0o664)
    (in_tmp / "compose.yaml").write_text(
        "name: c\nservices:\n  db:\n    image: postgres:16\n    secrets: [db_password]\n"
        "secrets:\n  db_password: {file: db_password.txt}\n"
    )
    result = invoke("validate", "compose.yaml")
    assert result.exit_code == 0, result.output
    path = in_tmp / "db_password.txt"
    assert result.stderr == (
        'minidock: warning: compose.yaml: services.db.secret_files."/run/secrets/db_password"'
        f".file: {path} is open to the group or others (mode 0664): chmod 600 {path}\n"
    )
    os.chmod(path, 0o666)
    assert one_line_error(invoke("validate", "compose.yaml")).endswith(
        f"{path} is writable by every user: chmod 600 {path}"
    )
