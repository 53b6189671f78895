"""Docker argv builders (exact argvs, Kamal-style) and parsers (real recorded outputs)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidock.commands.docker import (
    container_name,
    created_argv,
    docker_duration,
    env_file_text,
    exec_argv,
    grace_seconds,
    image_id_size_argv,
    image_present_argv,
    load_argv,
    login_argv,
    logs_argv,
    network_connect_argv,
    network_create_argv,
    network_owner_argv,
    pull_argv,
    rm_argv,
    run_argv,
    save_argv,
    start_argv,
    stop_argv,
    task_logs_argv,
)
from minidock.commands.facts import (
    ParseError,
    inspect_argv,
    parse_ids,
    parse_inspect,
    parse_time,
    ps_argv,
)
from minidock.masking import Masker
from minidock.model import (
    Container,
    HealthCheck,
    LogConfig,
    PortMapping,
    Service,
    Ulimit,
    looks_secret,
    secret_values,
)

DATA = Path(__file__).parent.parent / "data" / "docker"


def recorded(name: str) -> str:
    return (DATA / name).read_text()


def t(stamp: str) -> float:
    """Epoch seconds of "YYYY-MM-DDTHH:MM:SS.fffffffffZ", computed without the parser."""
    whole, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp() + float("0." + frac)


# -- builders -----------------------------------------------------------------------------------
def test_container_name() -> None:
    assert container_name("web", 3, "k2x9") == "web.3.k2x9"


def test_ps_argv() -> None:
    assert ps_argv("prod") == [
        "docker",
        "ps",
        "-a",
        "--no-trunc",
        "--filter",
        "label=minidock.cluster=prod",
        "--format",
        "{{.ID}} {{.State}} {{.Status}}",
    ]


def test_inspect_argv() -> None:
    assert inspect_argv(["aa11bb22cc33", "dd44"]) == [
        "docker",
        "inspect",
        "--type",
        "container",
        "aa11bb22cc33",
        "dd44",
    ]


def test_run_argv_minimal() -> None:
    argv, env = run_argv(Service(name="web", image="web:5"), "prod", 2, "t9", "abc123")
    assert argv == [
        "docker", "run", "-d", "--name", "web.2.t9",
        "--label", "minidock.cluster=prod",
        "--label", "minidock.service=web",
        "--label", "minidock.slot=2",
        "--label", "minidock.task=t9",
        "--label", "minidock.spec=abc123",
        "--restart", "no", "web:5",
    ]  # fmt: skip
    assert env == ""


def test_run_argv_full() -> None:
    svc = Service(
        name="web",
        image="registry.example:5000/web:5",
        command=("httpd", "-f", "-p", "8080"),
        env=(("MODE", "prod"), ("TOKEN", "s3cr3t $(id) 'x'")),
        ports=(PortMapping(8080, 8080), PortMapping(5353, 53, "udp")),
        cpus=0.5,
        memory=256 * 1024 * 1024,
        health=HealthCheck(
            cmd=("wget", "-qO-", "http://127.0.0.1:8080/"),
            interval=2.0,
            timeout=0.5,
            retries=3,
            start_period=2.0,
        ),
    )
    argv, env = run_argv(svc, "prod", 1, "t1", "f00d")
    assert argv == [
        "docker", "run", "-d", "--name", "web.1.t1",
        "--label", "minidock.cluster=prod",
        "--label", "minidock.service=web",
        "--label", "minidock.slot=1",
        "--label", "minidock.task=t1",
        "--label", "minidock.spec=f00d",
        "--env-file", "/dev/stdin",
        "-p", "8080:8080/tcp",
        "-p", "5353:53/udp",
        "--cpus", "0.5",
        "--memory", "268435456",
        "--health-cmd", "wget -qO- http://127.0.0.1:8080/",
        "--health-interval", "2s",
        "--health-timeout", "500ms",
        "--health-retries", "3",
        "--health-start-period", "2s",
        "--restart", "no",
        "registry.example:5000/web:5",
        "httpd", "-f", "-p", "8080",
    ]  # fmt: skip
    assert env == "MODE=prod\nTOKEN=s3cr3t $(id) 'x'\n"


def test_run_argv_with_the_cluster_network_and_every_run_option() -> None:
    svc = Service(
        name="api",
        image="api:2",
        command=("serve", "--port", "80"),
        labels=(("app.team", "payments"), ("tier", "")),
        user="1000:1000",
        workdir="/srv/app",
        entrypoint=("/bin/tini", "--"),
        stop_signal="SIGQUIT",
        stop_grace_period=30.0,
        init=True,
        read_only=True,
        cap_add=("NET_ADMIN",),
        cap_drop=("ALL",),
        ulimits=(Ulimit("nofile", 1024, 2048), Ulimit("nproc", -1, -1)),
        log=LogConfig("json-file", (("max-file", "3"), ("max-size", "10m"))),
        extra_hosts=(("db.internal", "10.0.0.5"), ("gw", "host-gateway")),
        dns=("10.0.0.2", "2001:db8::53"),
    )
    argv, _ = run_argv(svc, "prod", 1, "t1", "f00d", network="minidock-prod")
    assert argv == [
        "docker", "run", "-d", "--name", "api.1.t1",
        "--label", "minidock.cluster=prod",
        "--label", "minidock.service=api",
        "--label", "minidock.slot=1",
        "--label", "minidock.task=t1",
        "--label", "minidock.spec=f00d",
        "--network", "minidock-prod", "--network-alias", "api",
        "--label", "app.team=payments",
        "--label", "tier=",
        "--user", "1000:1000",
        "--workdir", "/srv/app",
        "--entrypoint", "/bin/tini",
        "--stop-signal", "SIGQUIT",
        "--stop-timeout", "30",
        "--init",
        "--read-only",
        "--cap-add", "NET_ADMIN",
        "--cap-drop", "ALL",
        "--ulimit", "nofile=1024:2048",
        "--ulimit", "nproc=-1:-1",
        "--log-driver", "json-file",
        "--log-opt", "max-file=3",
        "--log-opt", "max-size=10m",
        "--add-host", "db.internal:10.0.0.5",
        "--add-host", "gw:host-gateway",
        "--dns", "10.0.0.2",
        "--dns", "2001:db8::53",
        "--restart", "no", "api:2",
        "--", "serve", "--port", "80",
    ]  # fmt: skip


def test_an_empty_entrypoint_clears_the_images_and_a_one_word_one_adds_no_arguments() -> None:
    cleared, _ = run_argv(Service(name="a", image="i", entrypoint=()), "c", 1, "t", "s")
    assert cleared[-5:] == ["--entrypoint", "", "--restart", "no", "i"]
    single = Service(name="a", image="i", entrypoint=("/run.sh",), command=("x",))
    argv, _ = run_argv(single, "c", 1, "t", "s")
    assert argv[-6:] == ["--entrypoint", "/run.sh", "--restart", "no", "i", "x"]


def test_created_argv_is_the_same_task_not_started() -> None:
    run, _ = run_argv(Service(name="a", image="i", env=(("K", "v"),)), "c", 1, "t", "s")
    assert created_argv(run) == ["docker", "create", *run[3:]]
    with pytest.raises(ValueError, match="not a run_argv"):
        created_argv(["docker", "ps"])


def test_network_argvs() -> None:
    assert network_owner_argv("minidock-prod") == [
        "docker", "network", "inspect", "--format",
        '{{index .Labels "minidock.cluster"}}', "minidock-prod",
    ]  # fmt: skip
    assert network_create_argv("minidock-prod", "prod") == [
        "docker", "network", "create", "--driver", "bridge",
        "--label", "minidock.cluster=prod", "minidock-prod",
    ]  # fmt: skip
    assert network_connect_argv("backend", "web.1.t1", "web") == [
        "docker", "network", "connect", "--alias", "web", "backend", "web.1.t1",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="invalid network"):
        network_create_argv("--driver=host", "prod")


def test_login_push_logs_exec_argvs() -> None:
    assert login_argv("127.0.0.1:5099", "ci") == [
        "docker", "login", "--username", "ci", "--password-stdin", "127.0.0.1:5099",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="invalid registry user"):
        login_argv("reg", "-p")
    assert image_id_size_argv("web:5") == [
        "docker", "image", "inspect", "--format", "{{.Id}} {{.Size}}", "web:5",
    ]  # fmt: skip
    assert save_argv("web:5") == ["docker", "save", "web:5"]
    assert load_argv() == ["docker", "load", "--quiet"]
    assert task_logs_argv("a1") == ["docker", "logs", "a1"]
    assert task_logs_argv("a1", tail=5, since=600.0, follow=True) == [
        "docker", "logs", "--follow", "--tail", "5", "--since", "600s", "a1",
    ]  # fmt: skip
    assert exec_argv("a1", ["sh", "-c", "env"]) == ["docker", "exec", "a1", "sh", "-c", "env"]
    assert exec_argv("a1", ["sh"], interactive=True, tty=True) == [
        "docker", "exec", "-i", "-t", "a1", "sh",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="needs a command"):
        exec_argv("a1", [])


def test_grace_seconds_rounds_up_to_whole_seconds() -> None:
    assert [grace_seconds(Service("a", "i", stop_grace_period=g)) for g in (10, 0, 1.2)] == [
        10,
        0,
        2,
    ]


def test_health_cmd_is_quoted_for_the_container_shell() -> None:
    health = HealthCheck(cmd=("sh", "-c", "echo ok from $HOSTNAME"))
    argv, _ = run_argv(Service(name="a", image="i", health=health), "c", 1, "t", "s")
    assert argv[argv.index("--health-cmd") + 1] == "sh -c 'echo ok from $HOSTNAME'"


def test_run_argv_refuses_an_image_that_docker_would_read_as_a_flag() -> None:
    with pytest.raises(ValueError, match="image"):
        run_argv(Service(name="a", image="--privileged"), "c", 1, "t", "s")


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ((("A", "x\ny"),), "line break"),
        ((("A", "x\r"),), "line break"),
        ((("A B", "x"),), "env name"),
        ((("A=B", "x"),), "env name"),
        ((("", "x"),), "env name"),
        ((("#A", "x"),), "env name"),
    ],
)
def test_env_file_rejects_what_docker_would_misread(
    env: tuple[tuple[str, str], ...], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        env_file_text(env)


def test_env_file_keeps_values_verbatim() -> None:
    assert env_file_text([("A", ""), ("B", " x=y # z "), ("C", '"q"')]) == (
        'A=\nB= x=y # z \nC="q"\n'
    )


env_values = st.text(st.characters(codec="utf-8", exclude_characters="\n\r\0"), min_size=1)


def docker_reads_env_file(text: str) -> list[tuple[str, str]]:
    """What docker's --env-file parser (opts/envfile.go) makes of the text."""
    pairs = []
    for line in text.split("\n"):
        line = line.lstrip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs.append((key, value))
    return pairs


