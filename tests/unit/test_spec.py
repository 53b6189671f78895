"""Inventory and cluster files: what loads, into which model values, and every error's text."""

from __future__ import annotations

import json
import os
from graphlib import CycleError
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from minidock import units
from minidock.model import (
    MAX_REPLICAS,
    Cluster,
    Constraint,
    HealthCheck,
    Host,
    Inventory,
    PortMapping,
    RestartPolicy,
    Service,
    UpdatePolicy,
)
from minidock.spec import SpecError, load, load_cluster, load_inventory, topo_order

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "spec"

CLUSTER = 'cluster = "prod"\ninventory = "inventory.toml"\n'
WEB = CLUSTER + '[services.web]\nimage = "web:5"\n'
HOST = '[[hosts]]\nname = "host1"\naddress = "10.0.0.11"\n'
NAME_HINT = "use lowercase letters, digits, '_', '.' and '-', starting with a letter or digit"
DURATION_HINT = "use a number of seconds or a string like '500ms', '2s', '1m30s', '1h'"


def c(text: str, expected: str, id: str) -> object:
    """A bad cluster file, loaded with load() beside a good inventory."""
    return pytest.param("cluster.toml", text, "cluster.toml: " + expected, id=id)


def i(text: str, expected: str, id: str) -> object:
    """A bad inventory file, loaded with load_inventory()."""
    return pytest.param("inventory.toml", text, "inventory.toml: " + expected, id=id)


