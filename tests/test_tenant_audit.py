"""Every write a member makes in /app/ is recorded (a LogEntry naming the user, kept with the
account), shown to that account's members only, and to no other tenant in /app/ or the admin."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils.html import escape

from growth.models import Account, Suppression
from tests import tenant_pages
from tests.scenarios import member, operator
from tests.tenant_pages import url

pytestmark = pytest.mark.django_db

tenant, other_tenant, user = tenant_pages.tenant, tenant_pages.other_tenant, tenant_pages.user


def entries(**filters) -> list[LogEntry]:
    return list(LogEntry.objects.filter(**filters).order_by("id"))


def suppressions_type() -> ContentType:
    return ContentType.objects.get_for_model(Suppression)


def page(client, name, account, *args, **params) -> str:
    response = client.get(url(name, account, *args), params)
    assert response.status_code == 200
    return response.content.decode()


def test_adding_records_one_entry_per_address_added(client, user, tenant):
    Suppression.objects.create(account=tenant, email_lower="kept@example.com", reason="bounced")
    client.post(url("suppression-add", tenant),
                {"addresses": "one@example.com, kept@example.com\nTwo@Example.com", "reason": "complained"})
    added = entries()
    rows = {s.email_lower: s for s in Suppression.objects.filter(account=tenant)}
    assert [(e.action_flag, e.content_type, e.object_id, e.object_repr, e.user) for e in added] == [
        (ADDITION, suppressions_type(), str(rows[email].pk), email, user)
        for email in sorted(["one@example.com", "two@example.com"], key=lambda e: rows[e].pk)]
    assert all(e.change_message == "Added to the suppression list in /app/ (complained)." for e in added)

    # nothing added (an invalid line refuses the whole paste), nothing recorded
    client.post(url("suppression-add", tenant), {"addresses": "new@example.com\nBcc: x", "reason": "manual"})
    assert len(entries()) == 2
    body = page(client, "suppressions", tenant)
    assert body.count("Added to the suppression list in /app/ (complained).") == 2
    assert "kept@example.com" in body and body.count(user.username) >= 2


def test_suppressing_from_a_lookup_records_it_once(client, user, tenant):
    client.post(url("lookup-suppress", tenant), {"email": "Ann@Example.com", "reason": "manual"})
    client.post(url("lookup-suppress", tenant), {"email": "ann@example.com", "reason": "manual"})  # already
    row = Suppression.objects.get(account=tenant)
    [entry] = entries()
    assert (entry.action_flag, entry.object_id, entry.object_repr, entry.user) == (
        ADDITION, str(row.pk), "ann@example.com", user)
    body = page(client, "lookup", tenant, email="ann@example.com")
    assert "Changes to this address" in body and "Added to the suppression list in /app/ (manual)." in body


def test_an_import_is_one_entry_on_the_account_with_its_count_and_file(client, user, tenant):
    Suppression.objects.create(account=tenant, email_lower="kept@example.com")
    listing = b"email\na@example.com\nb@example.com\nkept@example.com\nc@example.com\n"
    client.post(url("suppression-import", tenant),
                {"file": SimpleUploadedFile("list.csv", listing), "check_only": "on"})
    client.post(url("suppression-import", tenant),
                {"file": SimpleUploadedFile("list.csv", listing + b"bad@\n")})  # refused
    assert entries() == []
    client.post(url("suppression-import", tenant), {"file": SimpleUploadedFile("list.csv", listing)})
    [entry] = entries()
    assert (entry.action_flag, entry.content_type, entry.object_id, entry.user) == (
        CHANGE, ContentType.objects.get_for_model(Account), str(tenant.pk), user)
    assert entry.change_message == "Imported 3 suppressions from “list.csv” in /app/."
    client.post(url("suppression-import", tenant), {"file": SimpleUploadedFile("again.csv", listing)})
    assert len(entries()) == 1  # all already suppressed: nothing written, nothing recorded
    assert "Imported 3 suppressions from “list.csv” in /app/." in page(client, "suppressions", tenant)


def test_a_removal_records_who_lifted_which_address_and_the_page_says_so(client, user, tenant):
    row = Suppression.objects.create(account=tenant, email_lower="gone@example.com", reason="bounced")
    assert "recorded with your username" in page(client, "suppression-remove", tenant, row.pk)
    client.post(url("suppression-remove", tenant, row.pk))
    assert client.post(url("suppression-remove", tenant, row.pk)).status_code == 404  # no entry
    [entry] = entries()
    assert (entry.action_flag, entry.content_type, entry.object_id, entry.object_repr, entry.user) == (
        DELETION, suppressions_type(), str(row.pk), "gone@example.com", user)
    assert entry.change_message.startswith(
        "Removed from the suppression list in /app/ (it was bounced, since ")
    for body in (page(client, "lookup", tenant, email="gone@example.com"),
                 page(client, "suppressions", tenant)):
        assert "Removed" in body and "gone@example.com" in body and user.username in body


def test_a_viewer_reads_the_trail_but_its_refused_writes_record_nothing(client, tenant):
    editor = member(tenant, username="ed")
    row = Suppression.objects.create(account=tenant, email_lower="stay@example.com")
    client.force_login(editor)
    client.post(url("suppression-add", tenant), {"addresses": "new@example.com", "reason": "manual"})
    client.force_login(member(tenant, role="viewer"))
    for response in (
            client.post(url("suppression-add", tenant), {"addresses": "v@example.com", "reason": "manual"}),
            client.post(url("lookup-suppress", tenant), {"email": "v@example.com", "reason": "manual"}),
            client.post(url("suppression-remove", tenant, row.pk)),
            client.post(url("suppression-import", tenant),
                        {"file": SimpleUploadedFile("v.csv", b"v@example.com\n")})):
        assert response.status_code == 403
    assert [e.user for e in entries()] == [editor]
    assert Suppression.objects.filter(account=tenant).count() == 2
    body = page(client, "suppressions", tenant)
    assert "Recent changes" in body and "new@example.com" in body and ">ed<" in body


def test_another_tenants_members_and_staff_never_see_the_entries(client, tenant, other_tenant):
    editor = member(tenant, username="acme-editor")
    client.force_login(editor)
    client.post(url("suppression-add", tenant), {"addresses": "kept@example.com", "reason": "manual"})
    client.post(url("suppression-import", tenant),
                {"file": SimpleUploadedFile("acme-list.csv", b"acme-import@example.com\n")})
    removed = Suppression.objects.create(account=tenant, email_lower="lifted@example.com")
    client.post(url("suppression-remove", tenant, removed.pk))
    kept = Suppression.objects.get(account=tenant, email_lower="kept@example.com")
    secrets = ("acme-editor", "kept@example.com", "lifted@example.com", "acme-list.csv")

    client.force_login(member(other_tenant))
    Suppression.objects.create(account=other_tenant, email_lower="lifted@example.com")
    seen = page(client, "suppressions", other_tenant) + page(client, "lookup", other_tenant,
                                                              email="lifted@example.com")
    assert "acme-editor" not in seen and "acme-list.csv" not in seen and "No change made here yet" in seen

    history = [f"/admin/growth/suppression/{kept.pk}/history/", f"/admin/growth/account/{tenant.pk}/history/"]
    client.force_login(operator(tenant))
    shown = "".join(client.get(path).content.decode() for path in history)
    assert "acme-editor" in shown and "Imported 1 suppression from “acme-list.csv” in /app/." in shown
    client.force_login(operator(other_tenant))
    for path in history:
        assert client.get(path).status_code == 404
    assert client.get("/admin/admin/logentry/").status_code == 404  # LogEntry has no list
    index = client.get("/admin/").content.decode()
    assert not any(secret in index for secret in secrets)


def test_hostile_input_is_stored_whole_and_shown_escaped(client, tenant):
    hostile_user = member(tenant, username="<b>ann</b>")
    client.force_login(hostile_user)
    odd = "o'neil&co+{x}|~@example.com"
    long = "l" * 64 + "@" + "d" * 63 + "." + "e" * 63 + "." + "f" * 53 + ".example"  # 254 characters
    client.post(url("suppression-add", tenant), {"addresses": f"{odd}\n{long}", "reason": "manual"})
    assert len(long) == 254
    [first, second] = entries()
    assert first.object_repr == odd and second.object_repr == long[:200]
    file_name = "<img src=x onerror=alert(1)>\r\nBcc: victim@example.com\x00.csv"
    response = client.post(url("suppression-import", tenant),
                           {"file": SimpleUploadedFile(file_name, b"imported@example.com\n")})
    assert response.status_code == 200
    [imported] = entries(action_flag=CHANGE)
    assert "\x00" not in imported.change_message and "\n" not in imported.change_message
    client.post(url("suppression-remove", tenant,
                    Suppression.objects.get(account=tenant, email_lower=long).pk))

    body = page(client, "suppressions", tenant)
    assert "<b>ann</b>" not in body and escape("<b>ann</b>") in body
    assert "<img" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body
    assert escape(odd) in body and odd not in body
    lookup = page(client, "lookup", tenant, email=long)
    assert lookup.count(long) >= 2  # the address, and its removal in full (object_repr keeps 200)
    assert "Removed" in lookup


# --- the trail outlives the member who wrote it ---------------------------------------------------

def test_the_trail_still_says_who_lifted_a_suppression_once_their_user_is_deleted(client, tenant):
    row = Suppression.objects.create(account=tenant, email_lower="gone@example.com", reason="bounced")
    leaver = member(tenant, username="leaver")
    client.force_login(leaver)
    client.post(url("suppression-remove", tenant, row.pk))
    client.post(url("suppression-add", tenant), {"addresses": "new@example.com", "reason": "manual"})
    [removal, _] = entries()

    leaver.delete()
    assert not LogEntry.objects.exists()  # Django's: a user's entries go with it

    client.force_login(member(tenant, username="stayer"))
    for body in (page(client, "lookup", tenant, email="gone@example.com"),
                 page(client, "suppressions", tenant)):
        assert "<strong>leaver</strong> · Removed <span class=\"address\">gone@example.com</span>" in body
        assert escape(removal.change_message) in body
    assert "<strong>leaver</strong> · Added <span class=\"address\">new@example.com</span>" in page(
        client, "suppressions", tenant)
