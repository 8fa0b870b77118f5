"""A tenant sends only from a domain it proved its own in DNS (or the platform's): a member who
edits the account's From is refused another tenant's domain, an outside one and its own before
it is verified; "Verify in DNS" reads the key from a real DNS server on loopback."""

from __future__ import annotations

import base64
import html
import re

import nacl.signing
import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from growth.models import Account, SendingDomain
from growth.sending import dkim
from tests.dns_server import DnsServer
from tests.factories import UserFactory
from tests.helpers import texts
from tests.scenarios import operator
from tests.test_dkim import ED25519_KEY

pytestmark = pytest.mark.django_db

OTHER_KEY = base64.b64encode(bytes(nacl.signing.SigningKey.generate())).decode()


def record_of(key: str) -> str:
    return dkim.dns_record(dkim.load_private_key(key, dkim.ED25519), dkim.ED25519)


def sending_domain(account, domain: str, *, verified: bool = True, selector: str = "zy1",
                   key: str = ED25519_KEY) -> SendingDomain:
    return SendingDomain.objects.create(
        account=account, domain=domain, selector=selector, algorithm=dkim.ED25519,
        private_key=dkim.load_private_key(key, dkim.ED25519),
        verified_at=timezone.now() if verified else None)


def account_form(account: Account, **changes) -> dict:
    return {"name": account.name, "slug": account.slug, "from_email": account.from_email,
            "from_name": account.from_name, "time_zone": account.time_zone,
            "warmup_started_on": "", "warmup_daily_start": "500", "warmup_daily_growth": "1.5",
            "warmup_until": "100000", "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0", "seen_version": account.version, **changes}


def set_sender(client, account: Account, address: str):
    return client.post(reverse("admin:growth_account_change", args=[account.pk]),
                       account_form(account, from_email=address))


def page_text(response) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())).split())


def sender_of(account: Account) -> str:
    account.refresh_from_db()
    return account.from_email


@pytest.fixture
def dns_server(settings):
    server = DnsServer().start()
    settings.DELIVERABILITY_DNS = server.address
    settings.DELIVERABILITY_DNS_TIMEOUT = 0.3
    yield server
    server.stop()


@pytest.fixture
def platform(settings):
    settings.DKIM_DOMAIN = "growth.example"
    settings.BOUNCE_DOMAIN = "bounces.growth.example"


@pytest.fixture
def member(staff):
    """An editor of ``tenant`` (every model permission), logged in on ``client``."""
    return staff


@pytest.fixture
def superuser_client():
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


# --- the rule, where a tenant's member sets the From -----------------------------------------


def test_a_member_is_refused_another_tenants_verified_domain(client, member, tenant, other_tenant,
                                                             dns_server):
    sending_domain(other_tenant, "globex.example")

    response = set_sender(client, tenant, "ceo@globex.example")

    assert response.status_code == 200
    body = page_text(response)
    assert "globex.example is not one of this account's verified sending domains" in body
    assert "Globex" not in body.replace("globex.example", "")  # nothing said of the other tenant
    assert sender_of(tenant) != "ceo@globex.example"


def test_a_member_is_refused_an_outside_domain_and_told_what_it_may_use(client, member, tenant,
                                                                        platform, dns_server):
    sending_domain(tenant, "acme.example")
    sending_domain(tenant, "letters.acme.example", verified=False)

    response = set_sender(client, tenant, "service@paypal.com")

    body = page_text(response)
    assert "paypal.com is not one of this account's verified sending domains" in body
    assert "It may send from an address at acme.example, growth.example (the platform's)" in body
    assert "Not verified yet: letters.acme.example." in body
    assert "“Verify in DNS”" in body
    assert sender_of(tenant) != "service@paypal.com"


def test_a_member_is_refused_its_own_domain_before_it_is_verified(client, member, tenant,
                                                                  dns_server):
    sending_domain(tenant, "acme.example", verified=False)

    set_sender(client, tenant, "news@acme.example")

    assert sender_of(tenant) != "news@acme.example"


def test_a_member_may_send_from_its_verified_domain_and_a_subdomain_of_it(client, member, tenant,
                                                                          dns_server):
    sending_domain(tenant, "acme.example")

    assert set_sender(client, tenant, "news@acme.example").status_code == 302
    assert sender_of(tenant) == "news@acme.example"
    assert set_sender(client, tenant, "letters@mail.Acme.example").status_code == 302
    assert sender_of(tenant) == "letters@mail.Acme.example"


