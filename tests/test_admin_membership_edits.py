"""Two operators editing one membership: its page carries the version it was loaded from, and a
save from a page older than the membership is refused whole, in words (who saved it last, when,
what differs from what the page showed), nothing written, what was typed still on the page; a
reload saves. A member changed in its account's form is a new version too. A demotion is never
silently undone by a page opened before it."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from growth.admin.audience import MembershipAdmin
from growth.models import Account, Membership
from tests.admin_forms import (
    log_of,
    logged_in,
    posted_form,
    refusal,
    refused_page,
    validated_together,
)
from tests.factories import UserFactory
from tests.helpers import concurrently, two_tabs_on
from tests.test_admin_account_edits import offline_sender_panel  # noqa: F401 - autouse

REFUSED = "changed this membership since you opened it"


@pytest.fixture
def member(tenant):
    return Membership.objects.create(user=UserFactory(username="mallory"), account=tenant,
                                     role=Membership.Role.EDITOR)


def membership_url(membership) -> str:
    return reverse("admin:growth_membership_change", args=[membership.pk])


def loaded(client: Client, membership) -> dict:
    return posted_form(client, membership_url(membership))


def save(client: Client, membership, form: dict, **changes):
    return client.post(membership_url(membership), {**form, **changes})


# --- one after the other -------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_stale_page_saved_after_a_demotion_is_refused_and_the_demotion_kept(
        tenant, member, other_tenant):
    alice, bob = logged_in("alice"), logged_in("bob")
    alices, bobs = loaded(alice, member), loaded(bob, member)

    assert save(alice, member, alices, role="viewer").status_code == 302
    response = save(bob, member, bobs, account=str(other_tenant.pk))  # his page still says editor

    message = refusal(response)
    assert REFUSED in message and "alice, " in message and "Changed Role." in message, message
    assert "Role is now “Viewer (read only)”" in message and "Account" not in message, message
    assert "Nothing was saved: what you typed is still below." in message
    member.refresh_from_db()
    assert (member.role, member.account_id, member.version) == ("viewer", tenant.pk, 2)
    assert log_of(member) == ["alice"]
    assert f'<option value="{other_tenant.pk}" selected>' in response.content.decode()

    response = save(bob, member, loaded(bob, member), account=str(other_tenant.pk))  # reloaded

    assert response.status_code == 302
    member.refresh_from_db()
    assert (member.role, member.account_id, member.version) == ("viewer", other_tenant.pk, 3)
    assert log_of(member) == ["bob", "alice"]


@pytest.mark.django_db
def test_a_save_of_the_same_values_is_no_new_version_of_the_membership_nor_of_its_account(member):
    alice, bob = logged_in("alice"), logged_in("bob")
    bobs = loaded(bob, member)
    assert save(alice, member, loaded(alice, member)).status_code == 302
    assert Membership.objects.get(pk=member.pk).version == 1
    assert Account.objects.get(pk=member.account_id).version == 1
    assert save(bob, member, bobs, role="viewer").status_code == 302
    assert Membership.objects.get(pk=member.pk).version == 2
    assert Account.objects.get(pk=member.account_id).version == 2  # its form shows the role


@pytest.mark.django_db
def test_a_role_changed_in_its_accounts_form_refuses_a_page_of_the_membership_opened_before(
        tenant, member):
    alice, bob = logged_in("alice"), logged_in("bob")
    bobs = loaded(bob, member)
    account_url = reverse("admin:growth_account_change", args=[tenant.pk])
    accounts = posted_form(alice, account_url)
    (role,) = [name.removesuffix("-id") + "-role" for name, value in accounts.items()
               if name.endswith("-id") and value == str(member.pk)]
    assert alice.post(account_url, {**accounts, role: "viewer"}).status_code == 302

    message = refusal(save(bob, member, bobs, account=str(tenant.pk)))

    assert REFUSED in message and "Role is now “Viewer (read only)”" in message, message
    member.refresh_from_db()
    assert (member.role, member.version) == ("viewer", 2)


@pytest.mark.django_db
def test_its_page_carries_the_version_it_showed_once(member):
    body = logged_in("alice").get(membership_url(member)).content.decode()
    assert body.count('name="seen_version" value="1"') == 1 and body.count('name="seen_values"') == 1


@pytest.mark.django_db
def test_a_new_member_is_added_without_a_version_to_name(tenant):
    alice = logged_in("alice")
    form = posted_form(alice, reverse("admin:growth_membership_add"))
    assert "seen_version" not in form
    user = UserFactory(username="newcomer")
    response = alice.post(reverse("admin:growth_membership_add"),
                          {**form, "user": user.pk, "account": tenant.pk, "role": "viewer"})
    assert response.status_code == 302
    assert Membership.objects.get(user=user).version == 1


# --- hand-made forms -------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("version", [None, "", "x", "1.5", "1e3", str(2**70), "-1", "0", "2",
                                     "9" * 5000, "1\x00"])
def test_a_hand_made_version_is_a_form_error_never_a_500(member, version):
    alice = logged_in("alice")
    form = loaded(alice, member)
    if version is None:
        del form["seen_version"]
    else:
        form["seen_version"] = version
    response = save(alice, member, form, role="viewer")
    assert REFUSED in refusal(response)
    member.refresh_from_db()
    assert (member.role, member.version) == ("editor", 1) and log_of(member) == []
    assert Account.objects.get(pk=member.account_id).version == 1


@pytest.mark.django_db
@pytest.mark.parametrize("seen", ["", "{", "[1, 2]", '{"role": ["x"], "user": {"a": 1}}',
                                  '{"account": "not an id"}', "[" * 10_000])
def test_a_hand_made_copy_of_what_the_page_showed_neither_fails_nor_stops_a_save(member, seen):
    alice = logged_in("alice")
    form = loaded(alice, member)
    assert save(alice, member, form, seen_values=seen, role="viewer").status_code == 302
    assert REFUSED in refusal(save(alice, member, form, seen_values=seen, role="editor"))
    member.refresh_from_db()
    assert member.role == "viewer"


# --- at the same moment ----------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_two_operators_saving_one_membership_at_the_same_moment_one_is_kept_the_other_refused(
        tenant, other_tenant, member, monkeypatch):
    """Both pages are validated against the same version before either writes: only the
    database can tell them apart."""
    operators = [logged_in("alice"), logged_in("bob")]
    forms = [loaded(operator, member) for operator in operators]
    edits = [{"role": "viewer"}, {"account": str(other_tenant.pk)}]
    validated_together(monkeypatch, MembershipAdmin)

    responses = concurrently(2, lambda i: save(operators[i], member, forms[i], **edits[i]))

    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 302], codes
    saved = 0 if responses[0].status_code == 302 else 1
    assert REFUSED in refused_page(responses[1 - saved])
    member.refresh_from_db()
    kept = [("viewer", tenant.pk), ("editor", other_tenant.pk)][saved]
    assert (member.role, member.account_id) == kept
    assert member.version == 2
    assert log_of(member) == [("alice", "bob")[saved]]
    assert LogEntry.objects.count() == 1


# --- in a browser --------------------------------------------------------------------------------

@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_in_a_browser_the_older_tab_cannot_undo_a_demotion_and_a_reload_saves(
        browser, live_server, member):
    from playwright.sync_api import expect

    with two_tabs_on(browser, live_server, membership_url(member)) as (first, second):
        first.select_option("#id_role", "viewer")
        first.click('input[name="_save"]')
        expect(first.locator(".messagelist")).to_contain_text("was changed successfully")

        second.click('input[name="_save"]')  # as it was opened: editor
        expect(second.locator(".errornote")).to_be_visible()
        errors = second.locator(".errorlist.nonfield")
        expect(errors).to_contain_text(REFUSED)
        expect(errors).to_contain_text("Role is now “Viewer (read only)”")
        member.refresh_from_db()
        assert member.role == "viewer"

        second.goto(membership_url(member))
        expect(second.locator("#id_role")).to_have_value("viewer")
        second.select_option("#id_role", "editor")
        second.click('input[name="_save"]')
        expect(second.locator(".messagelist")).to_contain_text("was changed successfully")
        member.refresh_from_db()
        assert (member.role, member.version) == ("editor", 3)