BAD = [
    # -- TOML
    c(
        'cluster = "prod"\ninventory = \n',
        "invalid TOML at line 2, column 13: invalid value",
        "toml-missing-value",
    ),
    c(
        WEB + 'image = "web:6"\n',
        "invalid TOML at line 5, column 16: cannot overwrite a value (is a key set twice?)",
        "toml-duplicate-key",
    ),
    i(
        "[[hosts]\n",
        "invalid TOML at line 1, column 8: expected ']]' at the end of an array declaration",
        "toml-table",
    ),
    # -- unknown keys
    c(
        WEB + "replicaz = 3\n",
        "services.web: unknown key 'replicaz' (did you mean 'replicas'?)",
        "unknown-key",
    ),
    c(
        CLUSTER + '[service.web]\nimage = "web:5"\n',
        "unknown key 'service' (did you mean 'services'?)",
        "unknown-top-key",
    ),
    c(
        WEB + 'health = { test = ["true"] }\n',
        "services.web.health: unknown key 'test' "
        "(allowed: cmd, interval, timeout, retries, start_period)",
        "unknown-key-no-match",
    ),
    i(
        '[defaults]\nusr = "deploy"\n' + HOST,
        "defaults: unknown key 'usr' (did you mean 'user'?)",
        "inventory-unknown-key",
    ),
    i(
        '[[hosts]]\nname = "host1"\nadress = "10.0.0.11"\n',
        "hosts[0]: unknown key 'adress' (did you mean 'address'?)",
        "host-unknown-key",
    ),
    # -- required keys
    c('inventory = "inventory.toml"\n', "missing required key 'cluster'", "missing-cluster-key"),
    c(
        CLUSTER + "[services.web]\nreplicas = 2\n",
        "services.web: missing required key 'image'",
        "missing-image",
    ),
    i('[defaults]\nuser = "deploy"\n', "missing required key 'hosts'", "missing-hosts"),
    i("hosts = []\n", "hosts: must not be empty", "empty-hosts"),
    # -- types and ranges
    c(
        WEB + 'replicas = "3"\n',
        "services.web.replicas: expected an integer, got string '3'",
        "wrong-type",
    ),
    c(
        WEB + "replicas = -1\n",
        "services.web.replicas: must be at least 0, got -1",
        "negative-replicas",
    ),
    c(
        WEB + "replicas = 99999999999\n",
        "services.web.replicas: must be at most 1000, got 99999999999",
        "too-many-replicas",
    ),
    c(CLUSTER + "services = 3\n", "services: expected a table, got integer 3", "services-type"),
    c(WEB + "cpus = -0.5\n", "services.web.cpus: must be at least 0, got -0.5", "negative-cpus"),
    i(HOST + "cpus = 0\n", "hosts[0].cpus: must be greater than 0, got 0", "host-zero-cpus"),
    i(HOST + "port = 0\n", "hosts[0].port: must be at least 1, got 0", "ssh-port-range"),
    i(
        HOST + 'port = "22"\n',
        "hosts[0].port: expected an integer, got string '22'",
        "ssh-port-type",
    ),
    i(
        "[defaults]\ndown_after = 0\n" + HOST,
        "defaults.down_after: must be at least 1, got 0",
        "down-after",
    ),
    i(
        HOST + 'host_key_policy = "yes"\n',
        "hosts[0].host_key_policy: expected one of 'strict', 'accept-new', got 'yes'",
        "host-key-policy",
    ),
    i(
        HOST + "labels = { zone = 1 }\n",
        'hosts[0].labels.zone: expected a string, got integer 1 (write it in quotes: "1")',
        "label-value-type",
    ),
    c(
        WEB + "restart = { window = inf }\n",
        "services.web.restart.window: must be a finite number, got inf",
        "infinite-number",
    ),
    i(
        '[hosts]\nname = "host1"\n',
        "hosts: expected an array, got a table (write one [[hosts]] table per host)",
        "hosts-as-table",
    ),
    # -- names
    c(
        CLUSTER + '[services.Web]\nimage = "web:5"\n',
        f"services: invalid service name 'Web': {NAME_HINT}",
        "service-name",
    ),
    c(
        CLUSTER + '[services."web\\n"]\nimage = "web:5"\n',
        f"services: invalid service name 'web\\n': {NAME_HINT}",
        "service-name-newline",
    ),
    c(
        'cluster = "Prod"\ninventory = "inventory.toml"\n',
        f"cluster: invalid cluster name 'Prod': {NAME_HINT}",
        "cluster-name",
    ),
    c(
        f'cluster = "{"a" * 64}"\ninventory = "inventory.toml"\n',
        f"cluster: invalid cluster name '{'a' * 57}...': at most 63 characters",
        "cluster-name-length",
    ),
    i(
        '[[hosts]]\nname = "Host_1"\naddress = "10.0.0.11"\n',
        f"hosts[0].name: invalid host name 'Host_1': {NAME_HINT}",
        "host-name",
    ),
    i(HOST + HOST, "hosts[1].name: duplicate host name 'host1' (also hosts[0])", "duplicate-host"),
    # -- values that would reach ssh's command line
    i(
        '[[hosts]]\nname = "host1"\naddress = "-oProxyCommand=touch /tmp/x"\n',
        "hosts[0].address: invalid address '-oProxyCommand=touch /tmp/x': must not start with '-'",
        "address-dash",
    ),
    i(
        '[[hosts]]\nname = "host1"\naddress = "10.0.0.11 x"\n',
        "hosts[0].address: invalid address '10.0.0.11 x': must be non-empty, without whitespace",
        "address-space",
    ),
    i(
        '[defaults]\nuser = "-x"\n' + HOST,
        "defaults.user: invalid user '-x': must not start with '-'",
        "user-dash",
    ),
    # -- images
    c(
        CLUSTER + '[services.web]\nimage = "Web:5"\n',
        "services.web.image: invalid image reference 'Web:5': "
        "use [registry[:port]/]name[:tag][@digest] with a lowercase name",
        "image-uppercase",
    ),
    c(
        CLUSTER + '[services.web]\nimage = "registry.example:5000/web:"\n',
        "services.web.image: invalid image reference 'registry.example:5000/web:': "
        "use [registry[:port]/]name[:tag][@digest] with a lowercase name",
        "image-empty-tag",
    ),
    # -- dependencies
    c(
        WEB + 'depends_on = ["dbb"]\n[services.db]\nimage = "db:1"\n',
        "services.web.depends_on[0]: unknown service 'dbb' (did you mean 'db'?)",
        "unknown-dependency",
    ),
    c(
        WEB + 'depends_on = ["web"]\n',
        "services.web.depends_on[0]: service 'web' depends on itself",
        "self-dependency",
    ),
    c(
        CLUSTER + '[services.a]\nimage = "a"\ndepends_on = ["b"]\n'
        '[services.b]\nimage = "b"\ndepends_on = ["a"]\n',
        "services.a.depends_on: dependency cycle: a -> b -> a",
        "cycle-2",
    ),
    c(
        CLUSTER + '[services.x]\nimage = "x"\n[services.b]\nimage = "b"\ndepends_on = ["c"]\n'
        '[services.c]\nimage = "c"\ndepends_on = ["a"]\n'
        '[services.a]\nimage = "a"\ndepends_on = ["b", "x"]\n',
        "services.b.depends_on: dependency cycle: b -> c -> a -> b",
        "cycle-3",
    ),
    c(
        WEB + 'depends_on = ["db", "db"]\n[services.db]\nimage = "db:1"\n',
        "services.web.depends_on: 'db' is listed twice",
        "duplicate-dependency",
    ),
    # -- durations and sizes
    c(
        WEB + 'update = { delay = "5x" }\n',
        f"services.web.update.delay: invalid duration '5x': {DURATION_HINT}",
        "bad-duration",
    ),
    c(
        WEB + 'health = { cmd = ["true"], interval = "10" }\n',
        "services.web.health.interval: invalid duration '10': missing unit (ms, s, m or h)",
        "duration-no-unit",
    ),
    c(
        WEB + "restart = { window = -1 }\n",
        "services.web.restart.window: invalid duration -1: must not be negative",
        "negative-duration",
    ),
    c(
        WEB + "restart = { window = true }\n",
        "services.web.restart.window: expected a duration like '2s' or a number of seconds, "
        "got boolean true",
        "duration-type",
    ),
    c(
        WEB + 'health = { cmd = ["true"], timeout = "0s" }\n',
        "services.web.health.timeout: must be greater than 0, got '0s'",
        "zero-timeout",
    ),
    i(
        '[defaults]\nconnect_timeout = "0ms"\n' + HOST,
        "defaults.connect_timeout: must be greater than 0, got '0ms'",
        "zero-connect-timeout",
    ),
    i(
        HOST + 'probe_timeout = "0s"\n',
        "hosts[0].probe_timeout: must be greater than 0, got '0s'",
        "zero-probe-timeout",
    ),
    i(
        '[defaults]\nprobe_timeout = "3 s"\n' + HOST,
        f"defaults.probe_timeout: invalid duration '3 s': {DURATION_HINT}",
        "bad-probe-timeout",
    ),
    c(
        WEB + 'memory = "256MB"\n',
        "services.web.memory: invalid size '256MB': "
        "use a number of bytes or a string like '512KiB', '256MiB', '8GiB', '100M'",
        "bad-size",
    ),
    i(
        HOST + 'memory = "8 GiB"\n',
        "hosts[0].memory: invalid size '8 GiB': "
        "use a number of bytes or a string like '512KiB', '256MiB', '8GiB', '100M'",
        "host-bad-size",
    ),
    # -- update
    c(
        WEB + "update = { parallelism = 0 }\n",
        "services.web.update.parallelism: must be at least 1, got 0",
        "parallelism",
    ),
    c(
        WEB + 'update = { order = "stop_first" }\n',
        "services.web.update.order: expected one of 'stop-first', 'start-first', "
        "got 'stop_first' (did you mean 'stop-first'?)",
        "update-order",
    ),
    c(
        WEB + 'update = { failure_action = "abort" }\n',
        "services.web.update.failure_action: expected one of 'pause', 'rollback', 'continue', "
        "got 'abort'",
        "failure-action",
    ),
    c(
        WEB + "update = { max_failure_ratio = 1.5 }\n",
        "services.web.update.max_failure_ratio: must be at most 1, got 1.5",
        "failure-ratio",
    ),
    # -- restart
    c(
        WEB + 'restart = { condition = "always" }\n',
        "services.web.restart.condition: expected one of 'any', 'on-failure', 'none', got 'always'",
        "restart-condition",
    ),
    c(
        WEB + 'restart = { delay = "10s", max_delay = "5s" }\n',
        "services.web.restart.max_delay: must be at least delay (10s), got 5s",
        "max-delay",
    ),
    c(
        WEB + 'restart = { delay = "2m" }\n',
        "services.web.restart.delay: must be at most max_delay (1m, the default), got 2m",
        "delay-over-default-max",
    ),
    c(
        WEB + "restart = { max_attempts = -1 }\n",
        "services.web.restart.max_attempts: must be at least 0, got -1",
        "max-attempts",
    ),
    # -- ports
    c(
        WEB + 'ports = ["8080"]\n',
        "services.web.ports[0]: invalid port mapping '8080': "
        "use 'HOST:CONTAINER' or 'HOST:CONTAINER/udp'",
        "port-form",
    ),
    c(
        WEB + 'ports = ["53:53/sctp"]\n',
        "services.web.ports[0]: invalid port mapping '53:53/sctp': "
        "use 'HOST:CONTAINER' or 'HOST:CONTAINER/udp'",
        "port-protocol",
    ),
    c(
        WEB + 'ports = ["70000:80"]\n',
        "services.web.ports[0]: port 70000 out of range 1..65535 in '70000:80'",
        "port-range",
    ),
    c(
        WEB + 'ports = ["8080:0"]\n',
        "services.web.ports[0]: port 0 out of range 1..65535 in '8080:0'",
        "port-zero",
    ),
    c(
        WEB + 'ports = ["8080:80", "9090:90", "8080:81"]\n',
        "services.web.ports[2]: host port 8080/tcp is already published by ports[0]",
        "duplicate-host-port",
    ),
    c(
        WEB + "ports = [8080]\n",
        "services.web.ports[0]: expected a string like '8080:80' or '53:53/udp', got integer 8080",
        "port-type",
    ),
    # -- constraints, env, health, desired, spread
    c(
        WEB + 'constraints = ["zone = a"]\n',
        "services.web.constraints[0]: invalid constraint 'zone = a': "
        "use 'key == value' or 'key != value'",
        "constraint",
    ),
    c(
        WEB + 'env = { 1X = "a" }\n',
        "services.web.env: invalid environment variable name '1X': "
        "use letters, digits and '_', not starting with a digit",
        "env-key",
    ),
    c(
        WEB + 'env = { A = "x\\ny" }\n',
        "services.web.env.A: must not contain a newline, carriage return or NUL "
        "(environment values are passed in an env-file)",
        "env-newline",
    ),
    c(
        WEB + "env = { PORT = 8080 }\n",
        # issue 9: an env value may be a secret, so no error echoes it, not even a number
        "services.web.env.PORT: expected a string, got an integer (write it in quotes)",
        "env-value-type",
    ),
    c(
        WEB + "health = { cmd = [] }\n",
        "services.web.health.cmd: must not be empty",
        "health-cmd-empty",
    ),
    c(
        WEB + 'health = { cmd = "wget -q localhost" }\n',
        "services.web.health.cmd: expected an array, got string 'wget -q localhost'",
        "health-cmd-string",
    ),
    c(
        WEB + 'health = { cmd = ["wget", 1] }\n',
        'services.web.health.cmd[1]: expected a string, got integer 1 (write it in quotes: "1")',
        "health-cmd-item",
    ),
    c(
        WEB + 'health = { interval = "2s" }\n',
        "services.web.health: missing required key 'cmd'",
        "health-no-cmd",
    ),
    c(
        WEB + 'desired = "paused"\n',
        "services.web.desired: expected one of 'running', 'stopped', got 'paused'",
        "desired",
    ),
    c(
        WEB + "spread = 3\n",
        'services.web.spread: expected a string, got integer 3 (write it in quotes: "3")',
        "spread-type",
    ),
    # -- the docker run surface (issue 15)
    c(
        WEB + 'labels = { "minidock.spec" = "x" }\n',
        "services.web.labels.\"minidock.spec\": the 'minidock.' label prefix is MiniDock's "
        "own: use another prefix, e.g. 'app.'",
        "label-minidock-prefix",
    ),
    c(
        WEB + 'labels = { "-x" = "y" }\n',
        "services.web.labels: invalid label key '-x': use letters, digits, '_', '.', '/' and "
        "'-', starting with a letter or digit",
        "container-label-key",
    ),
    c(
        WEB + 'labels = { team = "a\\nb" }\n',
        "services.web.labels.team: must not contain a newline, carriage return or NUL",
        "container-label-value",
    ),
    c(
        WEB + 'user = "root user"\n',
        "services.web.user: invalid run user 'root user': use NAME, UID, NAME:GROUP or UID:GID",
        "run-user",
    ),
    c(
        WEB + 'workdir = "app"\n',
        "services.web.workdir: must be an absolute path in the container, starting with '/', "
        "got 'app'",
        "workdir-relative",
    ),
    c(
        WEB + 'entrypoint = "sh -c x"\n',
        "services.web.entrypoint: expected an array, got string 'sh -c x'",
        "entrypoint-string",
    ),
    c(
        WEB + 'stop_signal = "TERM now"\n',
        "services.web.stop_signal: invalid signal 'TERM now': use a signal name like "
        "'SIGTERM', 'SIGQUIT' or 'SIGRTMIN+3', or a number",
        "stop-signal",
    ),
    c(
        WEB + 'stop_grace_period = "10"\n',
        "services.web.stop_grace_period: invalid duration '10': missing unit (ms, s, m or h)",
        "stop-grace-unit",
    ),
    c(WEB + 'init = "yes"\n', "services.web.init: expected a boolean, got string 'yes'", "init"),
    c(
        WEB + 'cap_add = ["net_admin"]\n',
        "services.web.cap_add[0]: invalid capability 'net_admin': use a capability name in "
        "capitals like 'NET_ADMIN', or 'ALL'",
        "cap-add-case",
    ),
    c(
        WEB + 'cap_drop = ["ALL", "ALL"]\n',
        "services.web.cap_drop: 'ALL' is listed twice",
        "cap-drop-twice",
    ),
    c(
        WEB + "ulimits = { nofiles = 1024 }\n",
        "services.web.ulimits: unknown ulimit 'nofiles' (did you mean 'nofile'?)",
        "ulimit-name",
    ),
    c(
        WEB + "ulimits = { nofile = { soft = 2048, hard = 1024 } }\n",
        "services.web.ulimits.nofile: soft limit 2048 is above the hard limit 1024",
        "ulimit-soft-above-hard",
    ),
    c(
        WEB + "ulimits = { nofile = { soft = 1 } }\n",
        "services.web.ulimits.nofile: missing required key 'hard'",
        "ulimit-no-hard",
    ),
    c(
        WEB + 'ulimits = { nproc = "1024" }\n',
        "services.web.ulimits.nproc: expected an integer or a table, got string '1024'",
        "ulimit-type",
    ),
    c(
        WEB + "log = {}\n",
        "services.web.log: {} should be non-empty",
        "log-empty",
    ),
    c(
        WEB + 'log = { driver = "json-file", options = { max-file = 3 } }\n',
        "services.web.log.options.max-file: expected a string, got integer 3 (write it in "
        'quotes: "3")',
        "log-option-type",
    ),
    c(
        WEB + 'extra_hosts = { "db.internal" = "10.0.0.300" }\n',
        "services.web.extra_hosts.\"db.internal\": invalid IP address '10.0.0.300': use an "
        "IPv4 or IPv6 address, or 'host-gateway'",
        "extra-host-address",
    ),
    c(
        WEB + 'extra_hosts = { "bad_name" = "10.0.0.1" }\n',
        "services.web.extra_hosts: invalid hostname 'bad_name': use letters, digits and '-', "
        "in parts separated by '.'",
        "extra-host-name",
    ),
    c(
        WEB + 'dns = ["8.8.8"]\n',
        "services.web.dns[0]: invalid IP address '8.8.8': use an IPv4 or IPv6 address",
        "dns-address",
    ),
    c(
        WEB + 'networks = ["host"]\n',
        "services.web.networks[0]: network 'host' cannot be joined beside the cluster's "
        "network minidock-prod: list user-defined or bridge networks",
        "network-host",
    ),
    c(
        WEB + 'networks = ["minidock-prod"]\n',
        "services.web.networks[0]: every task is on its cluster's network minidock-prod "
        "already: remove it",
        "network-own",
    ),
    c(
        WEB + 'networks = ["back end"]\n',
        "services.web.networks[0]: invalid network name 'back end': use letters, digits, '_', "
        "'.' and '-', starting with a letter or digit",
        "network-name",
    ),
    c(
        WEB + 'image_source = "local"\n',
        "services.web.image_source: expected one of 'registry', 'controller', got 'local'",
        "image-source",
    ),
    # -- registry credentials (issue 15): a password is never written in the spec or shown
    c(
        WEB + '[registries."reg.example:5000"]\n' + 'username = "ci"\npassword = "hunter2"\n',
        'registries."reg.example:5000".password: expected a table with one of file = "path", '
        'env = "NAME", command = [...] or age_file = "path"',
        "registry-password-inline",
    ),
    c(
        WEB
        + '[registries."reg.example:5000"]\n'
        + 'username = "ci"\npassword = { env = "MINIDOCK_TEST_UNSET_PW" }\n',
        'registries."reg.example:5000".password.env: MINIDOCK_TEST_UNSET_PW is not set in the '
        "controller's environment",
        "registry-password-env-unset",
    ),
    c(
        WEB + '[registries."reg.example:5000"]\n' + 'password = { env = "PW" }\n',
        "registries.\"reg.example:5000\": missing required key 'username'",
        "registry-no-username",
    ),
    c(
        WEB + '[registries."http://reg"]\nusername = "ci"\npassword = { env = "PW" }\n',
        "registries: invalid registry 'http://reg': use HOST or HOST:PORT, e.g. "
        "'registry.example:5000', or 'docker.io'",
        "registry-name",
    ),
    c(
        WEB + '[registries."reg.example:5000"]\n' + 'username = "c i"\npassword = { env = "PW" }\n',
        "registries.\"reg.example:5000\".username: invalid registry user 'c i': must be "
        "non-empty, without whitespace or ':', not starting with '-'",
        "registry-user",
    ),
    # -- the inventory the cluster names
    c(
        'cluster = "prod"\ninventory = "missing.toml"\n',
        "inventory: inventory file not found: missing.toml",
        "inventory-not-found",
    ),
    # -- document order: the first problem in the file wins
    c(
        CLUSTER + '[services.a]\nimage = "a"\nreplicas = -1\n[services.b]\nimagee = "b"\n',
        "services.a.replicas: must be at least 0, got -1",
        "first-error-wins",
    ),
    c(
        CLUSTER + '[services.web]\nreplicas = "x"\nimge = "web:5"\n',
        "services.web: unknown key 'imge' (did you mean 'image'?)",
        "unknown-key-before-missing-key",
    ),
    # -- scheduled jobs (docs/jobs.md)
    c(
        WEB + 'schedule = "0 3 * *"\n',
        "services.web.schedule: use five fields (minute hour day-of-month month day-of-week),"
        " e.g. '0 3 * * *'",
        "job-schedule-fields",
    ),
    c(
        WEB + 'schedule = "0 25 * * *"\n',
        "services.web.schedule: '0 25 * * *' is not a cron expression croniter reads,"
        " e.g. '*/15 * * * *'",
        "job-schedule-invalid",
    ),
    c(
        WEB + 'schedule = "0 0 31 2 *"\n',
        "services.web.schedule: '0 0 31 2 *' never fires: no date matches it (a day its months"
        " do not have, like 31 February); give days every month named has, e.g. '0 3 28 2 *'",
        "job-schedule-never-fires",
    ),
    c(
        WEB + 'schedule = "0 0 31 4 *"\ntimezone = "Europe/Paris"\n',
        "services.web.schedule: '0 0 31 4 *' never fires: no date matches it (a day its months"
        " do not have, like 31 February); give days every month named has, e.g. '0 3 28 2 *'",
        "job-schedule-never-fires-in-its-timezone",
    ),
    c(
        WEB + 'schedule = "R 3 * * *"\n',
        "services.web.schedule: 'R 3 * * *' has a random field (R): croniter draws it again at"
        " each reading, so each pass would see other times; give fixed values, e.g. '17 3 * * *'",
        "job-schedule-random",
    ),
    c(
        WEB + 'schedule = "0 3 * * *"\ntimezone = "America"\n',
        "services.web.timezone: unknown timezone 'America': use an IANA name such as"
        " 'UTC' or 'Europe/Paris'",
        "job-timezone-a-directory",
    ),
    c(
        WEB + 'schedule = "0 3 * * *"\ntimezone = "Mars/Olympus"\n',
        "services.web.timezone: unknown timezone 'Mars/Olympus': use an IANA name such as"
        " 'UTC' or 'Europe/Paris'",
        "job-timezone",
    ),
    c(
        WEB + 'schedule = "0 3 * * *"\nreplicas = 2\n',
        "services.web.replicas: a job has no replicas: each scheduled time starts one run",
        "job-replicas",
    ),
    c(
        WEB + 'schedule = "0 3 * * *"\nports = ["8080:8080"]\n',
        "services.web.ports: a job's runs publish no ports: remove ports",
        "job-ports",
    ),
    c(
        WEB + 'concurrency = "allow"\n',
        "services.web.concurrency: concurrency is for scheduled jobs: add schedule or remove it",
        "job-concurrency-without-schedule",
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), BAD)
def test_bad_input_is_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("inventory.toml").write_text(HOST)
    Path(name).write_text(text)
    with pytest.raises(SpecError) as err:
        load_inventory(name) if name == "inventory.toml" else load(name)
    assert str(err.value) == expected
    assert err.value.file == name
    assert expected == f"{name}: {err.value.path}: {err.value.message}".replace(": : ", ": ")