def test_a_member_may_send_from_the_platforms_domain_not_from_a_lookalike(client, member, tenant,
                                                                          platform, dns_server):
    SendingDomain.objects.create(account=None, domain="shared.example", selector="p1",
                                 algorithm=dkim.ED25519, private_key=ED25519_KEY)

    for lookalike in ("acme@growth.example.evil.example", "acme@evilgrowth.example"):
        assert set_sender(client, tenant, lookalike).status_code == 200
        assert sender_of(tenant) != lookalike
    assert set_sender(client, tenant, "acme@growth.example").status_code == 302
    assert sender_of(tenant) == "acme@growth.example"
    assert set_sender(client, tenant, "acme@shared.example").status_code == 302
    assert sender_of(tenant) == "acme@shared.example"


def test_the_bounce_domain_is_no_sender(client, member, tenant, settings, dns_server):
    settings.DKIM_DOMAIN, settings.BOUNCE_DOMAIN = "growth.example", "bounces.example"

    set_sender(client, tenant, "acme@bounces.example")

    assert sender_of(tenant) != "acme@bounces.example"


def test_another_tenants_verified_subdomain_is_theirs_even_under_my_verified_domain(tenant,
                                                                                    other_tenant):
    from growth.deliverability.sender_domains import sender_refusal

    sending_domain(tenant, "acme.example")
    sending_domain(other_tenant, "mail.acme.example")

    assert sender_refusal(account_id=tenant.id, address="x@mail.acme.example").owner_id == \
        other_tenant.id
    assert sender_refusal(account_id=tenant.id, address="x@acme.example") is None


def test_a_domain_verified_by_two_accounts_is_each_ones_sender(tenant, other_tenant):
    from growth.deliverability.sender_domains import sender_refusal

    sending_domain(tenant, "acme.example", selector="a1")
    sending_domain(other_tenant, "acme.example", selector="g1", key=OTHER_KEY)

    assert sender_refusal(account_id=tenant.id, address="x@acme.example") is None
    assert sender_refusal(account_id=other_tenant.id, address="x@acme.example") is None


def test_an_unchanged_legacy_sender_does_not_block_editing_the_name_a_changed_one_is_checked(
        client, member, tenant, dns_server):
    Account.objects.filter(pk=tenant.pk).update(from_email="news@legacy-outside.example")
    tenant.refresh_from_db()
    url = reverse("admin:growth_account_change", args=[tenant.pk])

    assert client.post(url, account_form(tenant, name="Acme Renamed")).status_code == 302
    tenant.refresh_from_db()
    assert (tenant.name, tenant.from_email) == ("Acme Renamed", "news@legacy-outside.example")
    response = client.post(url, account_form(tenant, from_email="letters@legacy-outside.example"))
    assert "legacy-outside.example is not one of this account's verified" in page_text(response)
    assert sender_of(tenant) == "news@legacy-outside.example"


@pytest.mark.parametrize("address", [
    "ceo@globex.example\r\nBcc: everyone@example.com",
    "ceo@globex.example\nBcc: everyone@example.com",
    "news@" + "a" * 240 + ".example",
    "news@" + ".".join(["a" * 60] * 4) + ".example",
    "news@" + "a." * 120 + "example",
])
def test_hostile_senders_are_a_form_error_not_a_500(client, member, tenant, dns_server, address):
    before = sender_of(tenant)

    response = set_sender(client, tenant, address)

    assert response.status_code == 200
    assert "errornote" in response.content.decode()
    assert sender_of(tenant) == before


def test_a_superuser_may_set_an_unverified_sender_and_is_warned(superuser_client, tenant,
                                                                dns_server):
    response = set_sender(superuser_client, tenant, "news@acme-by-contract.example")

    assert response.status_code == 302
    assert sender_of(tenant) == "news@acme-by-contract.example"
    warning = " ".join(texts(superuser_client.get(response.url)))
    assert ("Saved as an operator, though the rule for tenants refuses it: "
            "acme-by-contract.example is not one of this account's verified sending domains") \
        in warning


