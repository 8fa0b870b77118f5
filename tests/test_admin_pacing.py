"""The operator's view of pacing: rate limits (scopes, effective rates, history, validation,
scoping), destinations and their cached domains, the account's warm-up schedule, the campaign's
sending window, and an ETA that knows about both."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

import pytest
from django.contrib.admin.models import LogEntry
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from growth.admin.durations import span
from growth.admin.limit_form import refusal
from growth.models import Campaign, Destination, MailDomain, RateLimit, RateLimitChange, Send
from growth.operations.eta import Pacing, Warmup, eta
from tests.factories import AccountFactory, CampaignFactory, UserFactory
from tests.test_admin_campaigns import form_data
from tests.test_monitor import mark, poll

LIMITS = reverse("admin:growth_ratelimit_changelist")
ADD_LIMIT = reverse("admin:growth_ratelimit_add")
UTC = dt.UTC


def limit_url(limit) -> str:
    return reverse("admin:growth_ratelimit_change", args=[limit.pk])


@pytest.fixture
def superuser(client):
    user = UserFactory(is_staff=True, is_superuser=True, username="olga")
    client.force_login(user)
    return user


@pytest.fixture
def google():
    return Destination.objects.create(name="google")


def change(limit, per_second, reason, *, ago: dt.timedelta):
    made = RateLimitChange.objects.create(rate_limit=limit, per_second=per_second, reason=reason)
    RateLimitChange.objects.filter(pk=made.pk).update(changed_at=timezone.now() - ago)


def limit_form(**fields) -> dict:
    data = {"account": "", "destination": "", "transport": "", "per_second": "", "burst": "20",
            "max_in_flight": ""}
    data.update({name: "" if value is None else value for name, value in fields.items()})
    return data


# --- the rate limits list -------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_list_shows_each_scope_with_its_configured_and_effective_rate(client, superuser, tenant,
                                                                          google):
    throttled_at = timezone.now().replace(hour=14, minute=5)
    RateLimit.objects.create(account=tenant, per_second=10)
    RateLimit.objects.create(transport="growth.smtp", per_second=50)
    RateLimit.objects.create(destination=google, per_second=20, throttled_to=2.5,
                             throttled_at=throttled_at, max_in_flight=7)
    RateLimit.objects.create(account=tenant, destination=google, per_second=3)
    RateLimit.objects.create(account=tenant, per_day=1500)

    body = client.get(LIMITS).content.decode()

    for scope in ("tenant Acme", "transport growth.smtp", "provider google", "Acme → google",
                  "warm-up Acme"):
        assert scope in body, scope
    assert "<b>2.5/s</b>" in body
    assert f"throttled at {timezone.localtime(throttled_at):%H:%M}" in body
    assert '<td class="field-max_in_flight">7</td>' in body
    assert "1,500 a day" in body
    assert "Sending now (last 10 s)" in body


@pytest.mark.django_db
def test_the_list_reads_as_many_statements_for_many_buckets_as_for_one(client, superuser, google):
    def statements() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(LIMITS).status_code == 200
        return len(captured)

    RateLimit.objects.create(account=AccountFactory(), destination=google, per_second=1)
    few = statements()
    for _ in range(20):
        account = AccountFactory()
        RateLimit.objects.create(account=account, per_second=1)
        RateLimit.objects.create(account=account, destination=google, per_second=1)
    assert statements() == few


@pytest.mark.django_db
def test_the_list_filters_by_scope(client, superuser, tenant, google):
    RateLimit.objects.create(account=tenant, per_second=10)
    RateLimit.objects.create(destination=google, per_second=20)
    body = client.get(LIMITS, {"scope": "provider"}).content.decode()
    assert "provider google" in body and "tenant Acme" not in body


# --- a bucket's page: its history ------------------------------------------------------------------

@pytest.mark.django_db
def test_the_page_draws_one_step_per_change_of_the_last_hours_and_lists_them(client, superuser,
                                                                           google):
    limit = RateLimit.objects.create(destination=google, per_second=10, throttled_to=8)
    change(limit, 10, "configured by ann: 10/s", ago=dt.timedelta(hours=9))  # before the chart
    change(limit, 5, "throttled: 421 from mx.google.com", ago=dt.timedelta(hours=3))
    change(limit, 4, "throttled: 421 again", ago=dt.timedelta(hours=2))
    change(limit, 8, "recovered: good answers", ago=dt.timedelta(minutes=30))

    response = client.get(limit_url(limit))

    assert response.status_code == 200
    chart = response.context["history"]["chart"]
    assert chart.startswith("<svg") and 'role="img"' in chart
    assert chart.count("<circle") == 3  # a marker per change in the last 6 hours
    assert chart.count(" V ") == 3  # a step from the level before each
    assert "3 changes, the last to 8/s" in chart and "10 / s" in chart  # the peak is the earlier level
    body = response.content.decode()
    assert "throttled: 421 from mx.google.com" in body
    assert "configured by ann: 10/s" in body  # the table goes further back than the chart
    assert body.count("<tr><td>") == 4


@pytest.mark.django_db
def test_a_bucket_without_history_says_so(client, superuser, tenant):
    limit = RateLimit.objects.create(account=tenant, per_second=10)
    body = client.get(limit_url(limit)).content.decode()
    assert "No change of its rate in the last 6 hours." in body


@pytest.mark.django_db
def test_the_history_reads_a_bounded_number_of_rows(client, superuser, google, django_assert_max_num_queries):
    limit = RateLimit.objects.create(destination=google, per_second=10)
    RateLimitChange.objects.bulk_create(
        RateLimitChange(rate_limit=limit, per_second=n % 7 + 1, reason=f"step {n}") for n in range(700))
    with django_assert_max_num_queries(10):
        response = client.get(limit_url(limit))
    assert response.context["history"]["chart"].count("<circle") == 500
    assert len(response.context["history"]["changes"]) == 50


# --- saving ----------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_an_edited_rate_leaves_a_change_in_its_history_and_the_admins_log(client, superuser, tenant):
    limit = RateLimit.objects.create(account=tenant, per_second=10, burst=20)

    response = client.post(limit_url(limit), limit_form(account=tenant.pk, per_second="5", burst="20",
                                                          seen_version=limit.version))

    assert response.status_code == 302, response.content.decode()[-2000:]
    limit.refresh_from_db()
    assert limit.per_second == 5
    recorded = RateLimitChange.objects.get(rate_limit=limit)
    assert (recorded.per_second, recorded.reason) == (5, "configured by olga: 5/s (was 10/s)")
    entry = LogEntry.objects.get(object_id=str(limit.pk), content_type__model="ratelimit")
    assert entry.user == superuser and "Messages per second" in entry.get_change_message()


@pytest.mark.django_db
def test_a_save_without_a_new_rate_records_no_change_and_leaves_the_workers_fields(client, superuser,
                                                                                 google):
    limit = RateLimit.objects.create(destination=google, per_second=10, throttled_to=3)
    RateLimit.objects.filter(pk=limit.pk).update(tokens=7)
    form = limit_form(destination=google.pk, per_second="10", burst="20", max_in_flight="4",
                      seen_version=limit.version)
    assert client.post(limit_url(limit), form).status_code == 302
    limit.refresh_from_db()
    assert (limit.max_in_flight, limit.throttled_to, limit.tokens) == (4, 3, 7)
    assert not RateLimitChange.objects.exists()


@pytest.mark.django_db
def test_a_configured_rate_of_a_throttled_bucket_records_the_effective_one(client, superuser, google):
    limit = RateLimit.objects.create(destination=google, per_second=10, throttled_to=3)
    client.post(limit_url(limit), limit_form(destination=google.pk, per_second="20",
                                             seen_version=limit.version))
    recorded = RateLimitChange.objects.get(rate_limit=limit)
    assert recorded.per_second == 3 and recorded.reason.startswith("configured by olga: 20/s")


@pytest.mark.django_db
def test_a_new_provider_limit_is_added_from_the_prefilled_form(client, superuser, google):
    body = client.get(ADD_LIMIT, {"destination": google.pk}).content.decode()
    assert f'<option value="{google.pk}" selected>google</option>' in body
    response = client.post(ADD_LIMIT, limit_form(destination=google.pk, per_second="2"))
    assert response.status_code == 302
    limit = RateLimit.objects.get(destination=google)
    assert limit.changes.get().reason == "configured by olga: 2/s"


@pytest.mark.django_db
@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"per_second": "5"}, "account", "Choose what it limits"),
    ({"transport": "x", "per_second": "5", "tenant": True}, "transport",
     "A transport&#x27;s limit covers all its mail"),
    ({"tenant": True}, "per_second", "a limit with neither limits nothing"),
    ({"tenant": True, "per_second": "5", "max_in_flight": "3"}, "max_in_flight",
     "choose the provider"),
    ({"tenant": True, "per_second": "5", "duplicate": True}, "account",
     "This tenant already has a limit"),
    ({"tenant": True, "per_second": "1e308"}, "per_second", "less than or equal to 100000"),
    ({"tenant": True, "per_second": "5", "burst": "1e308"}, "burst", "less than or equal to 100000"),
])
def test_a_scope_the_table_refuses_is_a_form_error_not_a_500(client, superuser, tenant, fields, field,
                                                             message):
    if fields.pop("duplicate", False):
        RateLimit.objects.create(account=tenant, per_second=1)
    if fields.pop("tenant", False):
        fields["account"] = tenant.pk
    before = RateLimit.objects.count()

    response = client.post(ADD_LIMIT, limit_form(**fields))

    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    body = response.content.decode()
    assert message in body and "is violated" not in body
    assert RateLimit.objects.count() == before


@pytest.mark.django_db
def test_a_second_limit_for_a_provider_is_refused_in_words(client, superuser, tenant, google):
    RateLimit.objects.create(destination=google, per_second=1)
    RateLimit.objects.create(account=tenant, destination=google, per_second=1)
    body = client.post(ADD_LIMIT, limit_form(destination=google.pk, per_second="3")).content.decode()
    assert "This provider already has a limit of its own" in body
    body = client.post(ADD_LIMIT, limit_form(account=tenant.pk, destination=google.pk,
                                             per_second="3")).content.decode()
    assert "This tenant already has a limit for this provider" in body


@pytest.mark.django_db
def test_a_constraint_the_database_enforces_is_named_for_an_operator(tenant):
    RateLimit.objects.create(account=tenant, per_second=1)
    with pytest.raises(IntegrityError) as raised, transaction.atomic():
        RateLimit.objects.create(account=tenant, per_second=2)
    assert refusal(raised.value) == "This tenant already has a limit: change that one."
    with pytest.raises(IntegrityError) as raised, transaction.atomic():
        RateLimit.objects.create(per_second=2)
    assert refusal(raised.value).startswith("A limit applies to a tenant, a provider")


@pytest.mark.django_db
def test_a_warmup_quota_is_shown_not_edited(client, superuser, tenant):
    quota = RateLimit.objects.create(account=tenant, per_day=800)
    body = client.get(limit_url(quota)).content.decode()
    assert "A warm-up quota: the engine sets it" in body and 'name="_save"' not in body
    assert client.post(limit_url(quota), limit_form(account=tenant.pk, per_second="9")).status_code == 403


# --- scoping ---------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_tenants_operator_sees_its_own_buckets_read_only_and_no_one_elses(client, staff, tenant,
                                                                         other_tenant, google):
    mine = RateLimit.objects.create(account=tenant, per_second=5)
    theirs = RateLimit.objects.create(account=other_tenant, per_second=7)
    theirs_to_google = RateLimit.objects.create(account=other_tenant, destination=google, per_second=1)
    RateLimit.objects.create(transport="growth.smtp", per_second=50)
    RateLimit.objects.create(destination=google, per_second=20)

    body = client.get(LIMITS).content.decode()
    assert "tenant Acme" in body
    assert "Globex" not in body and "growth.smtp" not in body and "provider google" not in body

    for limit in (theirs, theirs_to_google):
        response = client.get(limit_url(limit))
        assert response.status_code == 404 and b"Globex" not in response.content
    page = client.get(limit_url(mine))
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert client.post(limit_url(mine), limit_form(account=tenant.pk, per_second="500")).status_code == 403
    assert client.get(ADD_LIMIT).status_code == 403
    mine.refresh_from_db()
    assert mine.per_second == 5


@pytest.mark.django_db
def test_destinations_and_cached_domains_are_the_platforms(client, staff):
    for name in ("growth_destination", "growth_maildomain"):
        assert client.get(reverse(f"admin:{name}_changelist")).status_code == 403


# --- destinations and their domains -----------------------------------------------------------------

def cached(domain: str, destination: Destination, source: str = "mx", mx: str = "") -> MailDomain:
    return MailDomain.objects.create(domain=domain, destination=destination, source=source,
                                     mx_hosts=mx, expires_at=timezone.now() + dt.timedelta(days=1))


@pytest.mark.django_db
def test_destinations_show_their_domains_and_their_limit_or_a_link_to_add_one(client, superuser, tenant,
                                                                            google):
    microsoft = Destination.objects.create(name="microsoft")
    for domain in ("gmail.com", "googlemail.com", "acme-corp.example"):
        cached(domain, google)
    cached("outlook.com", microsoft, source="static")
    limit = RateLimit.objects.create(destination=google, per_second=20, throttled_to=4)
    RateLimit.objects.create(account=tenant, destination=google, per_second=1)

    body = client.get(reverse("admin:growth_destination_changelist")).content.decode()

    assert f'href="{limit_url(limit)}">4/s (throttled)</a>' in body
    assert f'href="{ADD_LIMIT}?destination={microsoft.pk}">add a limit for this provider</a>' in body
    assert re.search(rf'maildomain/\?destination__id__exact={google.pk}">3</a>', body)
    assert re.search(rf'ratelimit/\?destination__id__exact={google.pk}">1</a>', body)
    assert client.get(reverse("admin:growth_destination_add")).status_code == 403


@pytest.mark.django_db
def test_cached_domains_are_searchable_filterable_and_read_only(client, superuser, google):
    gmail = cached("gmail.com", google, source="static",
                   mx="gmail-smtp-in.l.google.com alt1.gmail-smtp-in.l.google.com")
    cached("acme-corp.example", google, source="mx", mx="aspmx.l.google.com")
    url = reverse("admin:growth_maildomain_changelist")

    body = client.get(url, {"q": "gmail"}).content.decode()
    assert "gmail.com" in body and "acme-corp.example" not in body
    assert "<code>gmail-smtp-in.l.google.com</code>, <code>alt1.gmail-smtp-in.l.google.com</code>" in body
    body = client.get(url, {"source__exact": "mx"}).content.decode()
    assert "acme-corp.example" in body and "gmail.com</a>" not in body

    page = client.get(reverse("admin:growth_maildomain_change", args=[gmail.pk])).content.decode()
    assert 'name="_save"' not in page and "/delete/" not in page
    assert client.get(reverse("admin:growth_maildomain_add")).status_code == 403
    assert client.get(reverse("admin:growth_maildomain_delete", args=[gmail.pk])).status_code == 403


# --- the account's warm-up ---------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_account_page_previews_the_warmup_schedule(client, superuser, tenant):
    today = dt.datetime.now(zoneinfo.ZoneInfo("Europe/Madrid")).date()
    tenant.time_zone = "Europe/Madrid"
    tenant.warmup_started_on = today - dt.timedelta(days=2)
    tenant.warmup_daily_start, tenant.warmup_daily_growth, tenant.warmup_until = 100, 2.0, 1000
    tenant.save()

    body = client.get(reverse("admin:growth_account_change", args=[tenant.pk])).content.decode()

    assert "<h2" in body and ">Pacing</h2>" in body
    assert "day (Europe/Madrid)" in body
    assert f"<td>{today:%a %d %b}</td><td>400</td><td>today: 0 sent so far</td>" in body
    assert f"<td>{today + dt.timedelta(days=1):%a %d %b}</td><td>800</td>" in body
    assert body.count("no cap (warm-up over)") == 6


@pytest.mark.django_db
def test_a_tenants_operator_sees_the_warmup_but_sets_only_the_time_zone(client, staff, tenant):
    url = reverse("admin:growth_account_change", args=[tenant.pk])
    body = client.get(url).content.decode()
    assert 'name="time_zone"' in body and 'name="warmup_started_on"' not in body
    assert "No warm-up: nothing caps" in body
    response = client.post(url, {"name": tenant.name, "slug": tenant.slug, "from_email": tenant.from_email,
                                 "from_name": "", "time_zone": "Mars/Olympus",
                                 "warmup_started_on": "2020-01-01"})
    assert "is not a time zone" in response.content.decode()
    client.post(url, {"name": tenant.name, "slug": tenant.slug, "from_email": tenant.from_email,
                      "from_name": "", "time_zone": "Asia/Tokyo", "warmup_started_on": "2020-01-01",
                      "seen_version": tenant.version})
    tenant.refresh_from_db()
    assert (tenant.time_zone, tenant.warmup_started_on) == ("Asia/Tokyo", None)


# --- the campaign's window -------------------------------------------------------------------------

def closed_window(zone: str, *, opens_in_hours: int = 3) -> tuple[dt.time, dt.time]:
    local = dt.datetime.now(zoneinfo.ZoneInfo(zone)).replace(second=0, microsecond=0)
    return ((local + dt.timedelta(hours=opens_in_hours, minutes=1)).time(),
            (local + dt.timedelta(hours=opens_in_hours + 1)).time())


@pytest.mark.django_db
def test_a_drafts_window_is_saved_and_a_half_or_empty_window_refused(client, staff, tenant):
    campaign = CampaignFactory(account=tenant)
    url = reverse("admin:growth_campaign_change", args=[campaign.pk])

    body = client.post(url, form_data(campaign, window_starts="09:00", window_ends="")).content.decode()
    assert "Give both ends of the sending window" in body and "is violated" not in body
    body = client.post(url, form_data(campaign, window_starts="09:00", window_ends="09:00")).content.decode()
    assert "A window that ends when it starts is empty" in body and "is violated" not in body

    response = client.post(url, form_data(campaign, window_starts="22:00", window_ends="06:00"))
    assert response.status_code == 302
    campaign.refresh_from_db()
    assert (campaign.window_starts, campaign.window_ends) == (dt.time(22), dt.time(6))


@pytest.mark.django_db
def test_once_approved_the_window_is_read_only(client, staff, tenant):
    from growth.operations.campaigns import approve_campaign

    campaign = CampaignFactory(account=tenant, window_starts=dt.time(9), window_ends=dt.time(17))
    approve_campaign(campaign_id=campaign.id)
    campaign.refresh_from_db()
    url = reverse("admin:growth_campaign_change", args=[campaign.pk])
    assert 'name="window_starts"' not in client.get(url).content.decode()
    client.post(url, {**form_data(campaign), "window_starts": "", "window_ends": ""})
    campaign.refresh_from_db()
    assert (campaign.window_starts, campaign.window_ends) == (dt.time(9), dt.time(17))


@pytest.mark.django_db
def test_the_campaign_page_says_when_its_window_opens(client, staff, tenant):
    tenant.time_zone = "Europe/Madrid"
    tenant.save()
    starts, ends = closed_window("Europe/Madrid")
    campaign = CampaignFactory(account=tenant, window_starts=starts, window_ends=ends)
    body = client.get(reverse("admin:growth_campaign_change", args=[campaign.pk])).content.decode()
    assert re.search(rf"sends {starts:%H:%M}–{ends:%H:%M} Europe/Madrid; window closed, opens in "
                     r"(2 h 59|3 h 0[01]) min", body)


# --- the monitor's ETA ------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_closed_window_delays_the_eta_which_then_goes_at_the_tenants_limit(client, staff, tenant):
    from tests.scenarios import sending_campaign

    tenant.time_zone = "America/New_York"
    tenant.save()
    starts, ends = closed_window("America/New_York")
    campaign = sending_campaign(count=10, account=tenant)
    Campaign.objects.filter(pk=campaign.pk).update(window_starts=starts, window_ends=ends)
    RateLimit.objects.create(account=tenant, per_second=1)

    c = poll(client, campaign)["campaigns"][str(campaign.pk)]

    assert c["waiting_for"] == "window"
    assert 3 * 3600 - 60 <= c["waits_seconds"] <= 3 * 3600 + 120
    assert c["eta_seconds"] == pytest.approx(c["waits_seconds"] + 10, abs=2)  # 10 at 1/s
    assert re.match(r"about (2|3) h \d\d min \(around .*\): window closed, opens in", c["display"]["eta"])
    assert "window closed" in c["display"]["window"]


@pytest.mark.django_db
def test_a_spent_warmup_quota_moves_the_rest_to_the_next_days(client, staff, tenant):
    from tests.scenarios import sending_campaign

    tenant.warmup_started_on = timezone.now().date()
    tenant.warmup_daily_start, tenant.warmup_daily_growth, tenant.warmup_until = 4, 2.0, 1000
    tenant.save()
    campaign = sending_campaign(count=20, account=tenant)
    mark(campaign, "sent", 4, sent_ago="5 seconds")  # today's cap, reached

    c = poll(client, campaign)["campaigns"][str(campaign.pk)]

    assert c["waiting_for"] == "warm-up"
    # 16 left: 8 tomorrow, 8 of the 16 the day after; at 4 a minute, a couple of minutes each day
    assert c["eta_seconds"] > 24 * 3600 + c["waits_seconds"] - 60
    assert "today's warm-up quota is used up" in c["display"]["eta"]
    assert "spread over 3 days by the warm-up's daily cap" in c["display"]["eta"]


@pytest.mark.django_db
def test_with_no_window_or_warmup_the_eta_is_the_rate_alone(client, staff, tenant):
    from tests.scenarios import sending_campaign

    campaign = sending_campaign(count=10, account=tenant)
    mark(campaign, "sent", 5, sent_ago="10 seconds")
    c = poll(client, campaign)["campaigns"][str(campaign.pk)]
    assert c["waiting_for"] == "" and c["waits_seconds"] == 0
    assert c["display"]["window"] == "any time (no sending window)"
    assert Send.objects.filter(campaign=campaign, status="queued").count() == 5


# --- the ETA itself ---------------------------------------------------------------------------------

def at(text: str, zone: str = "UTC") -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=zoneinfo.ZoneInfo(zone))


NINE_TO_FIVE = Pacing(time_zone="Europe/Madrid", window=(dt.time(9), dt.time(17)))


def test_without_a_calendar_the_eta_is_remaining_over_rate():
    assert eta(remaining=600, per_second=2, now=at("2026-12-02 12:00"), pacing=Pacing()).seconds == 300
    assert eta(remaining=0, per_second=0, now=at("2026-12-02 12:00"), pacing=Pacing()).seconds == 0
    unknown = eta(remaining=5, per_second=0, now=at("2026-12-02 12:00"), pacing=Pacing())
    assert (unknown.seconds, unknown.waiting_for) == (None, "")


def test_before_the_window_opens_it_waits_then_sends_at_the_rate():
    outlook = eta(remaining=3600, per_second=2, now=at("2026-12-02 07:00", "Europe/Madrid"),
                  pacing=NINE_TO_FIVE)
    assert (outlook.waits, outlook.waiting_for) == (2 * 3600, "window")
    assert outlook.seconds == 2 * 3600 + 1800 and outlook.days == 1


def test_a_closed_window_with_nothing_measured_goes_by_the_tenants_limit():
    now = at("2026-12-02 18:00", "Europe/Madrid")  # after today's window: tomorrow 09:00
    assert eta(remaining=100, per_second=0, now=now, pacing=NINE_TO_FIVE).seconds is None
    limited = Pacing(time_zone="Europe/Madrid", window=(dt.time(9), dt.time(17)), limit_rate=1)
    outlook = eta(remaining=100, per_second=0, now=now, pacing=limited)
    assert outlook.waits == 15 * 3600 and outlook.seconds == 15 * 3600 + 100


def test_an_open_window_too_short_for_the_rest_goes_on_in_the_next_days_window():
    outlook = eta(remaining=3 * 3600, per_second=1, now=at("2026-12-02 15:00", "Europe/Madrid"),
                  pacing=NINE_TO_FIVE)
    # 2 h today (to 17:00), the third hour tomorrow from 09:00: done at 10:00, 19 h from now
    assert (outlook.waits, outlook.seconds, outlook.days) == (0, 19 * 3600, 2)


def test_a_window_spanning_midnight_is_open_on_both_sides_of_it():
    night = Pacing(window=(dt.time(22), dt.time(6)))
    late = eta(remaining=4 * 3600, per_second=1, now=at("2026-12-02 23:00"), pacing=night)
    assert (late.waits, late.seconds, late.days) == (0, 4 * 3600, 2)  # 23:00 to 03:00, no gap
    early = eta(remaining=3600, per_second=1, now=at("2026-12-02 05:30"), pacing=night)
    # half an hour to 06:00, then from 22:00: done at 22:30
    assert (early.waits, early.seconds) == (0, 17 * 3600)
    midday = eta(remaining=60, per_second=1, now=at("2026-12-02 12:00"), pacing=night)
    assert (midday.waits, midday.waiting_for, midday.seconds) == (10 * 3600, "window", 10 * 3600 + 60)


def test_a_window_ending_at_midnight_has_no_morning_part():
    evening = Pacing(window=(dt.time(22), dt.time(0)))
    outlook = eta(remaining=60, per_second=1, now=at("2026-12-02 01:00"), pacing=evening)
    assert (outlook.waits, outlook.waiting_for) == (21 * 3600, "window")


def test_the_warmup_cap_moves_what_is_beyond_it_to_the_next_days():
    warmup = Warmup(started_on=dt.date(2026, 12, 2), daily_start=1000, daily_growth=2, until=100_000,
                    sent_today=400)
    outlook = eta(remaining=2000, per_second=10, now=at("2026-12-02 12:00"), pacing=Pacing(warmup=warmup))
    # 600 left of today's 1,000 (a minute), the other 1,400 of tomorrow's 2,000 from midnight
    assert (outlook.waits, outlook.seconds, outlook.days) == (0, 12 * 3600 + 140, 2)
    longer = eta(remaining=4000, per_second=10, now=at("2026-12-02 12:00"), pacing=Pacing(warmup=warmup))
    assert longer.days == 3 and longer.seconds == 36 * 3600 + 140  # 600, 2,000, then 1,400 of 4,000


def test_a_spent_quota_waits_for_the_tenants_midnight():
    warmup = Warmup(started_on=dt.date(2026, 12, 2), daily_start=1000, daily_growth=2, until=100_000,
                    sent_today=1000)
    pacing = Pacing(time_zone="Asia/Tokyo", warmup=warmup, limit_rate=10)
    outlook = eta(remaining=500, per_second=0, now=at("2026-12-02 20:00", "Asia/Tokyo"), pacing=pacing)
    assert (outlook.waits, outlook.waiting_for, outlook.seconds) == (4 * 3600, "warm-up", 4 * 3600 + 50)


def test_window_and_warmup_together():
    warmup = Warmup(started_on=dt.date(2026, 12, 2), daily_start=3600, daily_growth=1, until=100_000)
    pacing = Pacing(time_zone="Europe/Madrid", window=(dt.time(9), dt.time(17)), warmup=warmup)
    outlook = eta(remaining=3 * 3600, per_second=2, now=at("2026-12-02 09:00", "Europe/Madrid"),
                  pacing=pacing)
    # 3,600 a day at 2/s: half an hour each morning, the third day done at 09:30
    assert outlook.days == 3 and outlook.seconds == 48 * 3600 + 1800


def test_a_window_across_the_spring_clock_change_counts_real_seconds():
    # Madrid skips 02:00-03:00 on 2027-03-28: from Saturday 20:00 to Sunday 09:00 is 12 real hours
    outlook = eta(remaining=60, per_second=1, now=at("2027-03-27 20:00", "Europe/Madrid"),
                  pacing=NINE_TO_FIVE)
    assert outlook.waits == 12 * 3600 and outlook.seconds == 12 * 3600 + 60


def test_an_eta_beyond_a_year_is_unknown():
    warmup = Warmup(started_on=dt.date(2026, 12, 2), daily_start=1, daily_growth=1, until=100)
    outlook = eta(remaining=10_000, per_second=5, now=at("2026-12-02 12:00"), pacing=Pacing(warmup=warmup))
    assert outlook.seconds is None


def test_spans_of_a_day_or_more_count_days():
    assert (span(42), span(185), span(3725), span(93600)) == ("42 s", "3 min 05 s", "1 h 02 min",
                                                              "1 d 02 h")


# --- keeping others' pages working -------------------------------------------------------------------

@pytest.mark.django_db
def test_a_staff_user_without_any_membership_sees_no_bucket(tenant):
    from tests.scenarios import operator

    RateLimit.objects.create(account=tenant, per_second=5)
    client = Client()
    client.force_login(operator())
    assert "tenant Acme" not in client.get(LIMITS).content.decode()