def test_the_inventory_is_the_files_else_the_flag_else_the_environment_else_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.delenv("MINIDOCK_INVENTORY", raising=False)
    for place in ("app/inventory.toml", "app/named.toml", "work/flag.toml", "work/env.toml"):
        (tmp_path / place).write_text(HOST)
    spec = tmp_path / "app" / "cluster.toml"
    spec.write_text('cluster = "prod"\n')
    assert load(spec)[0].inventory_path == str(tmp_path / "app" / "inventory.toml")
    monkeypatch.setenv("MINIDOCK_INVENTORY", "env.toml")  # relative to the working directory
    assert load(spec)[0].inventory_path == str(tmp_path / "work" / "env.toml")
    assert load(spec, "flag.toml")[0].inventory_path == str(tmp_path / "work" / "flag.toml")
    spec.write_text('cluster = "prod"\ninventory = "named.toml"\n')
    assert load(spec, "flag.toml")[0].inventory_path == str(tmp_path / "app" / "named.toml")


def test_a_missing_default_inventory_says_how_to_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINIDOCK_INVENTORY", raising=False)
    Path("cluster.toml").write_text('cluster = "prod"\n')
    with pytest.raises(SpecError) as err:
        load("cluster.toml")
    assert str(err.value) == (
        "cluster.toml: inventory: inventory file not found: inventory.toml (the default, as the "
        "file names no inventory: name one with inventory (x-minidock.inventory in a Compose "
        "file), --inventory FILE or $MINIDOCK_INVENTORY)"
    )
    monkeypatch.setenv("MINIDOCK_INVENTORY", "hosts.toml")
    with pytest.raises(SpecError, match=r"not found: hosts\.toml \(from \$MINIDOCK_INVENTORY\)$"):
        load("cluster.toml")
    with pytest.raises(SpecError, match=r"not found: flag\.toml \(from --inventory\)$"):
        load("cluster.toml", "flag.toml")