def test_a_superuser_is_refused_another_accounts_verified_domain(superuser_client, tenant,
                                                                 other_tenant, dns_server):
    sending_domain(other_tenant, "globex.example")

    response = set_sender(superuser_client, tenant, "ceo@globex.example")

    assert response.status_code == 200
    assert ("globex.example is a verified sending domain of another account (Globex)"
            in page_text(response))
    assert sender_of(tenant) != "ceo@globex.example"


# --- verification in DNS ---------------------------------------------------------------------


def verify(client, domain: SendingDomain):
    return client.post(reverse("admin:growth_sendingdomain_verify", args=[domain.pk]),
                       follow=True)


def test_a_domain_is_verified_when_the_dns_publishes_its_key(client, member, tenant, dns_server):
    domain = sending_domain(tenant, "acme.example", verified=False)
    dns_server.txt["zy1._domainkey.acme.example"] = [record_of(ED25519_KEY)]

    page = verify(client, domain)

    domain.refresh_from_db()
    assert domain.verified_at is not None
    assert ("acme.example (TXT zy1._domainkey.acme.example): verified. The DNS publishes the key "
            "we sign with" in " ".join(texts(page)))
    entry = LogEntry.objects.get(object_id=str(domain.pk))
    assert entry.user_id == member.pk and "verified" in entry.get_change_message()
    assert set_sender(client, tenant, "news@acme.example").status_code == 302
    listing = client.get(reverse("admin:growth_sendingdomain_changelist")).content.decode()
    assert f"verified {timezone.localtime(domain.verified_at):%Y-%m-%d %H:%M}" in listing


def test_another_keys_record_does_not_verify_and_says_what_was_published(client, member, tenant,
                                                                         dns_server):
    domain = sending_domain(tenant, "acme.example", verified=False)
    dns_server.txt["zy1._domainkey.acme.example"] = [record_of(OTHER_KEY)]

    page = " ".join(texts(verify(client, domain)))

    domain.refresh_from_db()
    assert domain.verified_at is None
    assert "not verified, the published key is not the one we sign with" in page
    assert f"The DNS publishes: “{record_of(OTHER_KEY)}”" in page
    assert f'Expected: zy1._domainkey.acme.example. TXT "{record_of(ED25519_KEY)}"' in page


def test_no_record_does_not_verify_and_clears_an_earlier_verification(client, member, tenant,
                                                                      dns_server):
    domain = sending_domain(tenant, "acme.example", verified=True)

    page = " ".join(texts(verify(client, domain)))

    domain.refresh_from_db()
    assert domain.verified_at is None
    assert "not verified, no DKIM key record. The DNS publishes: nothing." in page


def test_a_dns_timeout_is_a_clear_message_and_changes_nothing(client, member, tenant, settings):
    silent = DnsServer(silent=True).start()
    settings.DELIVERABILITY_DNS, settings.DELIVERABILITY_DNS_TIMEOUT = silent.address, 0.3
    domain = sending_domain(tenant, "acme.example", verified=True)
    try:
        response = verify(client, domain)
    finally:
        silent.stop()

    assert response.status_code == 200
    page = " ".join(texts(response))
    assert "not checked, the DNS did not answer" in page and "no answer in time" in page
    assert "Still verified since" in page
    domain.refresh_from_db()
    assert domain.verified_at is not None


def test_changing_the_key_the_selector_or_the_domain_clears_the_verification(tenant):
    changes = [{"private_key": dkim.load_private_key(OTHER_KEY, dkim.ED25519)},
               {"selector": "zy2"}, {"domain": "acme2.example"}, {"account": None}]
    for n, change in enumerate(changes):
        domain = sending_domain(tenant, f"d{n}.acme.example")
        SendingDomain.objects.filter(pk=domain.pk).update(**change)
        domain.refresh_from_db()
        assert domain.verified_at is None, change


def test_pasting_a_new_key_in_the_admin_clears_the_verification(client, member, tenant):
    domain = sending_domain(tenant, "acme.example")
    url = reverse("admin:growth_sendingdomain_change", args=[domain.pk])
    form = {"account": tenant.pk, "domain": "acme.example", "selector": "zy1",
            "algorithm": dkim.ED25519, "private_key": ""}

    assert client.post(url, form).status_code == 302  # the stored key kept: still verified
    domain.refresh_from_db()
    assert domain.verified_at is not None
    assert client.post(url, {**form, "private_key": OTHER_KEY}).status_code == 302
    domain.refresh_from_db()
    assert domain.verified_at is None


