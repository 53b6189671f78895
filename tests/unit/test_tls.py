"""TLS on the ingress with certificates brought as files (docs/ingress.md#tls): what loads,
each error's one line, the proxies' HTTPS config and redirect, and the key sealed at rest
and masked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from minidock.commands.caddy import (
    Certificate,
    RouteSpec,
    parse_proxy_probe,
    proxy_config,
    proxy_run_argv,
)
from minidock.model import (
    LETS_ENCRYPT,
    AcmeSettings,
    Ingress,
    Route,
    RouteTls,
    Service,
    secret_values,
)
from minidock.spec import SpecError, load
from minidock.spec.certs import certificate_info, name_covers
from minidock.store.codec import Codec
from minidock.store.sealing import SecretBox
from tests.caddyview import front
from tests.tlsfiles import PrivateCA, write_pair
from tests.unit.test_spec_ingress import HEAD, INVENTORY, WEB

CA = PrivateCA()


def loaded(tmp_path: Path, body: str) -> object:
    (tmp_path / "inventory.toml").write_text(INVENTORY)
    path = tmp_path / "cluster.toml"
    path.write_text(HEAD + body)
    return load(path)[0]


def route(host: str = "app.test", extra: str = "") -> str:
    return (
        WEB + f'ingress = {{ host = "{host}", port = 8080, '
        'tls = { cert = { file = "app.crt" }, key = { file = "app.key" } } }\n' + extra
    )


def test_brought_files_load_as_the_routes_tls(tmp_path: Path) -> None:
    chain, key = CA.leaf("app.test", "www.app.test")
    write_pair(tmp_path, chain, key)
    cluster = loaded(tmp_path, route())
    (web,) = cluster.services  # type: ignore[attr-defined]
    assert web.ingress == (Route("app.test", "/", 8080, RouteTls("files", chain, key)),)
    assert key.strip() in secret_values(web)  # masked like a secret (and line by line)
    assert "BEGIN" not in repr(web.ingress)  # neither is shown
    info = certificate_info(chain)
    assert (info.names, info.issuer) == (("app.test", "www.app.test"), "MiniDock Test CA")


def test_a_wildcard_certificate_covers_one_label() -> None:
    assert name_covers("*.app.test", "a.app.test")
    assert not name_covers("*.app.test", "a.b.app.test")
    assert not name_covers("*.app.test", "app.test")
    assert name_covers("*.app.test", "*.app.test")
    assert name_covers("App.Test", "app.test")


def bad_cases(tmp_path: Path) -> list[tuple[str, str]]:
    chain, key = CA.leaf("app.test")
    write_pair(tmp_path, chain, key)
    other_chain, other_key = CA.leaf("other.test")
    write_pair(tmp_path, other_chain, other_key, "other")
    old_chain, old_key = CA.leaf("app.test", days=2, past=True)
    write_pair(tmp_path, old_chain, old_key, "old")
    (tmp_path / "open.key").write_text(key)
    os.chmod(tmp_path / "open.key", 0o644)
    (tmp_path / "junk.crt").write_text("not a certificate\n")
    at = "services.web.ingress.tls"
    return [
        (route("other.test"), f"{at}.cert: is for app.test, not other.test: bring a "
         "certificate for the route's host"),
        (route().replace("app.key", "other.key"),
         f"{at}.key: is not the key of the certificate (its first one, the leaf)"),
        (route().replace("app.crt", "old.crt").replace("app.key", "old.key"),
         f"{at}.cert: expired on "),
        (route().replace("app.key", "open.key"),
         f"{at}.key.file: {tmp_path}/open.key is readable or writable by others: chmod 600 "
         f"{tmp_path}/open.key"),
        (route().replace("app.crt", "junk.crt"),
         f"{at}.cert: holds no PEM certificate (BEGIN CERTIFICATE)"),
        (route().replace("app.crt", "none.crt"), f"{at}.cert.file: file not found: "
         f"{tmp_path}/none.crt"),
        (route().replace('host = "app.test", ', ""),
         f'{at}: a TLS route needs a host: give the route host = "app.example.com"'),
        (route(extra='[services.api]\nimage = "api:1"\nports = ["9001:9000"]\n'
               'ingress = { host = "app.test", path = "/api", port = 9000 }\n'),
         "services.api.ingress: host app.test has routes with different tls (services web "
         "and api): give every route of a host the same tls"),
        (WEB + 'ingress = { host = "*.app.test", port = 8080, tls = "acme" }\n',
         f"{at}: ACME's HTTP-01 challenge cannot issue the wildcard *.app.test: name the "
         "hosts, or bring a wildcard certificate as files"),
        ('[ingress.acme]\nca_root = { file = "junk.crt" }\n' + route(),
         "ingress.acme.ca_root.file: holds no PEM certificate (BEGIN CERTIFICATE)"),
    ]  # fmt: skip


def test_bad_certificate_files_are_one_line_naming_the_key(tmp_path: Path) -> None:
    for body, expected in bad_cases(tmp_path):
        with pytest.raises(SpecError) as err:
            loaded(tmp_path, body)
        line = str(err.value)
        assert line.startswith(f"{tmp_path}/cluster.toml: {expected}"), line
        assert "\n" not in line
        assert "PRIVATE KEY" not in line


def test_tls_routes_get_an_https_server_their_certificates_and_a_redirect() -> None:
    chain, key = CA.leaf("app.test")
    routes = [
        RouteSpec("app.test", "/", ("10.0.0.1:30000",), tls=True),
        RouteSpec("plain.test", "/", ("10.0.0.2:30000",)),
    ]
    config = proxy_config(routes, Ingress(https_port=8443), [Certificate(chain, key)])
    body = json.loads(config.text)
    plain, secure = front(body), front(body, "minidock-https")
    assert (plain["listen"], secure["listen"]) == ([":80"], [":8443"])
    redirect = plain["routes"][0]["handle"][0]
    assert redirect["status_code"] == 308
    assert redirect["headers"]["Location"] == ["https://{http.request.host}:8443{http.request.uri}"]
    assert plain["routes"][1]["handle"][0]["handler"] == "reverse_proxy"  # tls off: served
    assert [r["match"][0]["host"] for r in secure["routes"][:-1]] == [["app.test"]]
    assert secure["tls_connection_policies"] == [{}]
    assert body["apps"]["tls"]["certificates"]["load_pem"] == [{"certificate": chain, "key": key}]
    seen = parse_proxy_probe("host1", f"running {''}\n{config.text}")
    assert seen.digest == config.digest
    assert seen.upstreams == {"10.0.0.1:30000", "10.0.0.2:30000"}  # the HTTPS server's too
    off = json.loads(proxy_config(routes[1:], Ingress()).text)
    assert "minidock-https" not in off["apps"]["http"]["servers"]
    assert "tls" not in off["apps"]
    argv = proxy_run_argv("prod", Ingress(https_port=8443))
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--publish"] == ["80:80", "8443:8443"]
    other = proxy_config(routes, Ingress(https_port=8443), [Certificate(*CA.leaf("app.test"))])
    assert other.digest != config.digest  # a new certificate is a new config: loaded


def test_the_https_server_speaks_http2_only_when_the_ingress_says_so() -> None:
    """HTTP/1.1 by default: a config load refuses an HTTP/2 request crossing it on a new
    connection (docs/ingress.md#http2-and-config-loads); never HTTP/3, whose UDP port is
    not published."""
    routes = [RouteSpec("app.test", "/", ("10.0.0.1:30000",), tls=True)]
    certificate = [Certificate(*CA.leaf("app.test"))]
    plain = json.loads(proxy_config(routes, Ingress(), certificate).text)
    on = json.loads(proxy_config(routes, Ingress(http2=True), certificate).text)
    assert front(plain, "minidock-https")["protocols"] == ["h1"]
    assert front(on, "minidock-https")["protocols"] == ["h1", "h2"]
    assert front(plain)["protocols"] == front(on)["protocols"] == ["h1"]


def test_a_routes_key_is_sealed_at_rest_and_opens_again() -> None:
    chain, key = CA.leaf("app.test")
    tls = RouteTls("files", chain, key)
    service = Service("web", "web:5", ingress=(Route("app.test", "/", 8080, tls),))
    codec = Codec(SecretBox(Path("secrets.key"), os.urandom(32)))
    text = codec.dumps(service)
    assert "PRIVATE KEY" not in text
    assert key not in text
    assert chain.splitlines()[1] in text  # the certificate is not secret
    assert codec.loads(text, Service) == service


def test_acme_routes_get_the_ingress_acme_settings_with_defaults(tmp_path: Path) -> None:
    acme_route = WEB + 'ingress = { host = "app.test", port = 8080, tls = "acme" }\n'
    cluster = loaded(tmp_path, acme_route)
    assert cluster.ingress.acme == AcmeSettings()  # type: ignore[attr-defined]
    assert AcmeSettings().directory == LETS_ENCRYPT
    assert cluster.services[0].ingress[0].tls == RouteTls("acme")  # type: ignore[attr-defined]
    (tmp_path / "root.pem").write_text(CA.root_pem)
    given = (
        '[ingress.acme]\nemail = "ops@example.test"\ndirectory = "https://ca.test/dir"\n'
        'ca_root = { file = "root.pem" }\nrenew_before = "48h"\n'
    )
    cluster = loaded(tmp_path, given + acme_route)
    assert cluster.ingress.acme == AcmeSettings(  # type: ignore[attr-defined]
        "ops@example.test", "https://ca.test/dir", CA.root_pem, 48 * 3600.0
    )


def test_an_acme_route_is_plain_http_until_its_certificate_is_issued() -> None:
    from minidock.commands.proxies import configs_for
    from minidock.core.routes import RouteEntry
    from minidock.core.tls import TlsState, issued

    table = (RouteEntry(Route("app.test", "/", 8080, RouteTls("acme")), "web", ("10.0.0.1:1",)),)
    challenge = {"/.well-known/acme-challenge/TOKEN": "TOKEN.THUMB"}
    before = json.loads(configs_for(table, Ingress(), TlsState(), challenge).text)
    plain = front(before)["routes"]
    assert plain[0] == {
        "match": [{"path": ["/.well-known/acme-challenge/TOKEN"]}],
        "handle": [{"handler": "static_response", "status_code": 200, "body": "TOKEN.THUMB"}],
        "terminal": True,
    }  # the challenge's response first, on any host
    assert plain[1]["handle"][0]["handler"] == "reverse_proxy"  # no certificate: served
    assert "minidock-https" not in before["apps"]["http"]["servers"]
    chain, key = CA.leaf("app.test")
    tls = issued(
        TlsState(), "app.test", chain, key, issuer="CA", not_after=1e10, directory="d", now=0
    )
    after = json.loads(configs_for(table, Ingress(), tls).text)
    assert (
        after["apps"]["http"]["servers"]["minidock"]["routes"][0]["handle"][0]["status_code"] == 308
    )
    assert after["apps"]["tls"]["certificates"]["load_pem"] == [{"certificate": chain, "key": key}]


def test_status_and_metrics_show_each_tls_names_certificate() -> None:
    from minidock.core.routes import RouteEntry
    from minidock.core.tls import TlsState, failed, issued
    from minidock.documents.status import StatusDocument, certificates
    from minidock.metrics import _document, _Families

    chain, key = CA.leaf("files.test")
    acme_chain, acme_key = CA.leaf("acme.test")
    table = (
        RouteEntry(Route("files.test", "/", 8080, RouteTls("files", chain, key)), "web"),
        RouteEntry(Route("acme.test", "/", 8080, RouteTls("acme")), "web"),
        RouteEntry(Route("new.test", "/", 8080, RouteTls("acme")), "web"),
    )
    tls = issued(
        TlsState(),
        "acme.test",
        acme_chain,
        acme_key,
        issuer="CA",
        not_after=9e9,
        directory="d",
        now=0,
    )
    tls = failed(tls, "new.test", "the CA refused", now=100.0)
    found = {c.name: c for c in certificates(table, tls, renew_before=10.0)}
    assert (found["files.test"].source, found["files.test"].issuer) == ("files", CA.name)
    assert (found["acme.test"].names, found["acme.test"].renews_at) == (("acme.test",), 9e9 - 10)
    new = found["new.test"]
    assert (new.not_after, new.error, new.failures, new.next_try) == (0, "the CA refused", 1, 400.0)
    out = _Families()
    document = StatusDocument(
        "prod", 1, True, "", "", (), (), (), (), (), (), certificates=tuple(found.values())
    )
    _document(out, "prod", document)
    family = out.made["minidock_certificate_expiry_timestamp_seconds"]
    series = {s.labels["host"]: s.value for s in family.samples}
    assert series == {"acme.test": 9e9, "files.test": found["files.test"].not_after}