def test_the_table_covers_enough_cases() -> None:
    assert len(BAD) >= 20


# -- good input -------------------------------------------------------------------------------
def test_product_examples_parse_into_the_model() -> None:
    cluster, inventory = load(DATA / "playbooks" / "prod.toml")
    home = os.path.expanduser("~")
    assert inventory == Inventory(
        path=str(DATA / "inventory" / "prod.toml"),
        hosts=(
            Host(
                name="host1",
                address="10.0.0.11",
                port=22,
                user="deploy",
                identity_file=f"{home}/.ssh/id_ed25519",
                known_hosts=f"{home}/.ssh/known_hosts",
                connect_timeout=5.0,
                down_after=2,
                labels=(("zone", "a"),),
                cpus=4.0,
                memory=8 << 30,
            ),
        ),
    )
    web = Service(
        name="web",
        image="registry.example:5000/web:5",
        replicas=4,
        command=("httpd", "-f", "-p", "8080"),
        env=(("MODE", "prod"),),
        ports=(PortMapping(8080, 8080, "tcp"),),
        cpus=0.5,
        memory=256 << 20,
        constraints=(Constraint("zone", "!=", "c"),),
        spread="zone",
        depends_on=("db",),
        desired="running",
        health=HealthCheck(
            cmd=("wget", "-qO-", "http://127.0.0.1:8080/"),
            interval=2.0,
            timeout=1.0,
            retries=3,
            start_period=2.0,
        ),
        update=UpdatePolicy(1, 0.0, "stop-first", 5.0, "rollback", 0.0),
        restart=RestartPolicy("on-failure", 1.0, 60.0, 5, 300.0),
    )
    assert cluster == Cluster(
        name="prod",
        path=str(DATA / "playbooks" / "prod.toml"),
        inventory_path=str(DATA / "inventory" / "prod.toml"),
        services=(web, Service(name="db", image="postgres:16")),
    )