def test_a_key_changed_while_the_dns_was_read_is_not_recorded_verified(tenant):
    domain = sending_domain(tenant, "acme.example", verified=False)
    read_for = SendingDomain.objects.get(pk=domain.pk)
    SendingDomain.objects.filter(pk=domain.pk).update(
        private_key=dkim.load_private_key(OTHER_KEY, dkim.ED25519))

    assert SendingDomain.objects.record_check(read_for, verified=True).stale
    domain.refresh_from_db()
    assert domain.verified_at is None


def test_another_tenants_domain_is_a_404_to_verify(client, member, other_tenant, dns_server):
    theirs = sending_domain(other_tenant, "globex.example", verified=False)
    dns_server.txt["zy1._domainkey.globex.example"] = [record_of(ED25519_KEY)]

    response = client.post(reverse("admin:growth_sendingdomain_verify", args=[theirs.pk]))

    assert response.status_code == 404
    client.post(reverse("admin:growth_sendingdomain_changelist"),
                {"action": "verify_in_dns", "_selected_action": [theirs.pk]})
    theirs.refresh_from_db()
    assert theirs.verified_at is None and not dns_server.asked()


def test_verify_is_a_post_to_an_id_anything_else_is_a_4xx_and_asks_no_dns(client, member, tenant,
                                                                         dns_server):
    domain = sending_domain(tenant, "acme.example", verified=False)
    dns_server.txt["zy1._domainkey.acme.example"] = [record_of(ED25519_KEY)]
    url = reverse("admin:growth_sendingdomain_verify", args=[domain.pk])

    assert client.get(url).status_code == 405  # a link followed, a prefetch: nothing checked
    for other in ("0", "999999", "x", "1%00", "-1"):
        assert client.post(url.replace(f"/{domain.pk}/", f"/{other}/")).status_code == 404
    domain.refresh_from_db()
    assert domain.verified_at is None and not dns_server.asked()


def test_a_viewer_cannot_verify(client, tenant, other_tenant, dns_server):
    client.force_login(operator(other_tenant, viewer_of=(tenant,)))
    domain = sending_domain(tenant, "acme.example", verified=False)
    dns_server.txt["zy1._domainkey.acme.example"] = [record_of(ED25519_KEY)]

    assert client.post(reverse("admin:growth_sendingdomain_verify", args=[domain.pk])
                       ).status_code == 403
    domain.refresh_from_db()
    assert domain.verified_at is None


def test_the_list_action_verifies_each_selected_domain_and_says_so(client, member, tenant,
                                                                   dns_server):
    published = sending_domain(tenant, "acme.example", verified=False)
    missing = sending_domain(tenant, "letters.example", verified=False)
    dns_server.txt["zy1._domainkey.acme.example"] = [record_of(ED25519_KEY)]

    page = client.post(reverse("admin:growth_sendingdomain_changelist"),
                       {"action": "verify_in_dns", "_selected_action": [published.pk, missing.pk]},
                       follow=True)

    shown = " ".join(texts(page))
    assert re.search(r"acme\.example \(TXT [^)]+\): verified", shown)
    assert re.search(r"letters\.example \(TXT [^)]+\): not verified", shown)
    assert SendingDomain.objects.get(pk=published.pk).verified_at is not None
    assert SendingDomain.objects.get(pk=missing.pk).verified_at is None
    assert "not yet" in page_text(page)


def test_the_domains_page_offers_verify_in_dns_to_an_editor(client, member, tenant):
    domain = sending_domain(tenant, "acme.example", verified=False)

    body = client.get(reverse("admin:growth_sendingdomain_change", args=[domain.pk])
                      ).content.decode()

    assert reverse("admin:growth_sendingdomain_verify", args=[domain.pk]) in body
    assert "Verify in DNS" in body


def test_a_malformed_dns_setting_is_a_message_not_a_500(client, member, tenant, settings):
    settings.DELIVERABILITY_DNS = "dns.example.com:53"  # a name: nameservers are addresses
    domain = sending_domain(tenant, "acme.example", verified=False)

    response = verify(client, domain)

    assert response.status_code == 200
    assert "Nothing verified: no DNS resolver (DELIVERABILITY_DNS 'dns.example.com:53'" in \
        " ".join(texts(response))
