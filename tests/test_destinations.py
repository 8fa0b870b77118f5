"""Destinations: recipient domains grouped by mailbox provider, through the static table of big
consumer domains and MX records asked of a real DNS server on loopback (tests/dns_server.py)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from growth.audience import destinations
from growth.audience.addresses import parse_address
from growth.audience.destinations import classify_recipient_domains
from growth.managers.destinations import MAIL_DOMAINS, Classification
from growth.models import Campaign, Destination, MailDomain, Subscriber
from tests.dns_server import DnsServer
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory
from tests.helpers import concurrently

WEEK = timedelta(days=7)
HOUR = timedelta(hours=1)


@pytest.fixture
def dns_server(settings):
    """Start a DNS server with the given records and point DESTINATIONS_DNS at it."""
    servers = []

    def start(mx: dict | None = None, **kwargs) -> DnsServer:
        server = DnsServer(mx, **kwargs).start()
        servers.append(server)
        settings.DESTINATIONS_DNS = server.address
        settings.DESTINATIONS_DNS_TIMEOUT = 0.3
        settings.DESTINATIONS_RESOLVE_SECONDS = 30.0
        return server

    yield start
    for server in servers:
        server.stop()


def campaign_to(*emails: str, account=None, status: str = "confirmed") -> Campaign:
    """A campaign of a tenant whose subscribers are ``emails`` (status ``status``)."""
    campaign = CampaignFactory(account=account or AccountFactory())
    segment = SegmentFactory(account=campaign.account)
    rows = []
    for email in emails:
        address = parse_address(email)
        rows.append(Subscriber(account=campaign.account, segment=segment, email=address.email,
                               email_lower=address.email_lower, status=status))
    Subscriber.objects.bulk_create(rows)
    return campaign


def classified() -> dict[str, tuple[str, str]]:
    """{domain: (destination, source)} of every cached domain."""
    return {row.domain: (row.destination.name, row.source)
            for row in MailDomain.objects.select_related("destination")}


def lifetime(domain: str) -> timedelta:
    row = MailDomain.objects.get(domain=domain)
    return row.expires_at - row.resolved_at


@pytest.mark.django_db
def test_mx_records_name_the_provider_and_consumer_domains_need_no_lookup(dns_server):
    server = dns_server({
        "acme-corp.example": [(5, "alt1.aspmx.l.google.com"), (1, "aspmx.l.google.com")],
        "contoso.example": [(0, "contoso-example.mail.protection.outlook.com")],
        "hosted.example": [(10, "mx1.example-hosting.net"), (20, "mx2.example-hosting.net")],
        "shop.example": [(10, "mx.hoster.co.uk")],
        "bank.example": [(10, "eu-smtp-inbound-1.mimecast.com")],
    })
    campaign = campaign_to("ann@acme-corp.example", "bob@contoso.example", "cy@hosted.example",
                           "di@shop.example", "ed@bank.example", "fay@gmail.com")

    assert classify_recipient_domains(campaign_id=campaign.id) == 6

    assert classified() == {
        "acme-corp.example": ("google", "mx"),
        "contoso.example": ("microsoft", "mx"),
        "hosted.example": ("example-hosting.net", "mx"),
        "shop.example": ("hoster.co.uk", "mx"),
        "bank.example": ("mimecast", "mx"),
        "gmail.com": ("google", "static"),
    }
    assert "gmail.com" not in server.asked()
    assert MailDomain.objects.get(domain="acme-corp.example").mx_hosts == (
        "aspmx.l.google.com alt1.aspmx.l.google.com")  # in preference order
    assert lifetime("acme-corp.example") == lifetime("gmail.com") == WEEK
    # gmail.com and the Workspace domain are one destination
    assert Destination.objects.filter(name="google").count() == 1


@pytest.mark.django_db
def test_with_dns_off_the_static_table_decides_and_the_rest_is_unresolved():
    campaign = campaign_to("a@gmail.com", "b@hotmail.fr", "c@yahoo.co.uk", "d@web.de",
                           "e@wanadoo.fr", "f@me.com", "g@outlook.example.org")

    assert classify_recipient_domains(campaign_id=campaign.id) == 7

    assert classified() == {
        "gmail.com": ("google", "static"),
        "hotmail.fr": ("microsoft", "static"),
        "yahoo.co.uk": ("yahoo", "static"),
        "web.de": ("united-internet", "static"),
        "wanadoo.fr": ("orange.fr", "static"),
        "me.com": ("apple", "static"),
        "outlook.example.org": ("outlook.example.org", "unresolved"),  # no family match
    }
    assert lifetime("outlook.example.org") == HOUR


@pytest.mark.django_db
def test_a_domain_without_mx_takes_mail_at_its_own_name(dns_server):
    dns_server({"bare.example": []})  # exists, no MX; typo.example does not exist
    campaign = campaign_to("a@bare.example", "b@typo.example")

    classify_recipient_domains(campaign_id=campaign.id)

    assert classified() == {"bare.example": ("bare.example", "mx"),
                            "typo.example": ("typo.example", "mx")}
    assert lifetime("typo.example") == WEEK


@pytest.mark.django_db
def test_a_dead_dns_server_is_given_up_after_the_first_lookups_and_remembered(dns_server):
    server = dns_server(silent=True)
    domains = [f"d{n}.example" for n in range(60)]
    campaign = campaign_to(*(f"x@{domain}" for domain in domains))

    assert classify_recipient_domains(campaign_id=campaign.id) == 60

    assert set(classified().values()) == {(d, "unresolved") for d in domains}
    assert all(lifetime(domain) == HOUR for domain in domains[:3])
    asked = len(server.asked())
    # the lookups started before the verdict, no more: not one per domain
    assert 0 < asked <= destinations.LOOKUP_THREADS + destinations.DOWN_AFTER_FAILURES
    # the next build, a minute later, asks nothing at all
    other = campaign_to("y@other.example", "z@another.example")
    assert classify_recipient_domains(campaign_id=other.id) == 2
    assert len(server.asked()) == asked
    assert classified()["other.example"] == ("other.example", "unresolved")


@pytest.mark.django_db
def test_a_failing_domain_is_unresolved_without_taking_the_dns_for_dead(dns_server):
    server = dns_server({f"ok{n}.example": [(10, "mx.example-hosting.net")] for n in range(5)},
                        servfail={"broken.example"})
    campaign = campaign_to("a@broken.example", *(f"x@ok{n}.example" for n in range(5)))

    classify_recipient_domains(campaign_id=campaign.id)

    assert classified()["broken.example"] == ("broken.example", "unresolved")
    assert classified()["ok0.example"] == ("example-hosting.net", "mx")
    later = campaign_to("b@ok9.example")
    classify_recipient_domains(campaign_id=later.id)
    assert "ok9.example" in server.asked()


@pytest.mark.django_db
def test_an_exhausted_time_budget_asks_nothing_more(dns_server, settings):
    server = dns_server({"fine.example": [(10, "aspmx.l.google.com")]})
    settings.DESTINATIONS_RESOLVE_SECONDS = 0
    campaign = campaign_to("a@fine.example", "b@gmail.com")

    assert classify_recipient_domains(campaign_id=campaign.id) == 2

    assert server.asked() == []
    assert classified() == {"fine.example": ("fine.example", "unresolved"),
                            "gmail.com": ("google", "static")}


@pytest.mark.django_db
def test_the_cache_is_used_until_it_expires(dns_server):
    server = dns_server({"moving.example": [(10, "mx.old-host.net")]})
    campaign = campaign_to("a@moving.example")
    assert classify_recipient_domains(campaign_id=campaign.id) == 1

    assert classify_recipient_domains(campaign_id=campaign.id) == 0
    assert server.asked() == ["moving.example"]

    server.mx["moving.example"] = [(10, "aspmx.l.google.com")]
    MailDomain.objects.filter(domain="moving.example").update(
        expires_at=timezone.now() - timedelta(hours=1))
    assert classify_recipient_domains(campaign_id=campaign.id) == 1
    assert server.asked() == ["moving.example", "moving.example"]
    assert classified() == {"moving.example": ("google", "mx")}


@pytest.mark.django_db
def test_two_tenants_with_the_same_domain_share_its_classification(dns_server):
    server = dns_server({"shared.example": [(10, "aspmx.l.google.com")],
                         "own.example": [(10, "mx.own.example")]})
    first = campaign_to("a@shared.example")
    second = campaign_to("b@shared.example", "c@own.example")

    assert classify_recipient_domains(campaign_id=first.id) == 1
    assert classify_recipient_domains(campaign_id=second.id) == 1  # own.example only

    assert server.asked() == ["shared.example", "own.example"]
    assert classified() == {"shared.example": ("google", "mx"),
                            "own.example": ("own.example", "mx")}


@pytest.mark.django_db
def test_the_most_frequent_domains_first_within_the_limit_confirmed_only(settings):
    settings.DESTINATIONS_RESOLVE_PER_BUILD = 2
    campaign = campaign_to("a@three.example", "b@three.example", "c@three.example",
                           "a@two.example", "b@two.example", "a@one.example")
    campaign_to("a@pending.example", "b@pending.example", "c@pending.example", "d@pending.example",
                account=campaign.account, status="pending")
    campaign_to("a@elsewhere.example", "b@elsewhere.example", "c@elsewhere.example",
                "d@elsewhere.example")

    assert classify_recipient_domains(campaign_id=campaign.id) == 2
    assert set(classified()) == {"three.example", "two.example"}
    assert classify_recipient_domains(campaign_id=campaign.id) == 1
    assert classify_recipient_domains(campaign_id=campaign.id) == 0
    assert set(classified()) == {"three.example", "two.example", "one.example"}


HOSTILE = {  # the domain as an address could carry it, had it bypassed parse_address
    "EXAMPLE-Upper.COM.": ("example-upper.com", "mx"),
    "bücher.example": ("example-hosting.net", "mx"),  # asked as xn--bcher-kva.example
    "a" * 70 + ".example": ("a" * 70 + ".example", "unresolved"),  # a label over 63
    "exa mple.example": ("exa mple.example", "unresolved"),
    "..": ("..", "unresolved"),
}


@pytest.mark.django_db
def test_hostile_domains_neither_crash_nor_reach_the_dns_unnormalised(dns_server):
    server = dns_server({"example-upper.com": [],
                         "xn--bcher-kva.example": [(10, "mx.example-hosting.net")]})
    too_long = ".".join(["b" * 60] * 5)  # 304 characters: no DNS name, no row
    campaign = campaign_to(*(f"x{n}@placeholder{n}.example" for n in range(len(HOSTILE) + 1)))
    subscribers = Subscriber.objects.filter(account=campaign.account).order_by("id")
    for subscriber, domain in zip(subscribers, [*HOSTILE, too_long], strict=True):
        Subscriber.objects.filter(id=subscriber.id).update(email_lower=f"x@{domain}")

    assert classify_recipient_domains(campaign_id=campaign.id) == len(HOSTILE)

    # keyed as the build's join reads them; named and asked in their normal form
    assert classified() == HOSTILE
    assert sorted(server.asked()) == ["example-upper.com", "xn--bcher-kva.example"]
    assert classify_recipient_domains(campaign_id=campaign.id) == 0  # nothing left to redo


@pytest.mark.parametrize(("hosts", "provider"), [
    (["gmail-smtp-in.l.google.com"], "google"),
    (["smtp.google.com"], "google"),
    (["mta5.am0.yahoodns.net"], "yahoo"),
    (["mx01.mail.icloud.com"], "apple"),
    (["mx0a-001.pphosted.com"], "proofpoint"),
    (["mx.example.com.au"], "example.com.au"),
    (["mail.example.org", "aspmx.l.google.com"], "example.org"),  # the primary decides
    ([""], "self.example"),  # a null MX (RFC 7505)
    ([], "self.example"),
])
def test_mx_hosts_name_their_provider(hosts, provider):
    assert destinations.mx_provider(hosts, domain="self.example") == provider


@pytest.mark.django_db(transaction=True)
def test_workers_recording_overlapping_batches_at_once_agree():
    domains = [f"d{n}.example" for n in range(40)]

    def record(worker: int) -> int:
        batch = [Classification(d, f"provider{n % 5}", "mx", 3600.0) for n, d in enumerate(domains)]
        random.Random(worker).shuffle(batch)
        return MAIL_DOMAINS.record(batch)

    assert concurrently(6, record) == [40] * 6
    assert Destination.objects.count() == 5
    assert MailDomain.objects.count() == 40
