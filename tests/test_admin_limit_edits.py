"""Two operators editing one rate limit: the form carries the version it was loaded from, and a
save from a form older than the limit is refused in words (who changed it, when, and what it is
now), nothing overwritten; a reload saves. The worker's own writes to the bucket (tokens, a
throttle, a recovery) are no operator's edit and refuse nothing; the SENDER_RATE_LIMIT setting a
worker applies is a new configuration, in the limit's history, and a refusal names it."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from growth.admin.limit_form import RateLimitForm
from growth.managers.limits import ThrottlePolicy
from growth.models import Destination, RateLimit, RateLimitChange
from growth.sending.transports.null import NullTransport
from growth.sending.worker import Worker
from tests.admin_forms import log_of, logged_in, posted_form, refusal, refused_page
from tests.helpers import concurrently, two_tabs_on
from tests.scenarios import sending_campaign

POLICY = ThrottlePolicy(decrease=0.5, every=0.0, floor=0.5, recovery=0.1, burst=10)
REFUSED = "changed this limit since you opened it"


def limit_url(limit) -> str:
    return reverse("admin:growth_ratelimit_change", args=[limit.pk])


def loaded(client: Client, limit) -> dict:
    return posted_form(client, limit_url(limit))


def save(client: Client, limit, form: dict, **changes):
    return client.post(limit_url(limit), {**form, **changes})


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


# --- the rate setting a worker applies: in the limit's history, named in a refusal -----------------

def worker_applies(settings, *, per_second: float, transport: str = "growth.smtp") -> None:
    """A worker starts with SENDER_RATE_LIMIT = ``per_second`` and claims: it applies the
    setting to the transport's bucket."""
    settings.SENDER_TRANSPORT, settings.SENDER_RATE_LIMIT = transport, per_second
    sending_campaign(count=1)
    Worker(batch_size=5, transport=NullTransport()).cycle()


@pytest.mark.django_db
def test_an_operator_refused_after_a_worker_applied_the_rate_setting_is_told_so_not_of_the_last_edit(
        settings):
    limit = RateLimit.objects.create(transport="growth.smtp", per_second=50, burst=20)
    alice, bob = logged_in("alice"), logged_in("bob")
    assert save(alice, limit, loaded(alice, limit), per_second="60").status_code == 302
    bobs = loaded(bob, limit)

    worker_applies(settings, per_second=40)

    message = refusal(save(bob, limit, bobs, burst="30"))
    assert message.startswith("A worker changed this limit since you opened it"), message
    assert "SENDER_RATE_LIMIT setting: 40/s, burst 20 (was 60/s, burst 20)" in message, message
    assert "alice" not in message and "now 40/s, burst 20" in message
    limit.refresh_from_db()
    assert (limit.per_second, limit.burst) == (40, 20)


@pytest.mark.django_db
def test_a_rate_a_worker_applied_from_its_settings_is_in_the_limits_history_once(settings):
    limit = RateLimit.objects.create(transport="growth.smtp", per_second=50, burst=20)
    alice = logged_in("alice")

    worker_applies(settings, per_second=40)
    worker_applies(settings, per_second=40)  # another worker, the same setting: no news

    (change,) = limit.changes.all()
    reason = "set by a worker from the SENDER_RATE_LIMIT setting: 40/s, burst 20 (was 50/s, burst 20)"
    assert (change.reason, change.per_second) == (reason, 40)
    page = alice.get(limit_url(limit)).content.decode()
    assert reason in page
    # an operator's edit since is the last change again: a form loaded before it names her
    form = loaded(alice, limit)
    assert save(alice, limit, loaded(alice, limit), per_second="45").status_code == 302
    message = refusal(save(alice, limit, form, burst="30"))
    assert message.startswith("Someone") and "alice" in message and "now 45/s" in message, message


@pytest.mark.django_db
def test_a_transport_bucket_a_worker_creates_from_its_settings_starts_its_history():
    limit_id = RateLimit.objects.for_transport("growth.smtp", per_second=50, burst=20)
    (change,) = RateLimit.objects.get(pk=limit_id).changes.all()
    assert change.reason == "set by a worker from the SENDER_RATE_LIMIT setting: 50/s, burst 20"
    assert change.version == 1


@pytest.mark.django_db
def test_the_rate_setting_applied_to_a_bucket_a_throttle_created_records_what_it_replaced():
    RateLimit.objects.throttled(transport="growth.smtp", reason="throttled: 421", accepted=8,
                                sent_since=60, policy=POLICY)
    limit = RateLimit.objects.get(transport="growth.smtp")
    RateLimit.objects.for_transport("growth.smtp", per_second=50, burst=20)
    newest = limit.changes.first()
    assert newest.reason.endswith(": 50/s, burst 20 (was no rate, burst 10)"), newest.reason
    assert newest.per_second == pytest.approx(4)  # the throttle still holds it down
    assert newest.version == RateLimit.objects.get(pk=limit.pk).version == 2


