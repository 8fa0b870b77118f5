"""The sends admin: read only, filters and search, and the decisions about unknown rows (their
confirmation pages, History and refusals: test_admin_review.py)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from growth.models import Campaign, Send, SendVerdict
from tests.helpers import confirm, texts
from tests.scenarios import (
    finished_campaign_with_unknown_rows,
    make_unknown,
    operator,
    sending_campaign,
    statuses,
)

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:growth_send_changelist")


def rows(body: str) -> int:
    return body.count('name="_selected_action"')


def act(client: Client, action: str, ids, **extra):
    """Run the action on the rows, confirmed through its confirmation page."""
    return confirm(client, CHANGELIST, {"action": action, "_selected_action": list(ids), **extra},
                   follow=True)


def test_sends_are_read_only(client, staff, tenant):
    campaign = sending_campaign(count=1, account=tenant)
    row = Send.objects.get(campaign=campaign)
    assert client.get(reverse("admin:growth_send_add")).status_code == 403
    page = client.get(reverse("admin:growth_send_change", args=[row.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert row.job_id in body
    assert 'name="_save"' not in body and 'name="status"' not in body and 'name="email"' not in body
    response = client.post(reverse("admin:growth_send_change", args=[row.pk]), {"status": "sent"})
    assert response.status_code == 403
    assert client.post(reverse("admin:growth_send_delete", args=[row.pk]), {"post": "yes"}).status_code == 403
    assert Send.objects.get(pk=row.pk).status == "queued"


def test_filters_by_status_and_campaign_and_search_by_address_or_job_id(client, staff, tenant):
    first = sending_campaign(count=3, account=tenant, name="First")
    second = sending_campaign(count=3, account=tenant, name="Second")
    failed = Send.objects.filter(campaign=first).order_by("id").first()
    Send.objects.filter(id=failed.id).update(status="failed")

    body = client.get(CHANGELIST, {"status__exact": "failed"}).content.decode()
    assert failed.job_id in body and rows(body) == 1

    body = client.get(CHANGELIST, {"campaign__id__exact": second.id}).content.decode()
    assert all(job in body for job in Send.objects.filter(campaign=second).values_list("job_id", flat=True))
    assert failed.job_id not in body

    body = client.get(CHANGELIST, {"q": failed.job_id}).content.decode()
    assert failed.job_id in body and rows(body) == 1

    # an address, in any case: every campaign's row for it
    body = client.get(CHANGELIST, {"q": "  PERSON0@example.com "}).content.decode()
    assert rows(body) == 2
    assert all(r.job_id in body for r in Send.objects.filter(email_lower="person0@example.com"))
    assert rows(client.get(CHANGELIST, {"q": "not an address"}).content.decode()) == 0


def test_staff_see_only_their_accounts_sends_and_campaign_choices(client, staff, tenant):
    ours = sending_campaign(count=1, account=tenant, name="Ours")
    theirs = sending_campaign(count=1, name="Theirs")
    body = client.get(CHANGELIST).content.decode()
    assert Send.objects.get(campaign=ours).job_id in body
    assert Send.objects.get(campaign=theirs).job_id not in body and "Theirs" not in body
    row = Send.objects.get(campaign=theirs)
    assert client.get(reverse("admin:growth_send_change", args=[row.pk])).status_code == 404


def test_retry_same_key_requeues_unknown_rows_only_and_reopens_a_finished_campaign(client, staff, tenant):
    campaign, lost = finished_campaign_with_unknown_rows()
    Campaign.objects.filter(id=campaign.id).update(account=tenant)
    Send.objects.filter(campaign=campaign).update(account=tenant)
    sent = list(Send.objects.filter(campaign=campaign, status="sent").values_list("id", flat=True))
    messages = texts(act(client, "retry_same_key", [*lost, *sent]))
    assert messages == [
        "2 sends queued again with the same key.",
        "2 left alone: sent, not unknown.",
        "1 finished campaign(s) went back to sending so that the worker sends these rows.",
    ]
    assert statuses(campaign) == {"queued": 2, "sent": 2}
    campaign.refresh_from_db()
    assert campaign.status == "sending"
    assert texts(act(client, "retry_same_key", lost)) == ["0 sends queued again with the same key.",
                                                          "2 left alone: queued, not unknown."]
    verdicts = SendVerdict.objects.filter(send_id__in=lost)
    assert {(v.verdict, v.decided_by) for v in verdicts} == {("retried", f"operator {staff.username}")}
    assert verdicts.count() == 2  # the second retry moved nothing, and recorded nothing


def test_mark_as_delivered_moves_unknown_rows_to_sent(client, staff, tenant):
    campaign = sending_campaign(count=3, account=tenant)
    lost = make_unknown(2)
    messages = texts(act(client, "mark_as_delivered", lost))
    assert messages == ["2 sends marked as delivered."]
    assert statuses(campaign) == {"sent": 2, "queued": 1}


def test_select_all_across_pages_acts_on_every_unknown_row_of_the_filter(client, staff, tenant):
    campaign = sending_campaign(count=5, account=tenant)
    make_unknown(3)
    any_id = Send.objects.filter(campaign=campaign).first().id
    messages = texts(act(client, "mark_as_delivered", [any_id], select_across="1",
                         **{"campaign__id__exact": campaign.id}))
    assert messages[0] == "3 sends marked as delivered."
    assert statuses(campaign) == {"sent": 3, "queued": 2}


def test_the_decisions_never_reach_another_tenants_rows(client, staff):
    campaign = sending_campaign(count=2)  # another account
    lost = make_unknown(2)
    act(client, "retry_same_key", lost)
    act(client, "mark_as_delivered", lost)
    assert statuses(campaign) == {"unknown": 2}


def test_the_decisions_need_the_change_permission_on_sends(client, tenant):
    client.force_login(operator(tenant, perms=["view_send"]))
    campaign = sending_campaign(count=1, account=tenant)
    lost = make_unknown(1)
    page = client.get(CHANGELIST).content.decode()
    assert "retry_same_key" not in page
    act(client, "retry_same_key", lost)
    assert statuses(campaign) == {"unknown": 1}


def test_the_decisions_need_the_csrf_token(tenant):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator(tenant))
    campaign = sending_campaign(count=1, account=tenant)
    lost = make_unknown(1)
    response = client.post(CHANGELIST, {"action": "retry_same_key", "_selected_action": lost})
    assert response.status_code == 403
    assert statuses(campaign) == {"unknown": 1}


def test_mark_as_not_delivered_fails_unknown_rows_with_a_verdict_shown_on_the_send(client, staff, tenant):
    sending_campaign(count=3, account=tenant)
    lost = make_unknown(2)
    messages = texts(act(client, "mark_as_not_delivered", lost))
    assert messages == ["2 sends marked as not delivered (a follow-up campaign can resend them)."]
    assert set(Send.objects.filter(id__in=lost).values_list("status", flat=True)) == {"failed"}
    page = client.get(reverse("admin:growth_send_change", args=[lost[0]])).content.decode()
    assert f"operator {staff.username}" in page and "marked not delivered by an operator" in page


def test_a_campaigns_list_is_counted_from_its_tallies_and_pages_through_every_row(client, staff, tenant):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories import AccountFactory

    campaign = sending_campaign(count=130, account=tenant)
    make_unknown(3)
    other = sending_campaign(count=4, account=AccountFactory())  # another tenant's
    Send.objects.filter(id__in=Send.objects.filter(campaign=campaign, status="queued")
                        .order_by("id").values("id")[:1]).update(status="failed")

    def listed(**filters) -> tuple[str, list[str]]:
        with CaptureQueriesContext(connection) as captured:
            body = client.get(CHANGELIST, filters).content.decode()
        return body, [q["sql"] for q in captured.captured_queries]

    body, statements = listed(campaign__id__exact=campaign.pk)
    assert "130 sends" in body and rows(body) == 100
    # no count of the rows by Django's paginator or the changelist's (COUNT(*) AS "__count")
    assert not [sql for sql in statements if 'COUNT(*) AS "__COUNT"' in sql.upper()]
    body, _ = listed(campaign__id__exact=campaign.pk, p=2)
    assert rows(body) == 30
    body, _ = listed(campaign__id__exact=campaign.pk, status__exact="unknown")
    assert "3 sends" in body and rows(body) == 3
    body, _ = listed(campaign__id__exact=campaign.pk, needs_review="yes")
    assert "4 sends" in body and rows(body) == 4
    body, _ = listed(campaign__id__exact=campaign.pk, needs_review="yes", status__exact="queued")
    assert "0 sends" in body and rows(body) == 0

    body, statements = listed(campaign__id__exact=campaign.pk, q="person5@example.com")
    assert rows(body) == 1 and [sql for sql in statements if "COUNT(*)" in sql.upper()]  # Django's

    client.force_login(operator(tenant))
    body, _ = listed(campaign__id__exact=other.pk)
    assert "4 sends" not in body and rows(body) == 0  # another tenant's: never its tallies
    body, _ = listed(campaign__id__exact=campaign.pk)
    assert "130 sends" in body


@pytest.mark.parametrize("filters", [{"campaign__id__exact": "abc"}, {"campaign__id__exact": "-1"},
                                     {"campaign__id__exact": "99999999", "status__exact": "<x>"},
                                     {"campaign__id__exact": "1", "needs_review": "maybe"}])
def test_a_sends_list_with_a_bad_filter_answers_without_an_error(client, staff, tenant, filters):
    sending_campaign(count=3, account=tenant)
    response = client.get(CHANGELIST, filters)
    assert response.status_code in (200, 302)  # Django's own answer to a bad lookup: ?e=1
    if response.status_code == 200:
        assert rows(response.content.decode()) in (0, 3)