def test_repository_examples_load() -> None:
    cluster, inventory = load(REPO / "playbooks" / "example.toml")
    assert [s.name for s in cluster.services] == ["web", "db"]
    assert cluster.service("web") is not None
    assert cluster.service("web").image == "minidock-lab/web:5"  # type: ignore[union-attr]
    assert topo_order(cluster.services) == ["db", "web"]
    assert [h.name for h in inventory.hosts] == ["host1", "host2", "host3"]
    assert [h.port for h in inventory.hosts] == [22, 22, 2222]
    assert inventory.path == str(REPO / "inventory" / "example.toml")


def test_minimal_files_get_the_model_defaults(tmp_path: Path) -> None:
    (tmp_path / "cluster.toml").write_text(WEB)
    (tmp_path / "inventory.toml").write_text(HOST)
    cluster, inventory = load(tmp_path / "cluster.toml")
    assert cluster.services == (Service(name="web", image="web:5"),)
    assert inventory.hosts == (Host(name="host1", address="10.0.0.11"),)


def test_cluster_without_services_is_empty(tmp_path: Path) -> None:
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    assert load_cluster(tmp_path / "cluster.toml").services == ()


def test_defaults_apply_unless_a_host_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", "/home/ops")
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.toml").write_text(
        "[defaults]\n"
        'user = "deploy"\nport = 2200\nidentity_file = "keys/id"\nknown_hosts = "~/.kh"\n'
        'host_key_policy = "accept-new"\nconnect_timeout = 3\ncommand_timeout = "2m"\n'
        "down_after = 4\n"
        '[[hosts]]\nname = "a"\naddress = "a.example"\n'
        '[[hosts]]\nname = "b"\naddress = "b.example"\nuser = "root"\nport = 22\n'
        'identity_file = "/etc/key"\nhost_key_policy = "strict"\nconnect_timeout = "500ms"\n'
        'memory = 1024\nlabels = { zone = "b", "rack.row" = "7" }\n'
    )
    a, b = load_inventory(tmp_path / "inv" / "hosts.toml").hosts
    assert a == Host(
        name="a",
        address="a.example",
        port=2200,
        user="deploy",
        identity_file=str(tmp_path / "inv" / "keys" / "id"),
        known_hosts="/home/ops/.kh",
        host_key_policy="accept-new",
        connect_timeout=3.0,
        command_timeout=120.0,
        down_after=4,
    )
    assert b == Host(
        name="b",
        address="b.example",
        port=22,
        user="root",
        identity_file="/etc/key",
        known_hosts="/home/ops/.kh",
        host_key_policy="strict",
        connect_timeout=0.5,
        command_timeout=120.0,
        down_after=4,
        labels=(("rack.row", "7"), ("zone", "b")),
        memory=1024,
    )


