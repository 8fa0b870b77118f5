"""Two operators editing one rate limit: the form carries the version it was loaded from, and a
save from a form older than the limit is refused in words (who changed it, when, and what it is
now), nothing overwritten; a reload saves. The worker's own writes to the bucket (tokens, a
throttle, a recovery) are no operator's edit and refuse nothing."""

from __future__ import annotations

import datetime as dt
import re
import threading

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from growth.admin.limit_form import RateLimitForm
from growth.managers.limits import ThrottlePolicy
from growth.models import Destination, RateLimit, RateLimitChange
from tests.factories import UserFactory
from tests.helpers import concurrently

POLICY = ThrottlePolicy(decrease=0.5, every=0.0, floor=0.5, recovery=0.1, burst=10)
REFUSED = "changed this limit since you opened it"


def limit_url(limit) -> str:
    return reverse("admin:growth_ratelimit_change", args=[limit.pk])


def logged_in(username: str) -> Client:
    client = Client()
    client.force_login(UserFactory(username=username, is_staff=True, is_superuser=True))
    return client


def loaded(client: Client, limit) -> dict:
    """The change form as the operator's browser holds it: every field the page lets it post
    (hidden ones included), with the values the page was rendered with."""
    response = client.get(limit_url(limit))
    assert response.status_code == 200
    data = {}
    for fieldset in response.context["adminform"]:
        for line in fieldset:
            for field in line:
                if not field.is_readonly:
                    value = field.field.value()
                    data[field.field.name] = "" if value is None else value
    return data


def save(client: Client, limit, form: dict, **changes):
    return client.post(limit_url(limit), {**form, **changes})


def refusal(response) -> str:
    assert response.status_code == 200, f"not refused: {response.status_code}"
    return " ".join(response.context["adminform"].form.non_field_errors())


def log_of(limit) -> list[str]:
    return [entry.user.username for entry in
            LogEntry.objects.filter(object_id=str(limit.pk), content_type__model="ratelimit")]


@pytest.fixture
def google():
    return Destination.objects.create(name="google")


# --- one after the other -------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_stale_form_saved_after_another_operators_edit_is_refused_and_the_edit_kept(tenant):
    limit = RateLimit.objects.create(account=tenant, per_second=10, burst=20)
    alice, bob = logged_in("alice"), logged_in("bob")
    alices, bobs = loaded(alice, limit), loaded(bob, limit)

    assert save(alice, limit, alices, per_second="5").status_code == 302
    response = save(bob, limit, bobs, burst="50")  # his page still says 10/s

    message = refusal(response)
    assert REFUSED in message and "alice" in message and "Nothing was saved" in message
    assert "now 5/s, burst 20" in message, message
    limit.refresh_from_db()
    assert (limit.per_second, limit.burst) == (5, 20)
    assert log_of(limit) == ["alice"]
    assert [c.reason for c in limit.changes.all()] == ["configured by alice: 5/s (was 10/s)"]
    body = response.content.decode()
    assert 'value="50"' in body  # what he typed is still in front of him

    response = save(bob, limit, loaded(bob, limit), burst="50")  # reloaded: it saves

    assert response.status_code == 302
    limit.refresh_from_db()
    assert (limit.per_second, limit.burst) == (5, 50)
    assert log_of(limit) == ["bob", "alice"]


@pytest.mark.django_db
def test_the_same_operator_in_two_tabs_is_refused_in_the_older_one(tenant, google):
    limit = RateLimit.objects.create(destination=google, per_second=10, max_in_flight=4)
    alice = logged_in("alice")
    first, second = loaded(alice, limit), loaded(alice, limit)
    assert save(alice, limit, first, max_in_flight="8").status_code == 302
    message = refusal(save(alice, limit, second, per_second="3"))
    assert "at most 8 on the wire" in message, message
    limit.refresh_from_db()
    assert (limit.per_second, limit.max_in_flight) == (10, 8)


@pytest.mark.django_db
def test_a_form_without_its_version_saves_nothing(tenant):
    limit = RateLimit.objects.create(account=tenant, per_second=10)
    alice = logged_in("alice")
    form = loaded(alice, limit)
    form.pop("seen_version")
    assert REFUSED in refusal(save(alice, limit, form, per_second="5"))
    limit.refresh_from_db()
    assert limit.per_second == 10 and log_of(limit) == []


@pytest.mark.django_db
@pytest.mark.parametrize("version", ["x", "1e3", str(2**70), "-1"])
def test_a_hand_made_version_is_a_form_error_never_a_500(tenant, version):
    limit = RateLimit.objects.create(account=tenant, per_second=10)
    alice = logged_in("alice")
    response = save(alice, limit, loaded(alice, limit), per_second="5", seen_version=version)
    assert response.status_code == 200 and response.context["adminform"].form.errors
    limit.refresh_from_db()
    assert limit.per_second == 10 and log_of(limit) == []


@pytest.mark.django_db
def test_a_limit_deleted_meanwhile_is_not_brought_back(tenant):
    limit = RateLimit.objects.create(account=tenant, per_second=10)
    alice, bob = logged_in("alice"), logged_in("bob")
    bobs = loaded(bob, limit)
    assert alice.post(reverse("admin:growth_ratelimit_delete", args=[limit.pk]),
                      {"post": "yes"}).status_code == 302
    response = save(bob, limit, bobs, per_second="5")
    assert response.status_code in (302, 404) and not RateLimit.objects.exists()


# --- the worker's writes are not an operator's edit ----------------------------------------------

