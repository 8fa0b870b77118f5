"""Two operators saving the same unique value at the same moment (an account's slug, a user's
membership of an account, a segment's name, an address in a segment or a tenant's suppressions, a
domain's key, a tenant's rate limit, a username): both forms find the value free, the database
keeps one. The other operator gets their form back with the error a save a moment later gets,
what they typed still in it: one row, one save in the History, never a 500."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse

from growth.models import (
    Account,
    Membership,
    RateLimit,
    Segment,
    SendingDomain,
    Subscriber,
    Suppression,
)
from tests.admin_forms import logged_in, posted_form, refused_page, validated_together
from tests.factories import SegmentFactory, UserFactory
from tests.helpers import concurrently
from tests.test_admin_account_edits import offline_sender_panel  # noqa: F401 - autouse

ED25519_KEY = base64.b64encode(bytes(range(32))).decode()
PASSWORD = "a long pass phrase, 42"


@dataclass
class Race:
    model: type
    posts: list[tuple[str, dict]]  # each operator's (url, form)
    error: str  # what the operator whose save lost is told, on their form
    typed: list[str]  # in each operator's form: on the page it is answered with, if it lost
    holders: Callable[[], int]  # how many rows hold the value: one


def _added(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")


def account_added(client, tenant, other_tenant) -> Race:
    form = posted_form(client, _added(Account))
    return Race(Account, [(_added(Account), {**form, "name": name, "slug": "shared",
                                             "from_email": f"news@{name.lower()}.example"})
                          for name in ("First", "Second")],
                "Account with this Slug already exists.", ['value="First"', 'value="Second"'],
                lambda: Account.objects.filter(slug="shared").count())


def account_changed(client, tenant, other_tenant) -> Race:
    posts = []
    for account, name in ((tenant, "First"), (other_tenant, "Second")):
        url = reverse("admin:growth_account_change", args=[account.pk])
        posts.append((url, {**posted_form(client, url), "name": name, "slug": "shared"}))
    return Race(Account, posts, "Account with this Slug already exists.",
                ['value="First"', 'value="Second"'],
                lambda: Account.objects.filter(slug="shared").count())


def membership_added(client, tenant, other_tenant) -> Race:
    user = UserFactory(username="newcomer")
    return Race(Membership, [(_added(Membership), {"user": user.pk, "account": tenant.pk,
                                                   "role": role})
                             for role in ("editor", "viewer")],
                "This user is a member of this account already: change that membership.",
                ['value="editor" selected', 'value="viewer" selected'],
                lambda: Membership.objects.filter(user=user, account=tenant).count())


def segment_added(client, tenant, other_tenant) -> Race:
    return Race(Segment, [(_added(Segment), {"account": tenant.pk, "name": "Newsletter"})] * 2,
                "This account has a segment of this name already.", ['value="Newsletter"'] * 2,
                lambda: Segment.objects.filter(account=tenant, name="Newsletter").count())


def subscriber_added(client, tenant, other_tenant) -> Race:
    segment = SegmentFactory(account=tenant, name="Newsletter")
    return Race(Subscriber, [(_added(Subscriber), {"email": email, "segment": segment.pk,
                                                   "account": tenant.pk, "status": "confirmed"})
                             for email in ("Ann@example.com", "ann@EXAMPLE.com")],
                "ann@example.com is in the segment “Newsletter” already.",
                ['value="Ann@example.com"', 'value="ann@EXAMPLE.com"'],
                lambda: Subscriber.objects.filter(segment=segment).count())


def suppression_added(client, tenant, other_tenant) -> Race:
    return Race(Suppression, [(_added(Suppression), {"account": tenant.pk,
                                                     "email_lower": "gone@example.com",
                                                     "reason": reason})
                              for reason in ("manual", "complained")],
                "This address is already suppressed for this account.",
                ['value="manual" selected', 'value="complained" selected'],
                lambda: Suppression.objects.filter(account=tenant).count())


def _domain_added(account, owner: str) -> Race:
    return Race(SendingDomain, [(_added(SendingDomain), {
        "account": "" if account is None else account.pk, "domain": "acme.example",
        "selector": selector, "algorithm": "ed25519-sha256", "private_key": ED25519_KEY})
        for selector in ("first", "second")],
        f"acme.example already has a key in {owner} (one key per domain).",
        ['value="first"', 'value="second"'],
        lambda: SendingDomain.objects.filter(domain="acme.example").count())


def tenants_domain_added(client, tenant, other_tenant) -> Race:
    return _domain_added(tenant, "this account")


def platforms_domain_added(client, tenant, other_tenant) -> Race:
    return _domain_added(None, "the platform")


def rate_limit_added(client, tenant, other_tenant) -> Race:
    return Race(RateLimit, [(_added(RateLimit), {"account": tenant.pk, "per_second": rate,
                                                 "burst": "20"})
                            for rate in ("10", "15")],
                "This tenant already has a limit: change that one.",
                ['value="10"', 'value="15"'],
                lambda: RateLimit.objects.filter(account=tenant).count())


def user_added(client, tenant, other_tenant) -> Race:
    return Race(User, [(_added(User), {"username": "newcomer", "usable_password": "true",
                                       "password1": PASSWORD, "password2": PASSWORD})] * 2,
                "A user with that username already exists.", ['value="newcomer"'] * 2,
                lambda: User.objects.filter(username="newcomer").count())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("race", [account_added, account_changed, membership_added, segment_added,
                                  subscriber_added, suppression_added, tenants_domain_added,
                                  platforms_domain_added, rate_limit_added, user_added],
                         ids=lambda race: race.__name__)
def test_two_saves_of_one_unique_value_at_the_same_moment_one_is_kept_the_other_told_on_its_form(
        tenant, other_tenant, monkeypatch, race):
    operators = [logged_in("alice"), logged_in("bob")]
    race = race(operators[0], tenant, other_tenant)
    validated_together(monkeypatch, type(admin.site._registry[race.model]))

    responses = concurrently(2, lambda i: operators[i].post(*race.posts[i]))

    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 302], codes
    lost = 1 if responses[0].status_code == 302 else 0
    page = refused_page(responses[lost])
    assert race.error in page and race.typed[lost] in page, page
    assert race.holders() == 1
    saves = LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(race.model))
    assert [entry.user.username for entry in saves] == [("alice", "bob")[1 - lost]]
