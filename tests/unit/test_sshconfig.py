"""The SSH config as it applies to inventory hosts (minidock.sshconfig through the inventory
loader): which value wins (the inventory's, as ssh's command line wins over its config),
alias-only hosts, ProxyJump chains, the agent, and every refusal as one line.

Every config here is a file the test writes; no test reads the real ~/.ssh/config
(tests/conftest.py sets $MINIDOCK_SSH_CONFIG to "none" for the session)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minidock.cli import app
from minidock.model import Host, Jump
from minidock.spec import SpecError, load_inventory
from minidock.ssh import connect_options
from minidock.sshconfig import CONFIG_ENV
from minidock.store import codec

BASTION = """
Host bastion
    HostName 192.0.2.10
    Port 2222
    User jump
"""


def inventory(tmp_path: Path, hosts: str, defaults: str = "", config: str | None = "") -> Path:
    """An inventory in tmp_path reading `config` (an ssh config's text) as its ssh_config;
    config=None names no ssh_config in the inventory."""
    head = f"[defaults]\n{defaults}"
    if config is not None:
        path = tmp_path / "ssh_config"
        path.write_text(config)
        path.chmod(0o600)
        head += 'ssh_config = "ssh_config"\n'
    target = tmp_path / "inventory.toml"
    target.write_text(head + "\n" + hosts)
    return target


def only_host(path: Path) -> Host:
    (host,) = load_inventory(path).hosts
    return host


def error(path: Path) -> str:
    with pytest.raises(SpecError) as caught:
        load_inventory(path)
    return str(caught.value)


# -- aliases: the inventory may name only a Host alias ----------------------------------------
def test_a_host_named_only_by_alias_takes_everything_from_the_config(tmp_path: Path) -> None:
    config = (
        BASTION
        + """
Host web1
    HostName 10.0.0.11
    User deploy
    Port 2200
    IdentityFile ~/.ssh/web_key
    ProxyJump bastion
"""
    )
    host = only_host(inventory(tmp_path, '[[hosts]]\nname = "web1"\n', config=config))
    assert (host.name, host.address, host.user, host.port) == ("web1", "10.0.0.11", "deploy", 2200)
    assert host.identity_file is None
    assert host.identity_files == (os.path.expanduser("~/.ssh/web_key"),)
    assert host.proxy_jump == (Jump(address="192.0.2.10", port=2222, user="jump"),)


def test_the_address_is_the_alias_looked_up(tmp_path: Path) -> None:
    config = "Host db-primary\n    HostName 10.0.0.5\n    User postgres\n"
    path = inventory(tmp_path, '[[hosts]]\nname = "db"\naddress = "db-primary"\n', config=config)
    host = only_host(path)
    assert (host.name, host.address, host.user) == ("db", "10.0.0.5", "postgres")


def test_without_a_config_entry_the_name_is_the_address_and_defaults_apply(
    tmp_path: Path,
) -> None:
    host = only_host(inventory(tmp_path, '[[hosts]]\nname = "web1"\n', config=None))
    assert host == Host(name="web1", address="web1")


def test_tokens_and_patterns_work_as_in_openssh(tmp_path: Path) -> None:
    config = "Host web*\n    HostName %h.internal\n    IdentityFile ~/keys/%h.key\n"
    hosts = '[[hosts]]\nname = "web1"\n[[hosts]]\nname = "web2"\n'
    found = load_inventory(inventory(tmp_path, hosts, config=config)).hosts
    assert [h.address for h in found] == ["web1.internal", "web2.internal"]
    assert found[1].identity_files == (os.path.expanduser("~/keys/web2.internal.key"),)


# -- which value wins ------------------------------------------------------------------------
CONFIG_FOR_ALL = """
Host h
    ProxyJump bastion
Host *
    User config-user
    Port 2222
    IdentityFile ~/.ssh/config_key
    UserKnownHostsFile ~/.ssh/config_known_hosts
    StrictHostKeyChecking accept-new
    ConnectTimeout 9
"""


def test_the_config_fills_in_what_the_inventory_leaves_out(tmp_path: Path) -> None:
    host = only_host(inventory(tmp_path, '[[hosts]]\nname = "h"\n', config=CONFIG_FOR_ALL))
    assert (host.user, host.port, host.connect_timeout) == ("config-user", 2222, 9.0)
    assert host.known_hosts == os.path.expanduser("~/.ssh/config_known_hosts")
    assert host.host_key_policy == "accept-new"
    assert [j.address for j in host.proxy_jump] == ["bastion"]


@pytest.mark.parametrize("where", ["defaults", "host"])
def test_inventory_values_win_over_the_config(tmp_path: Path, where: str) -> None:
    values = (
        'user = "deploy"\nport = 22\nidentity_file = "key"\nknown_hosts = "kh"\n'
        'host_key_policy = "strict"\nconnect_timeout = "3s"\nproxy_jump = "none"\n'
    )
    hosts = '[[hosts]]\nname = "h"\n' + (values if where == "host" else "")
    defaults = values if where == "defaults" else ""
    host = only_host(inventory(tmp_path, hosts, defaults, config=CONFIG_FOR_ALL))
    assert (host.user, host.port, host.connect_timeout) == ("deploy", 22, 3.0)
    assert (host.identity_file, host.identity_files) == (str(tmp_path / "key"), ())
    assert host.known_hosts == str(tmp_path / "kh")
    assert (host.host_key_policy, host.proxy_jump) == ("strict", ())


def test_match_sees_the_inventory_user_as_ssh_sees_dash_l(tmp_path: Path) -> None:
    config = "Match user deploy\n    Port 2200\nHost *\n    Port 2300\n"
    hosts = '[[hosts]]\nname = "a"\nuser = "deploy"\n[[hosts]]\nname = "b"\n'
    a, b = load_inventory(inventory(tmp_path, hosts, config=config)).hosts
    assert (a.port, b.port) == (2200, 2300)


def test_first_value_obtained_wins_within_the_config(tmp_path: Path) -> None:
    config = "Host web1\n    User first\nHost *\n    User second\n    Port 2200\n"
    host = only_host(inventory(tmp_path, '[[hosts]]\nname = "web1"\n', config=config))
    assert (host.user, host.port) == ("first", 2200)


# -- which file ------------------------------------------------------------------------------
def test_default_files_are_openssh_s_unless_the_env_or_inventory_names_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host *\n    User from-home\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(CONFIG_ENV)
    path = inventory(tmp_path, '[[hosts]]\nname = "h"\n', config=None)
    assert only_host(path).user == "from-home"
    other = tmp_path / "other_config"
    other.write_text("Host *\n    User from-env\n")
    monkeypatch.setenv(CONFIG_ENV, str(other))
    assert only_host(path).user == "from-env"
    monkeypatch.setenv(CONFIG_ENV, "none")
    assert only_host(path).user == "root"
    path = inventory(tmp_path, '[[hosts]]\nname = "h"\n', config="Host *\n    User from-inv\n")
    assert only_host(path).user == "from-inv"  # the inventory's ssh_config wins over the env


def test_ssh_config_none_in_the_inventory_reads_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other_config"
    other.write_text("Host *\n    User from-env\n")
    monkeypatch.setenv(CONFIG_ENV, str(other))
    path = inventory(tmp_path, '[[hosts]]\nname = "h"\nssh_config = "none"\n', config=None)
    assert only_host(path).user == "root"


# -- jump hosts ------------------------------------------------------------------------------
def test_each_jump_host_is_looked_up_under_its_own_alias(tmp_path: Path) -> None:
    config = (
        BASTION
        + """
Host inner
    HostName 10.1.0.1
    IdentityFile ~/.ssh/inner_key
    ProxyJump bastion
Host web1
    ProxyJump inner,ops@edge:2022
"""
    )
    host = only_host(inventory(tmp_path, '[[hosts]]\nname = "web1"\n', config=config))
    assert host.proxy_jump == (
        Jump(address="192.0.2.10", port=2222, user="jump"),  # inner's own ProxyJump first
        Jump(
            address="10.1.0.1",
            user="root",
            identity_files=(os.path.expanduser("~/.ssh/inner_key"),),
        ),
        Jump(address="edge", port=2022, user="ops"),  # user@ and :port win over the config
    )


def test_jump_hosts_verify_against_the_inventory_s_known_hosts_and_key(tmp_path: Path) -> None:
    defaults = 'known_hosts = "kh"\nidentity_file = "key"\nhost_key_policy = "accept-new"\n'
    hosts = '[[hosts]]\nname = "web1"\nproxy_jump = "bastion"\n'
    (jump,) = only_host(inventory(tmp_path, hosts, defaults, config=BASTION)).proxy_jump
    assert jump.known_hosts == str(tmp_path / "kh")
    assert jump.host_key_policy == "accept-new"
    assert jump.identity_files == (str(tmp_path / "key"),)


def test_a_jump_host_s_config_identity_file_comes_before_the_inventory_key(
    tmp_path: Path,
) -> None:
    config = BASTION + "    IdentityFile ~/.ssh/jump_key\n"
    hosts = '[[hosts]]\nname = "web1"\nidentity_file = "key"\nproxy_jump = "bastion"\n'
    (jump,) = only_host(inventory(tmp_path, hosts, config=config)).proxy_jump
    assert jump.identity_files == (os.path.expanduser("~/.ssh/jump_key"),)


def test_proxy_jump_forms(tmp_path: Path) -> None:
    hosts = '[[hosts]]\nname = "a"\nproxy_jump = "ssh://u@[2001:db8::1]:2201"\n'
    (jump,) = only_host(inventory(tmp_path, hosts, config=None)).proxy_jump
    assert (jump.user, jump.address, jump.port) == ("u", "2001:db8::1", 2201)


# -- the agent and keys ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "agent"),
    [
        ("", None),
        ("IdentityAgent SSH_AUTH_SOCK", None),
        ("IdentityAgent none", "none"),
        ("IdentityAgent ~/agent.sock", os.path.expanduser("~/agent.sock")),
        ("IdentityAgent $OTHER_AGENT", "/run/other.sock"),
    ],
)
def test_identity_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, agent: str | None
) -> None:
    monkeypatch.setenv("OTHER_AGENT", "/run/other.sock")
    host = only_host(inventory(tmp_path, '[[hosts]]\nname = "h"\n', config=f"Host h\n {line}\n"))
    assert host.identity_agent == agent


def test_connect_options_offer_keys_as_openssh_does(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("not read here")
    (tmp_path / "id.pub").write_text("public")
    inventory_key = connect_options(Host("h", "a", identity_file=str(key)))
    assert (inventory_key["client_keys"], inventory_key["agent_path"]) == ([str(key)], None)
    missing = str(tmp_path / "missing")
    config_keys = connect_options(Host("h", "a", identity_files=(str(key), missing)))
    assert (config_keys["client_keys"], config_keys["agent_path"]) == ([str(key)], ())
    assert connect_options(Host("h", "a"))["client_keys"] == ()  # the default keys
    assert connect_options(Host("h", "a", identity_agent="none"))["agent_path"] is None
    assert connect_options(Host("h", "a", identity_agent="/s"))["agent_path"] == "/s"
    only = connect_options(Host("h", "a", identity_files=(str(key),), identities_only=True))
    assert only["agent_identities"] == [f"{key}.pub"]
    assert all(options["config"] == [] for options in (inventory_key, config_keys, only))


# -- refusals: one line, naming the file and the fix -----------------------------------------
@pytest.mark.parametrize(
    ("config", "hosts", "expected"),
    [
        (
            "Host *\n    ProxyCommand nc %h %p\n",
            '[[hosts]]\nname = "h"\n',
            "hosts[0]: the ssh config sets ProxyCommand for h, which MiniDock does not run: "
            "use ProxyJump (or proxy_jump in the inventory)",
        ),
        (
            "Host a\n    ProxyJump b\nHost b\n    ProxyJump a\n",
            '[[hosts]]\nname = "a"\n',
            "hosts[0]: ProxyJump to a goes through more than 8 jump hosts "
            "(a ProxyJump loop in the ssh config?)",
        ),
        (
            "Host *\n    UserKnownHostsFile none\n",
            '[[hosts]]\nname = "h"\n',
            "hosts[0]: ssh config for h: UserKnownHostsFile none would leave host keys "
            "unverified, which MiniDock never does: name a file",
        ),
        (
            "Host *\n    StrictHostKeyChecking maybe\n",
            '[[hosts]]\nname = "h"\n',
            "hosts[0]: ssh config for h: StrictHostKeyChecking 'maybe' is not one of "
            "yes, accept-new, no, ask",
        ),
        (
            "Host *\n    Port many\n",
            '[[hosts]]\nname = "h"\n',
            "hosts[0]: ssh config for h: {config} line 2: Invalid Port integer value: many",
        ),
        (
            "Host h\n    ProxyJump web:x\n",
            '[[hosts]]\nname = "h"\n',
            "hosts[0]: invalid ProxyJump hop 'web:x' on the way to h: "
            "use [user@]host[:port], comma-separated",
        ),
    ],
    ids=["proxy-command", "loop", "known-hosts-none", "strict-value", "parse", "hop"],
)
def test_config_refusals(tmp_path: Path, config: str, hosts: str, expected: str) -> None:
    path = inventory(tmp_path, hosts, config=config)
    shown = expected.format(config=tmp_path / "ssh_config")
    assert error(path) == f"{path}: {shown}"


def test_an_explicit_proxy_jump_overrides_a_config_proxy_command(tmp_path: Path) -> None:
    config = "Host *\n    ProxyCommand nc %h %p\n"
    host = only_host(
        inventory(tmp_path, '[[hosts]]\nname = "h"\nproxy_jump = "none"\n', "", config)
    )
    assert host.proxy_jump == ()


def test_inventory_refusals_name_the_key(tmp_path: Path) -> None:
    path = inventory(tmp_path, '[[hosts]]\nname = "h"\nproxy_jump = "a:b"\n', config=None)
    assert error(path) == (
        f"{path}: hosts[0].proxy_jump: invalid ProxyJump hop 'a:b': "
        "use [user@]host[:port], comma-separated"
    )
    path = inventory(tmp_path, '[[hosts]]\nname = "h"\nproxy_jump = "a b"\n', config=None)
    assert error(path) == (
        f"{path}: hosts[0].proxy_jump: invalid proxy_jump 'a b': "
        "use [user@]host[:port], comma-separated, or 'none'"
    )
    path = inventory(tmp_path, '[[hosts]]\nname = "h"\n', 'ssh_config = "nope"\n', config=None)
    assert error(path) == f"{path}: defaults.ssh_config: ssh config file {tmp_path}/nope not found"


def test_the_env_s_config_file_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "nope"))
    path = inventory(tmp_path, '[[hosts]]\nname = "h"\n', config=None)
    assert error(path) == f"{path}: $MINIDOCK_SSH_CONFIG: ssh config file {tmp_path}/nope not found"


def test_a_config_others_may_write_is_refused_as_openssh_does(tmp_path: Path) -> None:
    path = inventory(tmp_path, '[[hosts]]\nname = "h"\n', config="Host *\n    User x\n")
    (tmp_path / "ssh_config").chmod(0o664)
    assert error(path) == (
        f"{path}: defaults.ssh_config: bad owner or permissions on ssh config file "
        f"{tmp_path}/ssh_config (OpenSSH refuses it too): run chmod go-w {tmp_path}/ssh_config"
    )


def test_an_unprotected_key_named_by_the_config_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "loose_key"
    key.write_text("k")
    key.chmod(0o644)
    path = inventory(tmp_path, '[[hosts]]\nname = "h"\n', config=f"Host *\n IdentityFile {key}\n")
    assert error(path) == (
        f"{path}: hosts[0]: ssh config for h: IdentityFile private key {key} is accessible by "
        f"group or others (mode 0644): run chmod 600 {key}"
    )


def test_validate_reports_a_config_error_as_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    inventory(tmp_path, '[[hosts]]\nname = "h"\n', config="Host *\n    ProxyCommand nc %h %p\n")
    result = CliRunner().invoke(app, ["validate", "inventory.toml"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "minidock: inventory.toml: hosts[0]: the ssh config sets ProxyCommand for h, which "
        "MiniDock does not run: use ProxyJump (or proxy_jump in the inventory)"
    ]


def test_a_resolved_route_survives_the_state_store_and_old_state_still_loads() -> None:
    host = Host(
        "web1",
        "10.0.0.11",
        identity_files=("/k",),
        identities_only=True,
        identity_agent="none",
        proxy_jump=(Jump("192.0.2.10", 2222, "jump", identity_files=("/j",)),),
    )
    assert codec.loads(codec.dumps(host), Host) == host
    before = {"name": "web1", "address": "10.0.0.11", "port": 22, "user": "root"}
    assert codec.from_data(before, Host) == Host("web1", "10.0.0.11")
