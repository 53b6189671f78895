"""Compose keys read as compose-go reads them (docs/compose.md's support matrix): secret
modes as YAML numbers, legacy `external: {name}`, `logging` without a driver, an empty
`dns`, `!reset` and `!override`, `extra_hosts` naming a host twice, the default network's
options, environment names with a dot, `sysctls`; and the one-line refusals of
`runtime`, `network_mode` and a fixed network address."""

from __future__ import annotations

from pathlib import Path

import pytest

from minidock.commands.docker import env_file_text, run_argv
from minidock.model import LogConfig, Service
from minidock.spec import SpecError, load_cluster
from minidock.spec.compose.translation import translate_file

HEAD = "name: shop\nservices:\n  web:\n    image: web:5\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "compose.yaml"
    path.write_text(text)
    return path


def translated(tmp_path: Path, text: str) -> tuple[dict[str, object], list[str]]:
    """The web service's TOML table, and the warnings (without the file's name)."""
    path = write(tmp_path, text)
    translation = translate_file(path, "compose.yaml")
    warnings = [w.removeprefix("compose.yaml: ") for w in translation.warnings]
    return translation.document["services"]["web"], warnings


def web(tmp_path: Path, text: str) -> Service:
    return next(s for s in load_cluster(write(tmp_path, text)).services if s.name == "web")


