"""Two editors of one account: its change form (fields and members together) carries the version
it was loaded from, and a save from a form older than the account is refused whole, in words (who
saved it last, when, what differs from what the form showed), nothing written, what was typed
still on the page; a reload saves. Writes to what surrounds the account (its warm-up quota, its
sending, its domains, a member added on the memberships page) are no new version of its form; a
member changed or removed there is one."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.test import Client
from django.urls import reverse

from growth.admin.audience import AccountAdmin
from growth.models import Account, Membership, RateLimit, SendingDomain
from growth.sending.transports.null import NullTransport
from growth.sending.worker import Worker
from tests.admin_forms import log_of, logged_in, posted_form, refusal, refused_page
from tests.factories import AccountFactory, UserFactory
from tests.helpers import concurrently, two_tabs_on
from tests.scenarios import operator, sending_campaign
from tests.test_check_sender import StubResolver

REFUSED = "changed this account since you opened it"


@pytest.fixture(autouse=True)
def offline_sender_panel(monkeypatch):
    """The account page checks its sender's DNS: answered here, at once."""
    from growth.deliverability import readiness

    monkeypatch.setattr(readiness, "default_resolver", lambda **kwargs: StubResolver({}))
    monkeypatch.setattr(readiness, "post_probe", lambda url, timeout: (400, ""))


@pytest.fixture
def member(tenant):
    return Membership.objects.create(user=UserFactory(username="mallory"), account=tenant,
                                     role=Membership.Role.EDITOR)


def account_url(account) -> str:
    return reverse("admin:growth_account_change", args=[account.pk])


def loaded(client: Client, account) -> dict:
    return posted_form(client, account_url(account))


def save(client: Client, account, form: dict, **changes):
    return client.post(account_url(account), {**form, **changes})


def role_field(form: dict, membership) -> str:
    (name,) = [n for n, v in form.items() if n.endswith("-id") and v == str(membership.pk)]
    return name.removesuffix("-id") + "-role"


# --- one after the other -------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_stale_form_saved_after_another_editors_save_is_refused_saying_who_when_and_what(tenant):
    alice, bob = logged_in("alice"), logged_in("bob")
    alices, bobs = loaded(alice, tenant), loaded(bob, tenant)

    assert save(alice, tenant, alices, warmup_until="250000").status_code == 302
    response = save(bob, tenant, bobs, from_name="Acme News")  # his page still says 100000

    message = refusal(response)
    assert REFUSED in message and "alice, " in message and "Changed Warm-up ends at." in message
    assert "Warm-up ends at is now “250000”" in message, message
    assert "From name" not in message and "Nothing was saved" in message
    tenant.refresh_from_db()
    assert (tenant.warmup_until, tenant.from_name, tenant.version) == (250_000, "Acme", 2)
    assert log_of(tenant) == ["alice"]
    body = response.content.decode()
    assert 'value="Acme News"' in body  # what he typed is still in front of him
    assert "Please correct the error below." in body

    response = save(bob, tenant, loaded(bob, tenant), from_name="Acme News")  # reloaded: it saves

    assert response.status_code == 302
    tenant.refresh_from_db()
    assert (tenant.warmup_until, tenant.from_name, tenant.version) == (250_000, "Acme News", 3)
    assert log_of(tenant) == ["bob", "alice"]


@pytest.mark.django_db
def test_a_refused_form_posted_again_as_it_is_is_refused_again(tenant):
    alice, bob = logged_in("alice"), logged_in("bob")
    bobs = loaded(bob, tenant)
    assert save(alice, tenant, loaded(alice, tenant), name="Acme Books").status_code == 302
    first = save(bob, tenant, bobs, from_name="Acme News")
    # what the refused page holds: his values, and the version and values it first showed
    again = {name: first.context["adminform"].form[name].value() for name in ("seen_version", "seen_values")}
    message = refusal(save(bob, tenant, {**bobs, **again}, from_name="Acme News"))
    assert REFUSED in message and "Name is now “Acme Books”" in message, message
    tenant.refresh_from_db()
    assert (tenant.name, tenant.from_name) == ("Acme Books", "Acme")