def test_values_are_converted(tmp_path: Path) -> None:
    (tmp_path / "cluster.toml").write_text(
        CLUSTER + '[services.zeta]\nimage = "z"\n'
        '[services.web]\nimage = "localhost:5000/team/web@sha256:' + "a" * 64 + '"\n'
        'env = { ZED = "1", ALPHA = "a=b", EMPTY = "" }\nports = ["53:5353/udp", "80:8080/tcp"]\n'
        'constraints = ["host==host1", "  rack.row   !=  7 "]\nmemory = "1G"\ncpus = 2\n'
        'desired = "stopped"\nreplicas = 0\n'
        'health = { cmd = ["true"] }\nupdate = { monitor = 0.25 }\nrestart = { window = 0 }\n'
    )
    zeta, web = load_cluster(tmp_path / "cluster.toml").services
    assert zeta.name == "zeta"
    assert web.env == (("ALPHA", "a=b"), ("EMPTY", ""), ("ZED", "1"))
    assert web.ports == (PortMapping(53, 5353, "udp"), PortMapping(80, 8080, "tcp"))
    assert web.constraints == (Constraint("host", "==", "host1"), Constraint("rack.row", "!=", "7"))
    assert (web.memory, web.cpus, web.desired, web.replicas) == (1 << 30, 2.0, "stopped", 0)
    assert web.health == HealthCheck(cmd=("true",))
    assert web.update == UpdatePolicy(monitor=0.25)
    assert web.restart == RestartPolicy(window=0.0)