def refusal(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    assert "\n" not in str(caught.value)
    return str(caught.value).removeprefix(f"{path}: ")


@pytest.mark.parametrize(
    ("written", "mode"),
    [("0o440", "0440"), ("0440", "0440"), ('"0440"', "0440"), ('"440"', "0440"), ("0400", "0400")],
)
def test_a_secret_mode_is_read_as_compose_go_reads_it(
    tmp_path: Path, written: str, mode: str
) -> None:
    (tmp_path / "pw").write_text("s3cret")
    (tmp_path / "pw").chmod(0o600)
    text = HEAD + (
        f"    secrets: [{{source: pw, mode: {written}}}]\nsecrets:\n  pw: {{file: ./pw}}\n"
    )
    table, _ = translated(tmp_path, text)
    assert table["secret_files"] == {"/run/secrets/pw": {"file": "./pw", "mode": mode}}
    (secret,) = web(tmp_path, text).secret_files
    assert secret.mode == int(mode, 8)


def test_a_decimal_mode_is_the_number_it_says_as_in_compose(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret")
    (tmp_path / "pw").chmod(0o600)
    text = HEAD + "    secrets: [{source: pw, mode: 288}]\nsecrets:\n  pw: {file: ./pw}\n"
    assert translated(tmp_path, text)[0]["secret_files"] == {
        "/run/secrets/pw": {"file": "./pw", "mode": "0440"}
    }
    too_big = text.replace("288", "1000")
    assert refusal(tmp_path, too_big) == (
        "services.web.secrets[0].mode (line 5): 1000 is not a file mode (at most 0777): "
        "write it like 0440"
    )


def test_legacy_external_name_is_name_and_external_true(tmp_path: Path) -> None:
    text = HEAD + "    networks: [edge]\nnetworks:\n  edge:\n    external:\n      name: proxy-net\n"
    table, warnings = translated(tmp_path, text)
    assert table["networks"] == ["proxy-net"]
    assert warnings == [
        "networks.edge.external.name (line 9): deprecated: read as name and external: true"
    ]
    clash = text.replace("  edge:\n", "  edge:\n    name: other\n")
    assert refusal(tmp_path, clash) == (
        "networks.edge.external.name (line 10): name and external.name conflict: give only name"
    )
    volume = HEAD + "    volumes: [data:/data]\nvolumes:\n  data:\n    external: {name: old}\n"
    assert refusal(tmp_path, volume).startswith(
        "volumes.data.external (line 8): an existing volume cannot be used"
    )


def test_logging_options_without_a_driver_keep_the_engines_driver(tmp_path: Path) -> None:
    text = HEAD + "    logging:\n      options: {max-size: 10m, max-file: 3}\n"
    table, _ = translated(tmp_path, text)
    assert table["log"] == {"options": {"max-size": "10m", "max-file": "3"}}
    service = web(tmp_path, text)
    assert service.log == LogConfig("", (("max-file", "3"), ("max-size", "10m")))
    argv, _ = run_argv(service, "shop", 1, "t1", service.spec_hash())
    assert "--log-driver" not in argv
    assert argv[argv.index("max-size=10m") - 1] == "--log-opt"
    assert "log" not in translated(tmp_path, HEAD + "    logging: {}\n")[0]


def test_an_empty_dns_is_no_dns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNSET_DNS", raising=False)
    table, warnings = translated(tmp_path, HEAD + "    dns: ${UNSET_DNS}\n")
    assert "dns" not in table
    assert warnings == ["variable UNSET_DNS is not set: it is taken as empty"]
    table, _ = translated(tmp_path, HEAD + "    dns: ['${UNSET_DNS}', 9.9.9.9]\n")
    assert table["dns"] == ["9.9.9.9"]
    assert web(tmp_path, HEAD + "    dns: ${UNSET_DNS}\n").dns == ()


def test_reset_leaves_a_key_out_and_override_is_the_value(tmp_path: Path) -> None:
    text = (
        "name: shop\nx-base: &base\n  image: web:5\n  ports: ['8080:80']\n"
        "  environment: {A: '1'}\n  labels: [a=1]\n"
        "services:\n  web:\n    <<: *base\n    ports: !reset []\n"
        "    environment: !override {B: '2'}\n    labels: [b=2, !reset c=3]\n"
        "    command: !reset\n"
    )
    table, _ = translated(tmp_path, text)
    assert "ports" not in table  # the merged-in ports too, as compose-go resets them
    assert table["env"] == {"B": "2"}
    assert table["labels"] == {"b": "2"}
    assert "command" not in table
    assert web(tmp_path, text).ports == ()


def test_extra_hosts_keep_every_address_and_both_forms_agree(tmp_path: Path) -> None:
    as_list = HEAD + "    extra_hosts: ['db=10.0.0.1', 'db:10.0.0.2', 'cache=10.0.0.3,::1']\n"
    as_map = HEAD + "    extra_hosts: {db: [10.0.0.1, 10.0.0.2], cache: [10.0.0.3, '[::1]']}\n"
    expected = {"db": ["10.0.0.1", "10.0.0.2"], "cache": ["10.0.0.3", "::1"]}
    assert translated(tmp_path, as_list)[0]["extra_hosts"] == expected
    assert translated(tmp_path, as_map)[0]["extra_hosts"] == expected
    service = web(tmp_path, as_list)
    assert service.extra_hosts == (
        ("cache", "10.0.0.3"),
        ("cache", "::1"),
        ("db", "10.0.0.1"),
        ("db", "10.0.0.2"),  # both lines in /etc/hosts, in the order given
    )
    assert web(tmp_path, as_map).spec_hash() == service.spec_hash()
    argv, _ = run_argv(service, "shop", 1, "t1", service.spec_hash())
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--add-host"] == [
        "cache:10.0.0.3",
        "cache:::1",
        "db:10.0.0.1",
        "db:10.0.0.2",
    ]
    one = web(tmp_path, HEAD + "    extra_hosts: ['db=10.0.0.1']\n")
    assert one.extra_hosts == (("db", "10.0.0.1"),)


def test_the_default_networks_options_are_warned_of(tmp_path: Path) -> None:
    text = HEAD + "networks:\n  default:\n    driver: bridge\n    name: shop-net\n"
    table, warnings = translated(tmp_path, text)
    assert "networks" not in table
    assert warnings == [
        "networks.default (line 6): options ignored: the default network is the cluster's "
        "network (minidock-CLUSTER), which MiniDock creates itself; use external: true to join "
        "a network that exists on the hosts"
    ]
    assert translated(tmp_path, HEAD + "networks:\n  default:\n")[1] == []


def test_an_environment_name_with_a_dot(tmp_path: Path) -> None:
    text = (
        HEAD
        + "    environment:\n      - discovery.type=single-node\n      - ES_JAVA_OPTS=-Xms512m\n"
    )
    service = web(tmp_path, text)
    assert service.env == (("ES_JAVA_OPTS", "-Xms512m"), ("discovery.type", "single-node"))
    assert env_file_text(service.env) == "ES_JAVA_OPTS=-Xms512m\ndiscovery.type=single-node\n"


def test_sysctls_are_the_tasks_kernel_parameters(tmp_path: Path) -> None:
    as_list = HEAD + "    sysctls: [net.ipv4.conf.all.src_valid_mark=1, net.core.somaxconn=1024]\n"
    as_map = HEAD + "    sysctls: {net.ipv4.conf.all.src_valid_mark: 1, net.core.somaxconn: 1024}\n"
    expected = {"net.ipv4.conf.all.src_valid_mark": "1", "net.core.somaxconn": "1024"}
    assert translated(tmp_path, as_list)[0]["sysctls"] == expected
    assert translated(tmp_path, as_map)[0]["sysctls"] == expected
    service = web(tmp_path, as_list)
    assert service.sysctls == (
        ("net.core.somaxconn", "1024"),
        ("net.ipv4.conf.all.src_valid_mark", "1"),
    )
    assert service.spec_hash() != web(tmp_path, HEAD).spec_hash()
    argv, _ = run_argv(service, "shop", 1, "t1", service.spec_hash())
    assert argv[argv.index("net.core.somaxconn=1024") - 1] == "--sysctl"
    assert refusal(tmp_path, HEAD + "    sysctls: [net.core.somaxconn]\n") == (
        "services.web.sysctls[0] (line 5): sysctl net.core.somaxconn has no value: write "
        "net.core.somaxconn=VALUE"
    )


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "runtime: io.containerd.wasmedge.v1",
            "services.web.runtime (line 5): another container runtime is not supported: tasks "
            "run on each host's default runtime (runc); remove it",
        ),
        (
            "network_mode: host",
            "services.web.network_mode (line 5): every task runs on its cluster's network "
            "(minidock-CLUSTER), which its names and published ports need: remove it; join "
            "existing networks with networks (external: true)",
        ),
        (
            "networks: {edge: {ipv4_address: 172.20.0.2}}",
            "services.web.networks.edge.ipv4_address (line 5): network options (aliases, "
            "addresses) are not supported: tasks are reached by their service name; remove it",
        ),
    ],
)
def test_what_cannot_apply_is_one_line(tmp_path: Path, key: str, message: str) -> None:
    text = HEAD + f"    {key}\nnetworks:\n  edge: {{external: true}}\n"
    assert refusal(tmp_path, text) == message


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        ("A=1\n\n\nwrapped s3cret tail\n", "line 4: not KEY=VALUE"),
        (
            "A=1\n\n9s3cret=tail\n",
            "line 3: not an environment variable name before its `=` (letters, digits, '_', "
            "'.' and '-', not starting with a digit)",
        ),
    ],
)
def test_an_env_file_line_is_named_by_its_number_never_its_text(
    tmp_path: Path, lines: str, problem: str
) -> None:
    """A value wrapped onto a line of its own is a secret's tail: blank lines above it
    counted, its text never shown (nor the name a `=` in it would make)."""
    (tmp_path / "web.env").write_text(lines)
    line = refusal(tmp_path, HEAD + "    env_file: web.env\n")
    assert line == f"services.web.env_file (line 5): {tmp_path}/web.env {problem}"
    assert "s3cret" not in line


@pytest.mark.parametrize(
    ("key", "line"),
    [
        ("    deploy:\n      replicas: 1001\n", "deploy.replicas (line 6)"),
        ("    scale: 5000\n", "scale (line 5)"),
    ],
)
def test_a_count_past_the_most_replicas_is_refused_at_its_compose_key(
    tmp_path: Path, key: str, line: str
) -> None:
    """As `replicas` in TOML (at most model.MAX_REPLICAS): a plan would build the slots."""
    got = "1001" if "1001" in key else "5000"
    assert refusal(tmp_path, HEAD + key) == f"services.web.{line}: must be at most 1000, got {got}"
