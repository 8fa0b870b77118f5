"""Accounts, memberships, segments, subscribers (with the CSV import) and suppressions in the admin."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from growth.models import Account, Membership, Subscriber, Suppression
from growth.sending.unsubscribe import make_token
from tests.factories import SegmentFactory, SubscriberFactory, UserFactory
from tests.helpers import confirm, texts
from tests.scenarios import operator

pytestmark = pytest.mark.django_db

IMPORT = reverse("admin:growth_subscriber_import")


def upload(content: str | bytes, name: str = "list.csv") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content.encode() if isinstance(content, str) else content,
                              content_type="text/csv")


# --- subscriber CSV import -----------------------------------------------------------------------

def test_the_import_page_offers_only_the_users_segments(client, staff, tenant, other_tenant):
    SegmentFactory(account=tenant, name="Newsletter")
    SegmentFactory(account=other_tenant, name="Their list")
    body = client.get(IMPORT).content.decode()
    assert "Acme — Newsletter" in body and "Their list" not in body
    assert "Import CSV" in client.get(reverse("admin:growth_subscriber_changelist")).content.decode()


def test_an_import_reports_accepted_duplicates_and_invalid_lines(client, staff, tenant):
    segment = SegmentFactory(account=tenant, name="Newsletter")
    SubscriberFactory(segment=segment, email="known@example.com", status="unsubscribed")
    response = client.post(IMPORT, {
        "segment": segment.id, "status": "confirmed", "skip_invalid": "on",
        "file": upload("email,name\nann@example.com,Ann\nknown@example.com,K\nbroken@,B\n"
                       "ANN@example.com,Ann again\n"),
    })
    assert response.status_code == 200
    body = response.content.decode()
    assert "Imported 1 address into Newsletter." in body
    assert "<td>4</td><td><code>broken@</code></td>" in body
    assert "<td>3</td><td>known@example.com</td><td>already in the segment</td>" in body
    assert "<td>5</td><td>ANN@example.com</td><td>repeats line 2</td>" in body
    assert dict(Subscriber.objects.values_list("email_lower", "status")) == {
        "ann@example.com": "confirmed", "known@example.com": "unsubscribed"}


def test_an_import_with_invalid_lines_imports_nothing_by_default(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    body = client.post(IMPORT, {"segment": segment.id, "status": "confirmed",
                                "file": upload("a@example.com\nnope\n")}).content.decode()
    assert "Nothing was imported:" in body and "1 line is invalid" in body
    assert not Subscriber.objects.exists()


def test_check_only_imports_nothing(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    body = client.post(IMPORT, {"segment": segment.id, "status": "confirmed", "check_only": "on",
                                "file": upload("a@example.com\n")}).content.decode()
    assert "Checked only, nothing was imported:" in body and "1 address would be added" in body
    assert not Subscriber.objects.exists()


def test_an_unreadable_file_imports_nothing_and_says_why(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    body = client.post(IMPORT, {"segment": segment.id, "status": "confirmed", "skip_invalid": "on",
                                "file": upload(b"a@example.com\nb@example.com\n\xe9t\xe9@example.com\n")
                                }).content.decode()
    assert "Nothing was imported: Line 3 is not UTF-8 text" in body
    assert not Subscriber.objects.exists()


def test_an_import_into_another_tenants_segment_is_refused(client, staff, other_tenant):
    theirs = SegmentFactory(account=other_tenant)
    response = client.post(IMPORT, {"segment": theirs.id, "status": "confirmed",
                                    "file": upload("a@example.com\n")})
    assert "Select a valid choice" in response.content.decode()
    assert not Subscriber.objects.exists()


def test_the_import_cannot_make_anyone_unsubscribed_or_anything_else(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    response = client.post(IMPORT, {"segment": segment.id, "status": "unsubscribed",
                                    "file": upload("a@example.com\n")})
    assert "Select a valid choice" in response.content.decode()
    assert not Subscriber.objects.exists()


def test_the_import_needs_the_add_permission_and_a_csrf_token(tenant):
    segment = SegmentFactory(account=tenant)
    viewer = Client()
    viewer.force_login(operator(tenant, perms=["view_subscriber"]))
    assert viewer.get(IMPORT).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator(tenant))
    response = strict.post(IMPORT, {"segment": segment.id, "status": "confirmed",
                                    "file": upload("a@example.com\n")})
    assert response.status_code == 403
    assert not Subscriber.objects.exists()


# --- subscribers ---------------------------------------------------------------------------------

def test_editing_a_subscriber_never_writes_back_an_old_status(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    subscriber = SubscriberFactory(segment=segment, email="ann@example.com")
    url = reverse("admin:growth_subscriber_change", args=[subscriber.pk])
    page = client.get(url).content.decode()
    assert 'name="status"' not in page  # read only once created
    # the recipient unsubscribes while the operator edits the address
    Suppression.objects.unsubscribe(account_id=tenant.id, subscriber_id=subscriber.id,
                                    email_lower=subscriber.email_lower, campaign_id=None)
    response = client.post(url, {"email": "Ann@Example.org", "segment": segment.id})
    assert response.status_code == 302
    subscriber.refresh_from_db()
    assert (subscriber.email, subscriber.email_lower, subscriber.status) == (
        "Ann@Example.org", "ann@example.org", "unsubscribed")


def test_confirm_pending_action(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    pending = SubscriberFactory(segment=segment, status="pending")
    gone = SubscriberFactory(segment=segment, status="unsubscribed")
    changelist = reverse("admin:growth_subscriber_changelist")
    selection = {"action": "confirm_pending", "_selected_action": [pending.pk, gone.pk]}
    page = client.post(changelist, selection).content.decode()
    assert "1 pending subscriber will be confirmed" in page and pending.email in page
    assert "1 selected subscriber will be left alone" in page and gone.email not in page
    assert Subscriber.objects.get(pk=pending.pk).status == "pending"  # asked, not done

    response = confirm(client, changelist, selection, follow=True)

    assert texts(response) == ["1 subscriber(s) confirmed.", "1 left alone: not pending (an "
                               "unsubscribed address is never confirmed from here)."]
    assert dict(Subscriber.objects.values_list("id", "status")) == {
        pending.id: "confirmed", gone.id: "unsubscribed"}
    (entry,) = LogEntry.objects.all()
    assert (entry.object_id, entry.user) == (str(pending.pk), staff)
    assert "pending → confirmed" in entry.change_message


def test_an_import_is_recorded_in_its_segments_history(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    upload = SimpleUploadedFile("list.csv", b"a@example.com\nb@example.com\n")
    client.post(reverse("admin:growth_subscriber_import"),
                {"segment": segment.pk, "status": "confirmed", "file": upload})
    (entry,) = LogEntry.objects.all()
    assert (entry.object_id, entry.user) == (str(segment.pk), staff)
    assert entry.change_message == "Imported 2 subscriber(s) as confirmed from “list.csv”."
    checked = SimpleUploadedFile("list.csv", b"c@example.com\n")
    client.post(reverse("admin:growth_subscriber_import"),
                {"segment": segment.pk, "status": "confirmed", "file": checked, "check_only": "on"})
    assert LogEntry.objects.count() == 1  # a check imports nothing and records nothing


def test_subscriber_list_is_scoped_searchable_and_filterable(client, staff, tenant, other_tenant):
    SubscriberFactory(segment=SegmentFactory(account=tenant), email="ann@example.com")
    SubscriberFactory(segment=SegmentFactory(account=tenant), email="bob@example.com", status="pending")
    SubscriberFactory(segment=SegmentFactory(account=other_tenant), email="eve@example.com")
    url = reverse("admin:growth_subscriber_changelist")
    body = client.get(url).content.decode()
    assert "ann@example.com" in body and "bob@example.com" in body and "eve@example.com" not in body
    body = client.get(url, {"q": "ANN"}).content.decode()
    assert "ann@example.com" in body and "bob@example.com" not in body
    body = client.get(url, {"status__exact": "pending"}).content.decode()
    assert "bob@example.com" in body and "ann@example.com" not in body
    eve = Subscriber.objects.get(email="eve@example.com")
    assert client.get(reverse("admin:growth_subscriber_change", args=[eve.pk])).status_code == 404


# --- suppressions --------------------------------------------------------------------------------

def test_adding_a_suppression_normalises_the_address_and_reports_a_duplicate(client, staff, tenant):
    add = reverse("admin:growth_suppression_add")
    response = client.post(add, {"account": tenant.id, "email_lower": " Ann@EXAMPLE.com ",
                                 "reason": "manual"})
    assert response.status_code == 302
    assert Suppression.objects.get().email_lower == "ann@example.com"
    response = client.post(add, {"account": tenant.id, "email_lower": "ANN@example.com",
                                 "reason": "bounced"})
    assert response.status_code == 200 and "already suppressed for this account" in response.content.decode()
    response = client.post(add, {"account": tenant.id, "email_lower": "nope", "reason": "manual"})
    assert "not a valid email address" in response.content.decode()
    assert Suppression.objects.count() == 1


def test_suppressions_are_scoped_searchable_and_filterable(client, staff, tenant, other_tenant):
    Suppression.objects.create(account=tenant, email_lower="ann@example.com", reason="bounced")
    Suppression.objects.create(account=tenant, email_lower="bob@example.com", reason="manual")
    theirs = Suppression.objects.create(account=other_tenant, email_lower="eve@example.com")
    url = reverse("admin:growth_suppression_changelist")
    body = client.get(url).content.decode()
    assert "ann@example.com" in body and "eve@example.com" not in body and "Globex" not in body
    body = client.get(url, {"reason__exact": "bounced"}).content.decode()
    assert "ann@example.com" in body and "bob@example.com" not in body
    body = client.get(url, {"q": "bob"}).content.decode()
    assert "bob@example.com" in body and "ann@example.com" not in body
    assert client.get(reverse("admin:growth_suppression_change", args=[theirs.pk])).status_code == 404
    client.post(url, {"action": "delete_selected", "_selected_action": [theirs.pk], "post": "yes"})
    assert Suppression.objects.filter(pk=theirs.pk).exists()


# --- accounts, segments, memberships -------------------------------------------------------------

def test_staff_see_and_edit_only_their_accounts_and_cannot_create_or_delete_one(client, staff, tenant,
                                                                               other_tenant):
    url = reverse("admin:growth_account_changelist")
    body = client.get(url).content.decode()
    assert "Acme" in body and "Globex" not in body
    assert client.get(reverse("admin:growth_account_change", args=[other_tenant.pk])).status_code == 404
    assert client.get(reverse("admin:growth_account_add")).status_code == 403
    assert client.get(reverse("admin:growth_account_delete", args=[tenant.pk])).status_code == 403
    body = client.get(reverse("admin:growth_account_change", args=[tenant.pk])).content.decode()
    assert "memberships" not in body.lower().split("<form")[1]  # the inline is superusers' only


def test_memberships_are_for_superusers_only(client, staff, tenant):
    url = reverse("admin:growth_membership_changelist")
    assert client.get(url).status_code == 403
    assert client.get(reverse("admin:growth_membership_add")).status_code == 403
    admin = Client()
    admin.force_login(UserFactory(is_staff=True, is_superuser=True))
    assert admin.get(url).status_code == 200
    user = UserFactory()
    response = admin.post(reverse("admin:growth_membership_add"), {
        "user": user.id, "account": tenant.id, "role": "viewer"})
    assert response.status_code == 302
    assert Membership.objects.get(user=user).role == "viewer"


def test_a_superuser_manages_members_on_the_account_page(tenant):
    admin = Client()
    admin.force_login(UserFactory(is_staff=True, is_superuser=True))
    user = UserFactory()
    url = reverse("admin:growth_account_change", args=[tenant.pk])
    assert "memberships-TOTAL_FORMS" in admin.get(url).content.decode()
    response = admin.post(url, {
        "name": tenant.name, "slug": tenant.slug, "from_email": tenant.from_email, "from_name": "",
        "time_zone": "UTC", "warmup_started_on": "", "warmup_daily_start": "500",
        "warmup_daily_growth": "1.5", "warmup_until": "100000",
        "memberships-TOTAL_FORMS": "1", "memberships-INITIAL_FORMS": "0",
        "memberships-0-user": user.id, "memberships-0-role": "editor",
        "seen_version": tenant.version,
    })
    assert response.status_code == 302
    assert Membership.objects.filter(user=user, account=tenant).exists()
    assert Account.objects.count() == 1


def test_segments_are_scoped_searchable_and_filterable(client, staff, tenant, other_tenant):
    SegmentFactory(account=tenant, name="Newsletter")
    SegmentFactory(account=tenant, name="Customers")
    SegmentFactory(account=other_tenant, name="Their list")
    url = reverse("admin:growth_segment_changelist")
    body = client.get(url).content.decode()
    assert "Newsletter" in body and "Customers" in body and "Their list" not in body
    body = client.get(url, {"q": "news"}).content.decode()
    assert "Newsletter" in body and "Customers" not in body


def test_a_public_unsubscribe_link_still_works_for_a_subscriber_added_in_the_admin(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    client.post(reverse("admin:growth_subscriber_add"), {
        "email": "new@example.com", "account": tenant.id, "segment": segment.id, "status": "confirmed"})
    subscriber = Subscriber.objects.get()
    token = make_token(account_id=tenant.id, subscriber_id=subscriber.id, campaign_id=None)
    assert Client().post(reverse("growth:unsubscribe", args=[token])).status_code == 200
    subscriber.refresh_from_db()
    assert subscriber.status == "unsubscribed"


@pytest.mark.parametrize("change", ["edit", "move", "add"])
def test_an_address_already_in_the_segment_is_a_form_error_not_a_500(client, staff, tenant, change):
    """The uniqueness reads email_lower, which is no field of the form: Django left it to the
    database, whose IntegrityError was a 500."""
    here, there = SegmentFactory(account=tenant), SegmentFactory(account=tenant)
    SubscriberFactory(segment=here, email="ann@example.com")
    if change == "add":
        url, data = reverse("admin:growth_subscriber_add"), {
            "email": "Ann@Example.com", "segment": here.pk, "account": tenant.pk,
            "status": "confirmed"}
    else:
        moving = SubscriberFactory(segment=there if change == "move" else here,
                                   email="ann@example.com" if change == "move" else "bob@example.com")
        url = reverse("admin:growth_subscriber_change", args=[moving.pk])
        data = {"email": "ANN@example.com", "segment": here.pk}

    response = client.post(url, data)

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["email"] == [
        f"ann@example.com is in the segment “{here}” already."]
    assert Subscriber.objects.filter(segment=here, email_lower="ann@example.com").count() == 1


def test_an_address_no_message_can_reach_is_a_form_error(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    response = client.post(reverse("admin:growth_subscriber_add"), {
        "email": "josé@example.com", "account": tenant.id, "segment": segment.id,
        "status": "confirmed"})
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["email"]
    assert error.startswith("josé@example.com cannot be mailed: its part before the @ is not ASCII")
    assert not Subscriber.objects.exists()


def test_a_csv_with_carriage_return_line_ends_is_imported_in_the_admin(tenant):
    segment = SegmentFactory(account=tenant)
    client = Client(raise_request_exception=False)
    client.force_login(operator(tenant))
    response = client.post(reverse("admin:growth_subscriber_import"),
                           {"segment": segment.pk, "status": "confirmed",
                            "file": SimpleUploadedFile("list.csv", b"email\rann@example.com\r"
                                                                   b"bob@example.com\r")})
    assert response.status_code == 200, response.status_code
    assert Subscriber.objects.filter(segment=segment).count() == 2