@pytest.mark.django_db
def test_every_field_the_account_form_edits_is_saved_by_its_compare_and_set(rf, tenant):
    from django.contrib import admin

    from growth.admin.account_edits import EDITED
    from growth.admin.versioned import SEEN

    request = rf.get("/")
    request.user = UserFactory(is_superuser=True, is_staff=True)
    form = admin.site._registry[Account].get_form(request, tenant, change=True)
    assert set(form.base_fields) - set(SEEN) == set(EDITED)


@pytest.mark.django_db
def test_a_save_of_the_same_values_is_no_new_version_and_refuses_no_other_form(tenant):
    alice, bob = logged_in("alice"), logged_in("bob")
    bobs = loaded(bob, tenant)
    assert save(alice, tenant, loaded(alice, tenant)).status_code == 302
    assert Account.objects.get(pk=tenant.pk).version == 1
    assert save(bob, tenant, bobs, from_name="Acme News").status_code == 302
    assert Account.objects.get(pk=tenant.pk).version == 2


# --- its members: part of the same form ------------------------------------------------------------

@pytest.mark.django_db
def test_a_stale_form_changing_only_a_member_is_refused_and_the_member_left_alone(tenant, member):
    alice, bob = logged_in("alice"), logged_in("bob")
    alices, bobs = loaded(alice, tenant), loaded(bob, tenant)
    assert save(alice, tenant, alices, warmup_daily_start="800").status_code == 302

    response = save(bob, tenant, bobs, **{role_field(bobs, member): "viewer"})

    message = refusal(response)
    assert REFUSED in message and "Messages on day 0 is now “800”" in message, message
    assert "its members neither" in message
    member.refresh_from_db()
    assert member.role == "editor"
    assert log_of(tenant) == ["alice"]
    assert 'value="viewer" selected' in response.content.decode()  # his choice, still shown


@pytest.mark.django_db
def test_a_change_of_its_members_only_is_a_new_version_that_refuses_a_form_loaded_before(tenant, member):
    alice, bob = logged_in("alice"), logged_in("bob")
    alices, bobs = loaded(alice, tenant), loaded(bob, tenant)
    assert save(alice, tenant, alices, **{role_field(alices, member): "viewer"}).status_code == 302
    assert Account.objects.get(pk=tenant.pk).version == 2

    message = refusal(save(bob, tenant, bobs, name="Acme Books"))

    assert "None of the fields you see differs" in message, message
    assert "alice, " in message and "Changed Role for membership" in message
    tenant.refresh_from_db()
    member.refresh_from_db()
    assert (tenant.name, member.role) == ("Acme", "viewer")


@pytest.mark.django_db
def test_a_stale_form_listing_a_member_deleted_since_is_refused_not_a_500(tenant, member):
    alice, bob = logged_in("alice"), logged_in("bob")
    alices, bobs = loaded(alice, tenant), loaded(bob, tenant)
    deleted = role_field(alices, member).removesuffix("-role") + "-DELETE"
    assert save(alice, tenant, alices, **{deleted: "on"}).status_code == 302

    message = refusal(save(bob, tenant, bobs, name="Acme Books"))

    assert "Deleted membership" in message, message
    tenant.refresh_from_db()
    assert tenant.name == "Acme" and not Membership.objects.exists()


# --- writes that are no editor's form --------------------------------------------------------------