@pytest.mark.django_db
def test_a_rate_the_worker_adapted_meanwhile_does_not_refuse_the_operators_edit(google):
    limit = RateLimit.objects.create(destination=google, per_second=10)
    alice = logged_in("alice")
    RateLimit.objects.filter(pk=limit.pk).update(tokens=20)
    form = loaded(alice, limit)
    assert RateLimit.objects.take([limit.pk], want=5).count == 5
    assert RateLimit.objects.throttled(destination_id=google.pk, reason="throttled: 421 slow down",
                                       accepted=8, sent_since=60, policy=POLICY) == 5
    # a period later (the test's transaction has one now())
    RateLimit.objects.filter(pk=limit.pk).update(adjusted_at=timezone.now() - dt.timedelta(minutes=1))
    assert RateLimit.objects.recover(destination_ids=[google.pk], transport="x", policy=POLICY)

    assert save(alice, limit, form, per_second="20").status_code == 302

    limit.refresh_from_db()
    assert limit.per_second == 20 and limit.throttled_to == pytest.approx(6)  # the throttle stays
    assert limit.changes.first().reason == "configured by alice: 20/s (was 10/s)"


@pytest.mark.django_db
def test_a_transport_rate_a_worker_set_from_its_settings_refuses_a_form_loaded_before():
    limit = RateLimit.objects.create(transport="growth.smtp", per_second=50, burst=20)
    alice = logged_in("alice")
    form = loaded(alice, limit)
    RateLimit.objects.for_transport("growth.smtp", per_second=50, burst=20)  # the same: no news
    assert save(alice, limit, form, per_second="60").status_code == 302

    form = loaded(alice, limit)
    RateLimit.objects.for_transport("growth.smtp", per_second=40, burst=20)  # SENDER_RATE_LIMIT
    message = refusal(save(alice, limit, form, per_second="70"))
    assert "now 40/s" in message, message
    limit.refresh_from_db()
    assert limit.per_second == 40


# --- the compare-and-set itself ------------------------------------------------------------------

@pytest.mark.django_db
def test_configure_writes_only_the_version_it_was_given_and_returns_the_next(tenant):
    limit = RateLimit.objects.create(account=tenant, per_second=10)
    fields = {"account_id": tenant.pk, "destination_id": None, "transport": "", "burst": 20,
              "max_in_flight": None}
    done = RateLimit.objects.configure(limit.pk, version=limit.version, per_second=5, **fields)
    assert done is not None and done.version == limit.version + 1
    assert RateLimit.objects.configure(limit.pk, version=limit.version, per_second=7, **fields) is None
    assert RateLimit.objects.get(pk=limit.pk).per_second == 5


# --- at the same moment ----------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_two_operators_saving_at_the_same_moment_one_edit_is_saved_the_other_refused(
        tenant, monkeypatch):
    """Both forms are validated against the same version before either writes: only the
    database can tell them apart."""
    limit = RateLimit.objects.create(account=tenant, per_second=10, burst=20)
    operators = [logged_in("alice"), logged_in("bob")]
    forms = [loaded(operator, limit) for operator in operators]
    edits = [{"per_second": "5"}, {"burst": "50"}]
    both_validated = threading.Barrier(2, timeout=30)
    waited = set()
    clean = RateLimitForm.clean

    def clean_then_wait_for_the_other(self):
        cleaned = clean(self)
        if threading.get_ident() not in waited:  # a thread's first validation only
            waited.add(threading.get_ident())
            both_validated.wait()
        return cleaned

    monkeypatch.setattr(RateLimitForm, "clean", clean_then_wait_for_the_other)

    responses = concurrently(2, lambda i: save(operators[i], limit, forms[i], **edits[i]))

    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 302], codes
    saved = 0 if responses[0].status_code == 302 else 1
    assert REFUSED in refusal(responses[1 - saved])
    limit.refresh_from_db()
    assert (limit.per_second, limit.burst) == ((5, 20) if saved == 0 else (10, 50))
    assert log_of(limit) == [("alice", "bob")[saved]]
    assert RateLimitChange.objects.count() == (1 if saved == 0 else 0)


# --- in a browser --------------------------------------------------------------------------------

@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_in_a_browser_the_older_tab_is_told_and_a_reload_saves(browser, live_server, tenant):
    from playwright.sync_api import expect

    limit = RateLimit.objects.create(account=tenant, per_second=10, burst=20)
    UserFactory(username="alice", is_staff=True, is_superuser=True)
    context = browser.new_context(base_url=live_server.url)
    try:
        first, second = context.new_page(), context.new_page()
        first.goto(reverse("admin:login"))
        first.fill("#id_username", "alice")
        first.fill("#id_password", "pw")
        first.get_by_role("button", name=re.compile("Log in", re.I)).click()
        for page in (first, second):
            page.goto(limit_url(limit))
        first.fill("#id_per_second", "5")
        first.click('input[name="_save"]')
        expect(first.locator(".messagelist")).to_contain_text("was changed successfully")

        second.fill("#id_burst", "50")
        second.click('input[name="_save"]')
        expect(second.locator(".errornote")).to_be_visible()
        expect(second.locator(".errorlist.nonfield")).to_contain_text(REFUSED)
        expect(second.locator(".errorlist.nonfield")).to_contain_text("now 5/s")
        limit.refresh_from_db()
        assert (limit.per_second, limit.burst) == (5, 20)

        second.goto(limit_url(limit))
        second.fill("#id_burst", "50")
        second.click('input[name="_save"]')
        expect(second.locator(".messagelist")).to_contain_text("was changed successfully")
        limit.refresh_from_db()
        assert (limit.per_second, limit.burst) == (5, 50)
    finally:
        context.close()