@given(values=st.lists(env_values, min_size=1, max_size=4))
def test_no_env_value_ever_reaches_the_argv(values: list[str]) -> None:
    """The argv does not depend on env values at all; they travel only on stdin."""
    env = tuple((f"K{i}", v) for i, v in enumerate(values))
    bare = Service(name="web", image="web:5", command=("run",))
    svc = Service(name="web", image="web:5", command=("run",), env=env)
    argv, text = run_argv(svc, "prod", 1, "t1", "spec")
    bare_argv, bare_text = run_argv(bare, "prod", 1, "t1", "spec")
    assert bare_text == ""
    at = bare_argv.index("--restart")
    assert argv == [*bare_argv[:at], "--env-file", "/dev/stdin", *bare_argv[at:]]
    assert docker_reads_env_file(text) == list(env)


def test_docker_duration() -> None:
    assert [docker_duration(s) for s in (2.0, 0.5, 0.0, 60.0, 1.25)] == [
        "2s",
        "500ms",
        "0s",
        "60s",
        "1250ms",
    ]
    with pytest.raises(ValueError, match="negative"):
        docker_duration(-1.0)


def test_small_builders() -> None:
    assert stop_argv("web.1.t1") == ["docker", "stop", "-t", "10", "web.1.t1"]
    assert stop_argv("abc", timeout_s=3) == ["docker", "stop", "-t", "3", "abc"]
    assert rm_argv(["a1", "b2"]) == ["docker", "rm", "a1", "b2"]
    assert rm_argv(["a1"], force=True) == ["docker", "rm", "-f", "a1"]
    assert logs_argv("a1") == ["docker", "logs", "--tail", "20", "a1"]
    assert logs_argv("a1", tail=5) == ["docker", "logs", "--tail", "5", "a1"]
    assert start_argv("a1") == ["docker", "start", "a1"]
    assert image_present_argv("web:5") == [
        "docker",
        "image",
        "inspect",
        "--format",
        "{{.Id}}",
        "web:5",
    ]
    assert pull_argv("web:5") == ["docker", "pull", "web:5"]


