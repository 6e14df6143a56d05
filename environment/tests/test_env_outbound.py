"""The guard of requests to trainers' URLs (environment.outbound), at a run's creation and at
each webhook delivery.

Loopback forms are tried for real against a listener on loopback that must receive nothing.
Every other non-public range (private, link-local, metadata, multicast, reserved, mapped) is
tested through the guard's decision alone (``outbound_check`` with a stub resolver, which opens
no connection), so that no test connects outside loopback even with a broken guard.
"""

import json
import socket
import threading
import time

import pytest
from django.test import Client

from arena.tests.cli import settings_start_refusal
from arena.tokens import token_create
from environment import outbound
from environment.models import EnvRun
from environment.outbound import (
    MAX_RESPONSE_BYTES,
    OutboundFailed,
    OutboundRefused,
    OutboundUnresolved,
    address_refusal,
    outbound_check,
    outbound_post,
    url_shown,
)
from environment.tests.env_helpers import make_run, submit
from environment.tests.outbound_helpers import LOOPBACK_ALLOWED, StubResolver, listening
from environment.tests.webhook_receiver import WebhookReceiver
from environment.webhook import WebhookFailed, webhook_deliver

BASE = "/api/env/v1"
PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
HOOK_HOST = "hooks.trainer.example"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


# Each loopback form of the same listener: (URL template, the listener's address).
LOOPBACK_FORMS = [
    pytest.param("http://127.0.0.1:{port}/hook", "127.0.0.1", id="ipv4"),
    pytest.param("http://localhost:{port}/hook", "127.0.0.1", id="localhost"),
    pytest.param("http://0.0.0.0:{port}/hook", "127.0.0.1", id="unspecified"),
    pytest.param(
        "http://[::1]:{port}/hook",
        "::1",
        id="ipv6",
        marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback"),
    ),
    pytest.param("http://[::ffff:127.0.0.1]:{port}/hook", "127.0.0.1", id="ipv4-mapped"),
    pytest.param("http://user:pw@127.0.0.1:{port}/hook", "127.0.0.1", id="userinfo"),
    pytest.param(f"http://{HOOK_HOST}:{{port}}/hook", "127.0.0.1", id="name-to-loopback"),
]


@pytest.fixture
def dns(monkeypatch):
    """The resolver the guard uses: HOOK_HOST resolves to loopback unless a test changes it."""
    resolver = StubResolver({"localhost": ["127.0.0.1", "::1"], HOOK_HOST: ["127.0.0.1"]})
    monkeypatch.setattr(outbound, "resolve_host", resolver)
    return resolver


@pytest.fixture
def http_allowed(settings):
    # Plain http on: a refusal below is the address's or the userinfo's, never the scheme's.
    settings.ARENA_ENV_WEBHOOK_ALLOW_HTTP = True


@pytest.fixture
def loopback_allowed(settings):
    for name, value in LOOPBACK_ALLOWED.items():
        setattr(settings, name, value)


@pytest.fixture
def trainer(db):
    _, raw = token_create(name="trainer", scopes=["env"])
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    return client


def _create(client, webhook_url):
    return client.post(
        f"{BASE}/runs",
        json.dumps({"name": "grpo", "webhook_url": webhook_url}),
        content_type="application/json",
    )


# --- at creation ---------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("template", "host"), LOOPBACK_FORMS)
def test_a_loopback_webhook_url_is_refused_at_creation_and_nothing_connects(
    trainer, dns, http_allowed, template, host
):
    with listening(host) as listener:
        response = _create(trainer, template.format(port=listener.port))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid", "webhook_url")
    assert "webhook_url is refused" in error["message"]
    assert not EnvRun.objects.exists()
    assert listener.connections == 0


@pytest.mark.django_db
def test_a_webhook_host_that_does_not_resolve_is_refused_at_creation(trainer, dns):
    response = _create(trainer, "https://no-such-host.trainer.example/hook")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == "webhook_url" and "does not resolve" in error["message"]