@pytest.mark.django_db
def test_what_the_engine_and_other_pages_write_about_an_account_refuses_no_form_open_on_it(
        tenant, settings):
    Account.objects.filter(pk=tenant.pk).update(warmup_started_on=dt.date.today())
    tenant.refresh_from_db()
    alice = logged_in("alice")
    form = loaded(alice, tenant)

    settings.SENDER_RATE_LIMIT = 50  # the worker applies it, paces the tenant by its warm-up
    sending_campaign(count=3, account=tenant)
    Worker(batch_size=5, transport=NullTransport()).cycle()
    assert RateLimit.objects.filter(account=tenant, per_day__isnull=False).exists()
    SendingDomain.objects.create(account=tenant, domain="acme.example", selector="s1", private_key="k")
    newcomer = UserFactory(username="newcomer")
    assert alice.post(reverse("admin:growth_membership_add"), {
        "user": newcomer.pk, "account": tenant.pk, "role": "viewer"}).status_code == 302
    assert Account.objects.get(pk=tenant.pk).version == 1

    assert save(alice, tenant, form, from_name="Acme News").status_code == 302

    tenant.refresh_from_db()
    assert (tenant.from_name, tenant.version) == ("Acme News", 2)
    assert Membership.objects.filter(user=newcomer, account=tenant).exists()


# --- hand-made forms -------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("version", [None, "", "x", "1.5", "1e3", str(2**70), "-1", "9" * 5000])
def test_a_hand_made_version_is_a_form_error_never_a_500(tenant, version):
    alice = logged_in("alice")
    form = loaded(alice, tenant)
    if version is None:
        del form["seen_version"]
    else:
        form["seen_version"] = version
    response = save(alice, tenant, form, from_name="Acme News")
    assert REFUSED in refusal(response)
    tenant.refresh_from_db()
    assert (tenant.from_name, tenant.version) == ("Acme", 1) and log_of(tenant) == []


@pytest.mark.django_db
@pytest.mark.parametrize("seen", ["", "{", "[1, 2]", '{"name": ["x"], "warmup_until": {"a": 1}}',
                                  "[" * 10_000, '{"warmup_started_on": "not a date"}'])
def test_a_hand_made_copy_of_what_the_form_showed_neither_fails_nor_stops_a_save(tenant, seen):
    alice = logged_in("alice")
    form = loaded(alice, tenant)
    assert save(alice, tenant, form, seen_values=seen, name="Acme Books").status_code == 302
    assert REFUSED in refusal(save(alice, tenant, form, seen_values=seen, from_name="x"))
    tenant.refresh_from_db()
    assert (tenant.name, tenant.from_name) == ("Acme Books", "Acme")


# --- a tenant's own editors ------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_tenants_editor_is_refused_like_an_operator_and_another_tenants_member_gets_404(
        tenant, other_tenant):
    editor, outsider = Client(), Client()
    editor.force_login(operator(tenant, username="erin"))
    outsider.force_login(operator(other_tenant, username="oscar"))
    erins = loaded(editor, tenant)
    assert "seen_version" in erins and "slug" not in erins  # the slug is the platform's
    alice = logged_in("alice")
    assert save(alice, tenant, loaded(alice, tenant), slug="acme-books").status_code == 302

    message = refusal(save(editor, tenant, erins, time_zone="Asia/Tokyo"))

    assert "alice, " in message and "Changed Slug." in message, message
    assert outsider.get(account_url(tenant)).status_code == 404
    response = save(outsider, tenant, erins, seen_version="1", time_zone="Asia/Tokyo")
    assert response.status_code == 404 and "alice" not in response.content.decode()
    tenant.refresh_from_db()
    assert (tenant.slug, tenant.time_zone, tenant.version) == ("acme-books", "UTC", 2)