@pytest.mark.parametrize("bad", ["", "-f", "--all"])
def test_operands_that_look_like_flags_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        rm_argv([bad])
    with pytest.raises(ValueError, match="invalid"):
        stop_argv(bad)


# -- secrets ------------------------------------------------------------------------------------
def test_secret_values_are_secrets_registry_passwords_and_secret_looking_env() -> None:
    """27.7: env is configuration (shown as it is, whatever its length); values of
    secret-looking keys are secrets, whatever their length."""
    env = (
        ("TOKEN", "s3cr3t"),
        ("LONG", "s3cr3t-more"),
        ("E", ""),
        ("ROLE", "db"),
        ("API_KEY", "abcd"),
        ("DB_PASSWORD", "xyz"),
        ("MODE", "production"),
    )
    svc = Service(name="a", image="i", env=env, secrets=(("S", "q"),))
    assert secret_values(svc) == ("s3cr3t", "abcd", "xyz", "q")
    mask = Masker(secret_values(svc))
    assert mask("got s3cr3t-more and s3cr3t, mode production") == (
        "got ***-more and ***, mode production"
    )
    assert Masker(())("nothing here") == "nothing here"
    assert [looks_secret(k) for k in ("db_password", "GH_TOKEN", "SSH_PRIVATE", "KEYBOARD")] == [
        True,
        True,
        True,
        False,
    ]