@pytest.mark.django_db
def test_plain_http_is_refused_unless_the_operator_allows_it(trainer, dns, settings):
    dns.names[HOOK_HOST] = [PUBLIC_V4]
    response = _create(trainer, f"http://{HOOK_HOST}/hook")
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "webhook_url"
    assert "https" in response.json()["error"]["message"]
    settings.ARENA_ENV_WEBHOOK_ALLOW_HTTP = True
    assert _create(trainer, f"http://{HOOK_HOST}/hook").status_code == 201


@pytest.mark.django_db
def test_a_public_https_webhook_url_is_accepted_without_connecting(trainer, dns):
    dns.names[HOOK_HOST] = [PUBLIC_V4, PUBLIC_V6]
    response = _create(trainer, f"https://{HOOK_HOST}/hook?run=1")
    assert response.status_code == 201, response.content
    assert response.json()["webhook_url"] == f"https://{HOOK_HOST}/hook?run=1"
    assert response.json()["webhook_delivery"] == {
        "status": "none",
        "error": None,
        "attempted_at": None,
    }


# --- at delivery ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_name_that_turns_to_loopback_after_creation_is_refused_at_delivery(
    trainer, dns, http_allowed
):
    with listening() as listener:
        dns.names[HOOK_HOST] = [PUBLIC_V4]
        response = _create(trainer, f"http://{HOOK_HOST}:{listener.port}/hook")
        assert response.status_code == 201, response.content
        run = EnvRun.objects.get(pk=response.json()["id"])
        submit(run, ["a"])
        dns.names[HOOK_HOST] = ["127.0.0.1"]  # the DNS answer changes (rebinding)
        with pytest.raises(WebhookFailed, match="refused"):
            webhook_deliver(run_id=run.pk)
    assert listener.connections == 0
    run.refresh_from_db()
    assert run.webhook_seq == 0
    assert run.webhook_status == EnvRun.WebhookStatus.REFUSED
    assert "loopback" in run.webhook_error
    shown = trainer.get(f"{BASE}/runs/{run.pk}").json()["webhook_delivery"]
    assert shown["status"] == "refused" and "loopback" in shown["error"]
    assert shown["attempted_at"] is not None


@pytest.mark.django_db
@pytest.mark.parametrize(("template", "host"), LOOPBACK_FORMS)
def test_a_stored_loopback_webhook_url_is_refused_at_delivery_and_nothing_connects(
    dns, http_allowed, template, host
):
    run = make_run()
    submit(run, ["a"])
    with listening(host) as listener:
        # A run stored before the guard (or by a hand in the database).
        EnvRun.objects.filter(pk=run.pk).update(webhook_url=template.format(port=listener.port))
        with pytest.raises(WebhookFailed):
            webhook_deliver(run_id=run.pk)
    assert listener.connections == 0
    run.refresh_from_db()
    assert run.webhook_status == EnvRun.WebhookStatus.REFUSED and run.webhook_seq == 0


@pytest.mark.django_db
def test_an_allow_listed_loopback_receiver_gets_a_signed_delivery_through_the_guard(
    loopback_allowed,
):
    with WebhookReceiver() as receiver:
        run = make_run(webhook_url=receiver.url)
        submit(run, ["a", "b"])
        assert webhook_deliver(run_id=run.pk) == 2
    [delivery] = receiver.deliveries
    assert delivery.signed_by(run.webhook_secret)
    run.refresh_from_db()
    assert run.webhook_status == EnvRun.WebhookStatus.DELIVERED and run.webhook_error == ""


@pytest.mark.django_db
def test_a_redirect_is_not_followed(loopback_allowed):
    with WebhookReceiver() as target, WebhookReceiver() as receiver:
        receiver.statuses = [302]
        receiver.answer_headers = {"Location": target.url}
        run = make_run(webhook_url=receiver.url)
        submit(run, ["a"])
        with pytest.raises(WebhookFailed, match="302"):
            webhook_deliver(run_id=run.pk)
    assert len(receiver.deliveries) == 1
    assert target.deliveries == []
    run.refresh_from_db()
    assert run.webhook_status == EnvRun.WebhookStatus.FAILED
    assert "redirects are not followed" in run.webhook_error