# --- at the same moment ----------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_two_editors_saving_at_the_same_moment_one_save_is_kept_the_other_refused(
        tenant, member, monkeypatch):
    """Both forms are validated, members included, against the same version before either
    writes: only the database can tell them apart."""
    editors = [logged_in("alice"), logged_in("bob")]
    forms = [loaded(editor, tenant) for editor in editors]
    edits = [{"warmup_until": "250000"}, {"from_name": "Acme News", role_field(forms[1], member): "viewer"}]
    both_validated = threading.Barrier(2, timeout=30)
    waited = set()
    save_related = AccountAdmin.save_related

    def wait_for_the_other_then_save(self, request, form, formsets, change):
        if threading.get_ident() not in waited:  # a thread's first save only
            waited.add(threading.get_ident())
            both_validated.wait()
        return save_related(self, request, form, formsets, change)

    monkeypatch.setattr(AccountAdmin, "save_related", wait_for_the_other_then_save)

    responses = concurrently(2, lambda i: save(editors[i], tenant, forms[i], **edits[i]))

    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 302], codes
    saved = 0 if responses[0].status_code == 302 else 1
    assert REFUSED in refused_page(responses[1 - saved])
    tenant.refresh_from_db()
    member.refresh_from_db()
    if saved == 0:
        assert (tenant.warmup_until, tenant.from_name, member.role) == (250_000, "Acme", "editor")
    else:
        assert (tenant.warmup_until, tenant.from_name, member.role) == (100_000, "Acme News", "viewer")
    assert tenant.version == 2
    assert log_of(tenant) == [("alice", "bob")[saved]]


# --- in a browser --------------------------------------------------------------------------------

@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_in_a_browser_the_older_tab_is_told_keeps_what_was_typed_and_a_reload_saves(
        browser, live_server):
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme")
    with two_tabs_on(browser, live_server, account_url(account)) as (first, second):
        first.fill("#id_warmup_until", "250000")
        first.click('input[name="_save"]')
        expect(first.locator(".messagelist")).to_contain_text("was changed successfully")

        second.fill("#id_from_name", "Acme News")
        second.click('input[name="_save"]')
        expect(second.locator(".errornote")).to_be_visible()
        errors = second.locator(".errorlist.nonfield")
        expect(errors).to_contain_text(REFUSED)
        expect(errors).to_contain_text("alice, ")
        expect(errors).to_contain_text("Warm-up ends at is now “250000”")
        expect(second.locator("#id_from_name")).to_have_value("Acme News")
        account.refresh_from_db()
        assert (account.warmup_until, account.from_name) == (250_000, "Acme")

        second.goto(account_url(account))
        second.fill("#id_from_name", "Acme News")
        second.click('input[name="_save"]')
        expect(second.locator(".messagelist")).to_contain_text("was changed successfully")
        account.refresh_from_db()
        assert (account.warmup_until, account.from_name) == (250_000, "Acme News")


@pytest.mark.django_db
@pytest.mark.parametrize("on_its_page", ["changed", "moved to another account"])
def test_a_role_changed_on_the_memberships_page_is_not_undone_by_a_form_of_the_account_opened_before(
        tenant, member, other_tenant, on_its_page):
    """The account form opened before shows the old role; unrefused, its members' inline would
    post it back (found by review: the demotion was silently undone)."""
    alice, bob = logged_in("alice"), logged_in("bob")
    bobs = loaded(bob, tenant)  # shows mallory as editor
    moved_to = other_tenant if on_its_page != "changed" else tenant
    url = reverse("admin:growth_membership_change", args=[member.pk])
    response = alice.post(url, {**posted_form(alice, url), "account": moved_to.pk, "role": "viewer"})
    assert response.status_code == 302

    assert REFUSED in refusal(save(bob, tenant, bobs, from_name="Acme News"))
    member.refresh_from_db()
    assert (member.role, member.account_id) == ("viewer", moved_to.id)
    tenant.refresh_from_db()
    assert tenant.from_name != "Acme News"


@pytest.mark.django_db
def test_a_member_removed_on_the_memberships_page_refuses_a_form_of_the_account_opened_before(
        tenant, member):
    alice, bob = logged_in("alice"), logged_in("bob")
    bobs = loaded(bob, tenant)
    response = alice.post(reverse("admin:growth_membership_changelist"), {
        "action": "delete_selected", "_selected_action": [member.pk], "post": "yes"})
    assert response.status_code == 302 and not Membership.objects.filter(pk=member.pk).exists()

    assert REFUSED in refusal(save(bob, tenant, bobs, from_name="Acme News"))
    assert not Membership.objects.filter(pk=member.pk).exists()