# -- parsers ------------------------------------------------------------------------------------
def test_parse_ids_recorded() -> None:
    ids = parse_ids(recorded("ps.txt"))
    assert len(ids) == 8
    assert ids[0] == "bf3a572c6d017ad0076a330a3e410585ad7711b833e16506ff0d95b89bff180e"
    assert parse_ids("") == []
    assert parse_ids("\n") == []


def test_parse_ids_rejects_anything_but_ids() -> None:
    with pytest.raises(ParseError):
        parse_ids("Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n")


def test_parse_time() -> None:
    assert parse_time("2026-11-29T11:42:05.051811292Z") == t("2026-11-29T11:42:05.051811292Z")
    assert parse_time("2026-11-29T13:42:05.5+02:00") == t("2026-11-29T11:42:05.5Z")
    assert parse_time("2026-11-29T11:42:05Z") == t("2026-11-29T11:42:05Z")
    assert parse_time("0001-01-01T00:00:00Z") is None
    assert parse_time(None) is None
    with pytest.raises(ParseError):
        parse_time("yesterday")


def one(name: str) -> Container:
    (container,) = parse_inspect("h1", "rec", recorded(name))
    return container


def test_parse_running_with_ports_cpus_memory() -> None:
    assert one("running.json") == Container(
        id="56b2269cb439aa309c57fd6947d3de64994634ca6f273ce6689973882001bb8a",
        name="web.1.t1run",
        host="h1",
        cluster="rec",
        service="web",
        slot=1,
        task="t1run",
        spec="76f246a9dd21",
        image="rec/busybox:1",
        state="running",
        health="none",
        exit_code=None,
        created_at=t("2026-11-29T11:42:05.051811292Z"),
        started_at=t("2026-11-29T11:42:05.325336108Z"),
        finished_at=None,
        health_log="",
        cpus=0.5,
        memory=64 * 1024 * 1024,
        host_ports=("18080/tcp", "18081/udp"),
        published=((8080, 18080),),  # TCP only: what a route's upstream would use
    )


def test_parse_running_healthy() -> None:
    c = one("healthy.json")
    assert (c.name, c.service, c.slot, c.task, c.spec) == (
        "api.1.t2hok",
        "api",
        1,
        "t2hok",
        "070c7e7bcd0e",
    )
    assert (c.state, c.health, c.exit_code) == ("running", "healthy", None)
    assert c.health_log == "ok from 81f060b29b8f"
    assert (c.cpus, c.memory, c.host_ports) == (1.5, 128 * 1024 * 1024, ("18090/tcp",))
    assert c.started_at == t("2026-11-29T11:42:05.637303758Z")


def test_parse_running_unhealthy() -> None:
    c = one("unhealthy.json")
    assert (c.state, c.health, c.slot) == ("running", "unhealthy", 2)
    assert c.health_log == "wget: can't connect to remote host (127.0.0.1): Connection refused"
    assert (c.cpus, c.memory, c.host_ports) == (0.0, 0, ())


def test_parse_health_starting() -> None:
    c = one("starting.json")
    assert (c.state, c.health, c.health_log) == ("running", "starting", "")


def test_parse_exited_0() -> None:
    c = one("exited-0.json")
    assert (c.state, c.exit_code, c.health) == ("exited", 0, "none")
    assert c.started_at == t("2026-11-29T11:42:07.641963615Z")
    assert c.finished_at == t("2026-11-29T11:42:07.643143333Z")