def test_load_cluster_resolves_but_does_not_read_the_inventory(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cluster.toml").write_text(
        'cluster = "prod"\ninventory = "../inventory/none.toml"\n'
    )
    cluster = load_cluster(tmp_path / "c" / "cluster.toml")
    assert cluster.inventory_path == str(tmp_path / "inventory" / "none.toml")
    assert cluster.path == str(tmp_path / "c" / "cluster.toml")


def test_errors_in_the_inventory_name_the_inventory_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for d in ("playbooks", "inventory"):
        (tmp_path / d).mkdir()
    Path("playbooks/prod.toml").write_text(
        'cluster = "prod"\ninventory = "../inventory/prod.toml"\n'
    )
    Path("inventory/prod.toml").write_text(HOST + "down_after = 0\n")
    with pytest.raises(SpecError) as err:
        load("playbooks/prod.toml")
    assert str(err.value) == "inventory/prod.toml: hosts[0].down_after: must be at least 1, got 0"


def test_inventory_that_is_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("inventory.toml").mkdir()
    Path("cluster.toml").write_text(CLUSTER)
    with pytest.raises(SpecError, match=r"^cluster.toml: inventory: inventory is not a file"):
        load("cluster.toml")


def test_file_level_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as err:
        load_cluster("nope.toml")
    assert str(err.value) == "nope.toml: file not found"
    Path("latin1.toml").write_bytes(b'cluster = "caf\xe9"\n')
    with pytest.raises(SpecError) as err:
        load_inventory("latin1.toml")
    assert str(err.value) == "latin1.toml: not UTF-8 text (bad byte at offset 14)"
    Path("dir.toml").mkdir()
    with pytest.raises(SpecError, match=r"^dir.toml: cannot read file: "):
        load_cluster("dir.toml")


def test_toml_errors_carry_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('cluster = "prod"\n\n[services.web\n')
    with pytest.raises(SpecError) as err:
        load_cluster(tmp_path / "c.toml")
    assert (err.value.line, err.value.column, err.value.path) == (3, 14, "")
    assert "line 3, column 14" in str(err.value)


def test_spec_error_is_always_one_line() -> None:
    assert str(SpecError("f.toml", "", "bad")) == "f.toml: bad"
    assert str(SpecError("f.toml", "a.b", "two\nlines")) == "f.toml: a.b: two lines"


def test_key_paths_quote_keys_that_toml_would_quote(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CLUSTER + '[services."web.v2"]\nimage = 5\n')
    with pytest.raises(SpecError) as err:
        load_cluster(tmp_path / "c.toml")
    assert err.value.path == 'services."web.v2".image'


@pytest.mark.parametrize(
    "image",
    [
        "web",
        "web:5",
        "minidock-lab/web:broken",
        "registry.example:5000/web:5",
        "localhost/a/b/c",
        "ghcr.io/org/my_app__x.y-z:v1.2.3-rc_1",
        "[::1]:5000/web",
        "Registry.Example.com/web",
        "web@sha256:" + "0123456789abcdef" * 4,
        "web:5@sha256:" + "0123456789abcdef" * 4,
    ],
)
def test_valid_image_references(tmp_path: Path, image: str) -> None:
    (tmp_path / "c.toml").write_text(CLUSTER + f'[services.web]\nimage = "{image}"\n')
    assert load_cluster(tmp_path / "c.toml").services[0].image == image


@pytest.mark.parametrize(
    "image",
    [
        "",
        "Web",
        "web:",
        "web:-5",
        "web::5",
        "-web",
        "web-",
        "web/",
        "/web",
        "a//b",
        "web@sha256:abc",
        "web:5 ",
        "web:5\\n",
        "registry:port/web",
        "web:" + "x" * 129,
    ],
)
def test_invalid_image_references(tmp_path: Path, image: str) -> None:
    (tmp_path / "c.toml").write_text(CLUSTER + f'[services.web]\nimage = "{image}"\n')
    with pytest.raises(SpecError) as err:
        load_cluster(tmp_path / "c.toml")
    assert err.value.path == "services.web.image"
    assert err.value.message.startswith("invalid image reference")


# -- topo_order -------------------------------------------------------------------------------
def svc(name: str, *deps: str) -> Service:
    return Service(name=name, image="x", depends_on=deps)


def test_topo_order_puts_dependencies_first_and_keeps_file_order_otherwise() -> None:
    services = [
        svc("web", "api"),
        svc("api", "db", "cache"),
        svc("worker"),
        svc("db"),
        svc("cache"),
    ]
    assert topo_order(services) == ["worker", "db", "cache", "api", "web"]
    assert topo_order([svc("a"), svc("b"), svc("c")]) == ["a", "b", "c"]
    assert topo_order([svc("b", "gone"), svc("a")]) == ["b", "a"]
    assert topo_order([]) == []


def test_topo_order_raises_on_a_cycle() -> None:
    with pytest.raises(CycleError):
        topo_order([svc("a", "b"), svc("b", "a")])


