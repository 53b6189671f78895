"""Host ports held outside the cluster: the probe's argvs and parsers, on recorded outputs
(tests/data/host/, see its README for what held which port when they were recorded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from minidock.commands.facts import (
    ParseError,
    parse_proc_net,
    parse_published_ports,
    ports_held_outside,
    proc_net_argv,
    proc_net_missing_only,
    published_ports_argv,
)

DATA = Path(__file__).parent.parent / "data" / "host"
TCP = (DATA / "proc-net-tcp.txt").read_text()
UDP = (DATA / "proc-net-udp.txt").read_text()
PUBLISHED = (DATA / "published.txt").read_text()


def test_argvs_are_plain_reads() -> None:
    assert proc_net_argv("tcp") == ["cat", "/proc/net/tcp", "/proc/net/tcp6"]
    assert proc_net_argv("udp") == ["cat", "/proc/net/udp", "/proc/net/udp6"]
    assert published_ports_argv() == [
        "docker",
        "ps",
        "--no-trunc",
        "--format",
        '{{.Label "minidock.cluster"}}\t{{.Ports}}',
    ]


def test_recorded_tcp_table_gives_the_listening_ports_only() -> None:
    # IPv4: sshd, docker-proxy for 18080-18082 and 19000-19001, the embedded DNS on
    # 127.0.0.11; IPv6: the host-network httpd and sshd. The TIME_WAIT row holds nothing.
    assert parse_proc_net(TCP, "tcp") == {
        f"{p}/tcp" for p in (22, 18080, 18081, 18082, 19000, 19001, 36477, 17070)
    }


def test_recorded_udp_table_gives_every_bound_port() -> None:
    assert parse_proc_net(UDP, "udp") == {"15353/udp", "15454/udp", "58778/udp"}


def test_tcp_rows_not_in_listen_are_skipped() -> None:
    established = "   0: 0100007F:1F90 0100007F:D2C4 01 00000000:00000000 00:00000000 00000000 0\n"
    assert parse_proc_net(established, "tcp") == frozenset()
    assert parse_proc_net(established, "udp") == {"8080/udp"}  # a connected UDP socket


def test_unexpected_proc_net_line_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match=r"/proc/net/tcp printed an unexpected line"):
        parse_proc_net("<html>proxy error</html>\n", "tcp")


def test_missing_ipv6_tables_are_tolerated_and_nothing_else() -> None:
    assert proc_net_missing_only("cat: /proc/net/tcp6: No such file or directory\n")
    assert proc_net_missing_only("cat: /proc/net/udp6: No such file or directory\n")
    assert not proc_net_missing_only("cat: /proc/net/tcp: Permission denied\n")
    assert not proc_net_missing_only("")


def test_recorded_published_ports_per_container() -> None:
    assert parse_published_ports(PUBLISHED) == [
        ("", frozenset()),  # the host-network container: nothing published
        ("", frozenset()),  # 7000/tcp and 8080/tcp exposed, not published
        ("other", frozenset({"18082/tcp"})),
        ("rec", frozenset({"18080/tcp"})),
        ("", frozenset({"15353/udp", "18081/tcp", "19000/tcp", "19001/tcp"})),
    ]


def test_published_ranges_and_ipv6_bindings() -> None:
    line = "\t0.0.0.0:8000-8002->8000-8002/tcp, [::]:8000-8002->8000-8002/tcp, :::53->53/udp\n"
    assert parse_published_ports(line) == [
        ("", frozenset({"8000/tcp", "8001/tcp", "8002/tcp", "53/udp"}))
    ]
    assert parse_published_ports("web\t127.0.0.1:5000->5000/tcp\n") == [
        ("web", frozenset({"5000/tcp"}))
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [("no tab here", "without a tab"), ("\t0.0.0.0:x->80/tcp", "unknown port")],
)
def test_unexpected_docker_ps_line_is_a_parse_error(line: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_published_ports(line)


def test_recorded_ports_held_outside_the_rec_cluster() -> None:
    listening = parse_proc_net(TCP, "tcp") | parse_proc_net(UDP, "udp")
    held = ports_held_outside("rec", listening, parse_published_ports(PUBLISHED))
    # every listener and every other container's port, minus rec's own 18080/tcp
    assert held == {
        *(f"{p}/tcp" for p in (22, 17070, 18081, 18082, 19000, 19001, 36477)),
        *(f"{p}/udp" for p in (15353, 15454, 58778)),
    }
    # for the other cluster, rec's container is the foreign one
    other = ports_held_outside("other", listening, parse_published_ports(PUBLISHED))
    assert "18080/tcp" in other
    assert "18082/tcp" not in other


def test_a_port_that_another_container_also_publishes_stays_held() -> None:
    published = [("rec", frozenset({"8080/tcp"})), ("", frozenset({"8080/tcp"}))]
    assert ports_held_outside("rec", {"8080/tcp"}, published) == {"8080/tcp"}


def test_a_published_port_without_a_listener_is_still_held() -> None:
    # with docker's userland proxy off, a published port has no listening socket
    assert ports_held_outside("rec", set(), [("", frozenset({"9000/tcp"}))]) == {"9000/tcp"}