# --- the client itself -------------------------------------------------------------------


def test_the_answer_read_is_bounded(loopback_allowed):
    with WebhookReceiver() as receiver:
        receiver.answer_body = b"x" * (4 * 1024 * 1024)
        response = outbound_post(receiver.url, body=b"{}", headers={})
    assert response.status == 200
    assert len(response.body) == MAX_RESPONSE_BYTES


class _Dripper:
    """A loopback server that answers a status line, then one header line every 50 ms, forever:
    each read arrives in time, the answer never ends."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while not self.stop.is_set():
                conn.sendall(b"X-Drip: 1\r\n")
                time.sleep(0.05)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def test_a_receiver_that_never_finishes_its_answer_is_cut_off(loopback_allowed, settings):
    settings.ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS = 0.5
    dripper = _Dripper()
    try:
        with pytest.raises(OutboundFailed, match="no answer within 0.5 seconds"):
            outbound_post(f"http://127.0.0.1:{dripper.port}/hook", body=b"{}", headers={})
    finally:
        dripper.close()


def test_the_connection_goes_to_the_address_checked_not_a_second_lookup(settings, monkeypatch):
    settings.ARENA_ENV_WEBHOOK_ALLOW_HTTP = True
    settings.ARENA_ENV_WEBHOOK_ALLOW_HOSTS = ["hooks.internal"]
    answers = [["127.0.0.1"], ["127.0.0.2"]]
    asked = []

    def rebinding(host, port):
        asked.append(host)
        return answers[min(len(asked), 2) - 1]

    monkeypatch.setattr(outbound, "resolve_host", rebinding)
    with WebhookReceiver() as receiver:
        port = receiver.server.server_address[1]
        response = outbound_post(f"http://hooks.internal:{port}/hook", body=b"{}", headers={})
    assert response.status == 200
    assert asked == ["hooks.internal"]  # resolved once; the socket went to that answer
    assert receiver.deliveries[0].headers["host"] == f"hooks.internal:{port}"


# --- the decision alone (no connection) -----------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("10.1.2.3", "private"),
        ("172.16.5.4", "private"),
        ("172.31.255.254", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("100.64.0.1", "not publicly routable"),
        ("192.0.2.1", "not publicly routable"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("127.0.0.2", "loopback"),
        ("::1", "loopback"),
        ("::ffff:10.0.0.1", "embeds an IPv4"),
        ("::ffff:169.254.169.254", "embeds an IPv4"),
        ("::ffff:8.8.8.8", "embeds an IPv4"),
        ("::10.0.0.1", "embeds an IPv4"),
        ("::127.0.0.1", "embeds an IPv4"),
        ("2002:a00:1::1", "embeds an IPv4"),
        ("2002:7f00:1::1", "embeds an IPv4"),
        ("64:ff9b::a00:1", "embeds an IPv4"),
        ("64:ff9b::7f00:1", "embeds an IPv4"),
        ("64:ff9b:1::a00:1", "embeds an IPv4"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "embeds an IPv4"),
    ],
)
def test_a_non_public_address_is_refused_by_the_decision(settings, address, kind):
    settings.ARENA_ENV_WEBHOOK_ALLOW_HOSTS = []
    refusal = address_refusal(address)
    assert refusal is not None and kind in refusal
    resolver = StubResolver({HOOK_HOST: [address]})
    with pytest.raises(OutboundRefused, match=kind):
        outbound_check(f"https://{HOOK_HOST}/hook", resolve=resolver)


def test_one_refused_address_among_public_ones_refuses_the_host():
    resolver = StubResolver({HOOK_HOST: [PUBLIC_V4, PUBLIC_V6, "10.0.0.7"]})
    with pytest.raises(OutboundRefused, match=r"resolves to 10\.0\.0\.7, a private address"):
        outbound_check(f"https://{HOOK_HOST}/hook", resolve=resolver)


def test_public_addresses_are_allowed_by_the_decision():
    resolver = StubResolver({HOOK_HOST: [PUBLIC_V4, PUBLIC_V6]})
    destination = outbound_check(f"https://{HOOK_HOST}:8443/hook?x=1", resolve=resolver)
    assert destination.addresses == (PUBLIC_V4, PUBLIC_V6)
    assert (destination.scheme, destination.host, destination.port) == ("https", HOOK_HOST, 8443)
    assert destination.target == "/hook?x=1"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://user:pw@hooks.trainer.example/hook", "user name or password"),
        ("https://user@hooks.trainer.example/hook", "user name or password"),
        ("http://hooks.trainer.example/hook", "must be https"),
        ("ftp://hooks.trainer.example/hook", "must be https"),
        ("https:///hook", "no host"),
        ("https://hooks.trainer.example:99999/", "port"),
        ("https://hooks.trainer.example/a b", "whitespace"),
        ("https://hooks.trainer.example/\r\nX-Injected: 1", "whitespace or control"),
        ("not a url", "whitespace"),
        ("https://[::1/hook", "not a valid URL"),
        ("https://exa$mple.com/hook", "not a valid host name"),
    ],
)
def test_a_url_outside_the_guard_is_refused_before_any_lookup(url, reason):
    resolver = StubResolver({HOOK_HOST: [PUBLIC_V4]})
    with pytest.raises(OutboundRefused, match=reason):
        outbound_check(url, resolve=resolver)
    assert resolver.asked == []


def test_an_allowed_network_admits_its_addresses_only(settings):
    settings.ARENA_ENV_WEBHOOK_ALLOW_HOSTS = ["127.0.0.1/32", "10.20.0.0/16"]
    assert address_refusal("127.0.0.1") is None
    assert address_refusal("10.20.3.4") is None
    assert address_refusal("127.0.0.2") is not None
    assert address_refusal("10.21.0.1") is not None
    assert address_refusal("::ffff:127.0.0.1") is not None  # the mapped form is not the network


def test_an_allowed_host_name_admits_whatever_it_resolves_to(settings):
    settings.ARENA_ENV_WEBHOOK_ALLOW_HOSTS = ["trainer.internal"]
    resolver = StubResolver({"trainer.internal": ["10.0.0.5"], HOOK_HOST: ["10.0.0.5"]})
    assert outbound_check("https://trainer.internal/hook", resolve=resolver).addresses == (
        "10.0.0.5",
    )
    with pytest.raises(OutboundRefused):
        outbound_check(f"https://{HOOK_HOST}/hook", resolve=resolver)


def test_a_host_that_does_not_resolve_is_unresolved_not_refused():
    with pytest.raises(OutboundUnresolved, match="does not resolve"):
        outbound_check(f"https://{HOOK_HOST}/hook", resolve=StubResolver())


def test_userinfo_is_masked_wherever_a_url_is_shown():
    assert url_shown("https://user:pw@hooks.example/x") == "https://***@hooks.example/x"
    assert url_shown("https://hooks.example/x") == "https://hooks.example/x"
    assert url_shown("https://u:p@[::1/x") == "https://***@::1/x"


@pytest.mark.django_db
def test_a_stored_url_with_userinfo_is_masked_in_the_run_and_the_admin(trainer, admin_client):
    run = EnvRun.objects.get(pk=_create(trainer, "").json()["id"])
    EnvRun.objects.filter(pk=run.pk).update(webhook_url="http://user:pw@127.0.0.1:9/hook")
    shown = trainer.get(f"{BASE}/runs/{run.pk}").json()
    assert shown["webhook_url"] == "http://***@127.0.0.1:9/hook"
    page = admin_client.get(f"/admin/environment/envrun/{run.pk}/change/").content.decode()
    assert "***@127.0.0.1:9/hook" in page
    assert "user:pw" not in page and "pw@" not in page


# --- settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS", "0"),
        ("ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS", "600"),
        ("ARENA_ENV_MAX_OPEN_RUNS", "-1"),
        ("ARENA_ENV_RUNS_PER_HOUR", "-5"),
        ("ARENA_ENV_WEBHOOK_ALLOW_HOSTS", "not a host/99"),
    ],
)
def test_a_setting_out_of_range_refuses_to_start_naming_it(name, value):
    settings_start_refusal(name, value)