@pytest.mark.django_db(transaction=True)
def test_workers_starting_together_record_the_setting_once_whether_they_create_the_bucket_or_change_it():
    def apply(per_second: float):
        return concurrently(4, lambda _: RateLimit.objects.for_transport(
            "growth.smtp", per_second=per_second, burst=20))

    (limit_id,) = set(apply(50))
    apply(40)

    limit = RateLimit.objects.get(pk=limit_id)
    assert [(c.reason.rsplit(": ", 1)[1], c.version) for c in limit.changes.order_by("id")] == [
        ("50/s, burst 20", 1), ("40/s, burst 20 (was 50/s, burst 20)", 2)]
    assert limit.version == 2


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


@pytest.mark.django_db(transaction=True)
def test_a_third_save_committed_while_a_loser_is_validated_again_leaves_it_refused_never_a_500(
        tenant, monkeypatch):
    """Alice and Bob validate the same version; one wins, the other's compare-and-set is lost and
    its form is validated again: Carol, who loaded the limit after the winner's save, saves inside
    that second pass."""
    limit = RateLimit.objects.create(account=tenant, per_second=10, burst=20)
    alice, bob, carol = logged_in("alice"), logged_in("bob"), logged_in("carol")
    forms = [loaded(alice, limit), loaded(bob, limit)]
    edits = [{"per_second": "5"}, {"burst": "50"}]
    both_validated = threading.Barrier(2, timeout=30)
    in_second_pass, carol_saved = threading.Event(), threading.Event()
    validations: dict[int, int] = {}
    racers: set[int] = set()
    clean = RateLimitForm.clean

    def clean_in_step(self):
        me = threading.get_ident()
        if me in racers:
            validations[me] = validations.get(me, 0) + 1
            if validations[me] == 2:  # the loser, again: Carol saves now
                in_second_pass.set()
                assert carol_saved.wait(30)
        cleaned = clean(self)
        if me in racers and validations[me] == 1:
            both_validated.wait()
        return cleaned

    monkeypatch.setattr(RateLimitForm, "clean", clean_in_step)

    def carols_save():
        assert in_second_pass.wait(30)
        try:
            return save(carol, limit, loaded(carol, limit), per_second="7")
        finally:
            carol_saved.set()

    def operator(i: int):
        if i == 2:
            return carols_save()
        racers.add(threading.get_ident())
        return save((alice, bob)[i], limit, forms[i], **edits[i])

    responses = concurrently(3, operator)

    assert responses[2].status_code == 302  # Carol's form was loaded after the winner's save
    codes = sorted(r.status_code for r in responses[:2])
    assert codes == [200, 302], codes
    saved = 0 if responses[0].status_code == 302 else 1
    assert REFUSED in refused_page(responses[1 - saved])
    limit.refresh_from_db()
    assert limit.per_second == 7 and limit.burst == (20 if saved == 0 else 50)
    assert sorted(log_of(limit)) == sorted([("alice", "bob")[saved], "carol"])


@pytest.mark.django_db(transaction=True)
def test_many_operators_saving_one_version_at_once_one_is_saved_and_every_other_refused(
        tenant, monkeypatch):
    operators = 6
    limit = RateLimit.objects.create(account=tenant, per_second=10, burst=20)
    clients = [logged_in(f"operator{i}") for i in range(operators)]
    forms = [loaded(client, limit) for client in clients]
    all_validated = threading.Barrier(operators, timeout=30)
    waited = set()
    clean = RateLimitForm.clean

    def clean_then_wait_for_the_others(self):
        cleaned = clean(self)
        if threading.get_ident() not in waited:
            waited.add(threading.get_ident())
            all_validated.wait()
        return cleaned

    monkeypatch.setattr(RateLimitForm, "clean", clean_then_wait_for_the_others)

    responses = concurrently(operators, lambda i: save(clients[i], limit, forms[i],
                                                       per_second=str(i + 1)))

    codes = [r.status_code for r in responses]
    assert sorted(codes) == [200] * (operators - 1) + [302], codes
    saved = codes.index(302)
    for i, response in enumerate(responses):
        if i != saved:
            assert REFUSED in refused_page(response)
    limit.refresh_from_db()
    assert limit.per_second == saved + 1
    assert log_of(limit) == [f"operator{saved}"]


# --- in a browser --------------------------------------------------------------------------------

@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_in_a_browser_the_older_tab_is_told_and_a_reload_saves(browser, live_server, tenant):
    from playwright.sync_api import expect

    limit = RateLimit.objects.create(account=tenant, per_second=10, burst=20)
    with two_tabs_on(browser, live_server, limit_url(limit)) as (first, second):
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