def test_parse_exited_1() -> None:
    c = one("exited-1.json")
    assert (c.name, c.state, c.exit_code) == ("crash.1.t6crash", "exited", 1)
    assert c.finished_at == t("2026-11-29T11:42:07.971459294Z")


def test_parse_created_never_started() -> None:
    c = one("created.json")
    assert (c.name, c.state, c.exit_code) == ("web.2.t7new", "created", None)
    assert c.created_at == t("2026-11-29T11:42:08.091934024Z")
    assert (c.started_at, c.finished_at) == (None, None)
    assert c.host_ports == ("18082/tcp",)
    assert c.live


def test_foreign_containers_are_ignored() -> None:
    # mixed.json: ours (running, exited 1), no labels, cluster "other", no slot/task/spec.
    found = parse_inspect("h1", "rec", recorded("mixed.json"))
    assert [c.name for c in found] == ["web.1.t1run", "crash.1.t6crash"]
    (other,) = parse_inspect("h1", "other", recorded("mixed.json"))
    assert other.name == "web.1.t8other"
    assert parse_inspect("h1", "nobody", recorded("mixed.json")) == ()


@pytest.mark.parametrize(
    "labels",
    [
        None,
        {"minidock.cluster": "rec"},
        {"minidock.service": "web", "minidock.slot": "1", "minidock.task": "t",
         "minidock.spec": "s"},
        {"minidock.cluster": "rec", "minidock.service": "web", "minidock.slot": "0",
         "minidock.task": "t", "minidock.spec": "s"},
        {"minidock.cluster": "rec", "minidock.service": "web", "minidock.slot": "x",
         "minidock.task": "t", "minidock.spec": "s"},
        {"minidock.cluster": "rec", "minidock.service": "", "minidock.slot": "1",
         "minidock.task": "t", "minidock.spec": "s"},
    ],
)  # fmt: skip
def test_containers_without_valid_labels_are_ignored(labels: object) -> None:
    data = json.loads(recorded("running.json"))
    data[0]["Config"]["Labels"] = labels
    assert parse_inspect("h1", "rec", json.dumps(data)) == ()


def test_health_log_is_the_last_entry_stripped_and_kept_whole() -> None:
    """Whole (Docker keeps 4096 bytes): the masker sees every secret before a line is cut."""
    data = json.loads(recorded("unhealthy.json"))
    data[0]["State"]["Health"]["Log"].append({"ExitCode": 1, "Output": "  " + "x" * 300 + "\n"})
    (c,) = parse_inspect("h1", "rec", json.dumps(data))
    assert c.health_log == "x" * 300


def test_vanished_container_output_still_parses() -> None:
    (c,) = parse_inspect("h1", "rec", recorded("vanished.json"))
    assert c.name == "job.1.t5ok"
    assert parse_inspect("h1", "rec", recorded("all-vanished.json")) == ()


@pytest.mark.parametrize(
    "stdout",
    ["", "not json", '{"Id": "x"}', "[1, 2]", recorded("running.json")[:100]],
)
def test_malformed_output_raises(stdout: str) -> None:
    with pytest.raises(ParseError):
        parse_inspect("h1", "rec", stdout)


def test_our_container_without_a_known_state_raises() -> None:
    data = json.loads(recorded("running.json"))
    data[0]["State"]["Status"] = "sleepy"
    with pytest.raises(ParseError):
        parse_inspect("h1", "rec", json.dumps(data))


def test_a_docker_error_keeps_its_cause_when_shortened() -> None:
    """Issue 14: Docker puts the cause last; a long message is cut at its start."""
    from minidock.act.acts import first_line
    from minidock.ssh import Result

    noise = "docker: Error response from daemon: failed to create shim task: OCI runtime " * 6
    cause = 'exec: "nope": executable file not found in $PATH: unknown.'
    line = first_line(Result(125, "", noise + cause + "\n"))
    assert len(line) <= 300
    assert line.endswith(cause)
    assert line.startswith("...")
    # a cause commands.errors.docker_error names is said first, in Docker's words, whatever before
    taken = noise + "connectivity: Bind for 0.0.0.0:9 failed: port is already allocated.\n"
    assert first_line(Result(125, "", taken)) == (
        "host port 0.0.0.0:9 is taken by another container "
        "(Bind for 0.0.0.0:9 failed: port is already allocated)"
    )