# -- the schemas ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["inventory", "cluster"])
def test_schemas_ship_as_package_data_and_are_valid(kind: str) -> None:
    text = (resources.files("minidock") / "schemas" / f"{kind}.schema.json").read_text("utf-8")
    schema = json.loads(text)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"

    def objects(node: object) -> list[dict[str, object]]:
        if isinstance(node, dict):
            own = [node] if node.get("type") == "object" else []
            return own + [o for v in node.values() for o in objects(v)]
        if isinstance(node, list):
            return [o for v in node for o in objects(v)]
        return []

    for obj in objects(schema):
        assert "additionalProperties" in obj, obj.get("description")
        if "properties" in obj:
            assert obj["additionalProperties"] is False


@pytest.mark.parametrize("kind", ["inventory", "cluster"])
def test_schema_unit_patterns_are_the_parsers_patterns(kind: str) -> None:
    text = (resources.files("minidock") / "schemas" / f"{kind}.schema.json").read_text("utf-8")
    defs = json.loads(text)["$defs"]
    assert defs["duration"]["pattern"] == units.DURATION_PATTERN
    assert defs["size"]["pattern"] == units.SIZE_PATTERN


def test_the_schemas_most_replicas_is_the_models() -> None:
    """`replicas` at most MAX_REPLICAS: each pass builds a service's slot range whole."""
    text = (resources.files("minidock") / "schemas" / "cluster.schema.json").read_text("utf-8")
    replicas = json.loads(text)["$defs"]["service"]["properties"]["replicas"]
    assert replicas["maximum"] == MAX_REPLICAS == 1000
    assert "1000" in replicas["description"]


# -- probe_timeout and the private key's permissions --------------------------------------------
def test_probe_timeout_defaults_to_3s_and_hosts_may_override(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text(
        '[defaults]\nprobe_timeout = "2s"\n' + HOST + 'probe_timeout = "750ms"\n'
        '[[hosts]]\nname = "host2"\naddress = "10.0.0.12"\n'
    )
    one, two = load_inventory(tmp_path / "inventory.toml").hosts
    assert (one.probe_timeout, two.probe_timeout) == (0.75, 2.0)
    (tmp_path / "inventory.toml").write_text(HOST)
    assert load_inventory(tmp_path / "inventory.toml").hosts[0].probe_timeout == 3.0


def private_key(path: Path, mode: int) -> Path:
    path.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o700 | 0o040])
def test_a_private_key_open_to_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    key = private_key(tmp_path / "id_ed25519", mode)
    (tmp_path / "inventory.toml").write_text(
        '[defaults]\nidentity_file = "id_ed25519"\n'
        + HOST
        + '[[hosts]]\nname = "b"\naddress = "b"\n'
    )
    with pytest.raises(SpecError) as err:
        load_inventory(tmp_path / "inventory.toml")
    assert err.value.path == "defaults.identity_file"
    assert str(err.value) == (
        f"{tmp_path / 'inventory.toml'}: defaults.identity_file: private key {key} is "
        f"accessible by group or others (mode {mode:04o}): run chmod 600 {key}"
    )


def test_a_host_key_file_is_checked_where_the_host_names_it(tmp_path: Path) -> None:
    private_key(tmp_path / "good", 0o600)
    loose = private_key(tmp_path / "loose", 0o644)
    (tmp_path / "inventory.toml").write_text(
        '[defaults]\nidentity_file = "good"\n'
        + HOST
        + '[[hosts]]\nname = "b"\naddress = "b"\nidentity_file = "loose"\n'
    )
    with pytest.raises(SpecError, match=rf"hosts\[1\]\.identity_file: private key {loose} is"):
        load_inventory(tmp_path / "inventory.toml")
    loose.chmod(0o400)
    hosts = load_inventory(tmp_path / "inventory.toml").hosts
    assert [h.identity_file for h in hosts] == [str(tmp_path / "good"), str(loose)]


def test_a_missing_key_is_left_to_the_connection(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text('[defaults]\nidentity_file = "nope"\n' + HOST)
    (host,) = load_inventory(tmp_path / "inventory.toml").hosts
    assert host.identity_file == str(tmp_path / "nope")  # Unreachable names it per host


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('"./data:/data"', "invalid volume './data:/data': a host path must be absolute"),
        ('"data/x:/data"', "invalid volume 'data/x:/data': a host path must be absolute"),
        ('"/srv/../etc:/data"', "'/srv/../etc' must be an absolute path without '..'"),
        ('"pg:data"', "'data' must be an absolute path without '..'"),
        ('"pg:/data/../x"', "'/data/../x' must be an absolute path without '..'"),
        ('"pg:/data:rx"', "invalid volume 'pg:/data:rx': use 'NAME:/container/path'"),
        ('"pg:/d", "/srv:/d"', "volumes[1]: /d is already mounted by volumes[0]"),
    ],
)
def test_bad_volumes_name_the_entry_and_the_fix(tmp_path: Path, line: str, expected: str) -> None:
    (tmp_path / "inventory.toml").write_text(HOST)
    (tmp_path / "cluster.toml").write_text(WEB + f"volumes = [{line}]\n")
    with pytest.raises(SpecError) as err:
        load(tmp_path / "cluster.toml")
    assert expected in str(err.value)
    assert "services.web.volumes" in str(err.value)


def test_volumes_load_named_and_bind() -> None:
    from minidock.model import Volume

    assert Volume("pgdata", "/var/lib/pg").named
    assert not Volume("/srv/conf", "/etc/app", read_only=True).named
