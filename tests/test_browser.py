"""Real-browser tests: Playwright driving Debian's chromium (headless) against a live server.

Skipped, with the reason, when /usr/bin/chromium is absent (``apt-get install chromium``), unless
REQUIRE_BROWSER_TESTS is set, as .ci/run sets it: there a missing browser fails the run.
Set SCREENSHOT_DIR to keep a screenshot of each page the tests reach.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from growth.models import Account, Campaign, Send, Subscriber, Suppression
from growth.operations.campaigns import approve_campaign
from growth.sending.unsubscribe import make_token
from tests.factories import (
    AccountFactory,
    CampaignFactory,
    SegmentFactory,
    SubscriberFactory,
    UserFactory,
)
from tests.helpers import log_in
from tests.scenarios import member, operator, sending_campaign
from tests.test_sender_domains import sending_domain

PHONE = {"width": 375, "height": 740}

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shot(page, name: str) -> None:
    if directory := os.environ.get("SCREENSHOT_DIR"):
        Path(directory).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(directory) / f"{name}.png"), full_page=True)


def test_an_operator_approves_then_pauses_a_campaign_in_the_admin(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme")
    SubscriberFactory(segment=SegmentFactory(account=account), email="ann@example.com")
    campaign = CampaignFactory(account=account, name="Spring sale")
    operator(account, username="olga")
    log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_campaign_changelist"))
    shot(page, "admin-campaigns-draft")

    def run(action: str) -> None:
        page.check(f'input[name="_selected_action"][value="{campaign.pk}"]')
        page.select_option('select[name="action"]', action)
        page.click('button[name="index"]')
        shot(page, f"admin-campaigns-confirm-{action}")
        confirm = page.get_by_role("button", name=re.compile(r"^Yes, "))
        if confirm.count():  # a campaign the action cannot move has nothing to confirm
            confirm.click()

    run("approve")
    expect(page.locator(".messagelist")).to_contain_text("1 campaign approved: “Spring sale”.")
    campaign.refresh_from_db()
    assert campaign.status == "approved"

    assert Campaign.objects.start_due() == [campaign.id]  # what the worker does next
    page.goto(reverse("admin:growth_campaign_changelist"))
    run("pause")
    expect(page.locator(".messagelist")).to_contain_text("1 campaign paused: “Spring sale”.")
    expect(page.locator("#result_list tbody")).to_contain_text("Paused")
    shot(page, "admin-campaigns-paused")
    campaign.refresh_from_db()
    assert campaign.status == "paused"

    run("pause")  # again: nothing to confirm, and the page says why
    expect(page.locator(".growth-confirm")).to_contain_text(
        "left alone: a paused campaign cannot be paused.")
    page.locator("a.cancel-link").click()
    campaign.refresh_from_db()
    assert campaign.status == "paused"


def test_an_operator_clones_a_campaign_after_reading_that_no_recipient_is_touched(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme")
    campaign = CampaignFactory(account=account, name="Spring sale")
    operator(account, username="olga")
    log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_campaign_changelist"))
    page.check(f'input[name="_selected_action"][value="{campaign.pk}"]')
    page.select_option('select[name="action"]', "clone")
    page.click('button[name="index"]')
    shot(page, "admin-campaigns-confirm-clone")
    expect(page.locator(".growth-confirm")).to_contain_text(
        "“Copy of Spring sale”, a draft of Acme, from Spring sale (draft)")
    expect(page.locator(".growth-confirm")).to_contain_text("No recipient is touched")
    assert Campaign.objects.count() == 1  # asked, not done

    page.get_by_role("button", name="Yes, create 1 draft").click()
    expect(page.locator(".messagelist")).to_contain_text("1 draft created: Copy of Spring sale.")
    assert Campaign.objects.get(name="Copy of Spring sale").status == "draft"


def test_an_operator_deleting_the_only_segment_of_an_approved_campaign_is_refused(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme")
    newsletter = SegmentFactory(account=account, name="Newsletter")
    SegmentFactory(account=account, name="Customers")
    campaign = CampaignFactory(account=account, name="Spring sale")
    campaign.segments.set([newsletter])
    approve_campaign(campaign_id=campaign.id)
    operator(account, username="olga")
    log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_segment_change", args=[newsletter.pk]))
    page.get_by_role("link", name="Delete").click()  # refused before it asks
    shot(page, "admin-segment-delete-refused")
    expect(page.get_by_role("button", name=re.compile("Yes"))).to_have_count(0)

    expect(page.locator(".growth-confirm")).to_contain_text(
        "Nothing was deleted. Deleting the segment “Newsletter” would leave 1 campaign with no "
        "segment.")
    expect(page.get_by_role("link", name="Spring sale")).to_be_visible()
    assert list(campaign.segments.all()) == [newsletter]


def test_a_superuser_forgets_a_cached_domain_after_reading_who_is_on_it(page):
    from playwright.sync_api import expect

    from growth.models import MailDomain
    from tests.test_admin_forget_domains import cached, running

    cached("gmail.com", "google")
    running(AccountFactory(name="Acme"), ["ann@gmail.com", "bob@gmail.com"], name="Spring sale")
    UserFactory(username="root", is_staff=True, is_superuser=True)
    log_in(page, reverse("admin:login"), "root")
    page.goto(reverse("admin:growth_maildomain_changelist"))
    page.check('input[name="_selected_action"][value="gmail.com"]')
    page.select_option('select[name="action"]', "forget")
    page.click('button[name="index"]')
    shot(page, "admin-maildomains-confirm-forget")
    expect(page.locator(".growth-confirm")).to_contain_text(
        "2 recipients of 1 running campaign (sending or paused), not yet sent")
    assert MailDomain.objects.filter(domain="gmail.com").exists()  # asked, not done

    page.get_by_role("button", name="Yes, forget 1 domain").click()
    expect(page.locator(".messagelist")).to_contain_text("1 domain forgotten")
    assert not MailDomain.objects.filter(domain="gmail.com").exists()


def test_an_operator_confirms_a_pending_subscriber_after_reading_what_it_means(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme")
    segment = SegmentFactory(account=account)
    pending = SubscriberFactory(segment=segment, email="pia@example.com", status="pending")
    gone = SubscriberFactory(segment=segment, email="gus@example.com", status="unsubscribed")
    operator(account, username="olga")
    log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_subscriber_changelist"))
    for subscriber in (pending, gone):
        page.check(f'input[name="_selected_action"][value="{subscriber.pk}"]')
    page.select_option('select[name="action"]', "confirm_pending")
    page.click('button[name="index"]')

    expect(page.locator(".growth-confirm")).to_contain_text("1 pending subscriber will be confirmed")
    expect(page.locator(".growth-confirm")).to_contain_text("1 selected subscriber will be left alone")
    shot(page, "admin-subscribers-confirm-pending")
    assert Subscriber.objects.get(pk=pending.pk).status == "pending"
    page.get_by_role("button", name="Yes, confirm 1 subscriber").click()

    expect(page.locator(".messagelist")).to_contain_text("1 subscriber(s) confirmed.")
    assert dict(Subscriber.objects.values_list("email", "status")) == {
        "pia@example.com": "confirmed", "gus@example.com": "unsubscribed"}


def test_the_campaign_page_shows_progress_and_a_preview(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme")
    campaign = sending_campaign(count=4, account=account, name="Spring sale",
                                body_html="<h1>Spring</h1><p>Hello {{ email }}</p>")
    operator(account, username="olga")
    log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_campaign_change", args=[campaign.pk]))
    expect(page.locator(".growth-progress")).to_contain_text("0 / 4 sent")
    frame = page.frame_locator("iframe.growth-preview__html")
    expect(frame.locator("h1")).to_have_text("Spring")
    shot(page, "admin-campaign-change")


def test_an_operator_is_told_which_template_tags_a_campaign_may_use(page):
    """A draft may hold anything while it is written; its page's preview says what cannot be
    sent, and approval refuses it."""
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme")
    campaign = CampaignFactory(account=account, name="Spring sale", body_text="Hello {{ email }}")
    operator(account, username="olga")
    log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_campaign_change", args=[campaign.pk]))
    page.fill("#id_body_text", '{% for c in "0123456789" %}{{ c }}{% endfor %} {{ email }}')
    page.get_by_role("button", name="Save and continue editing").click()
    expect(page.get_by_text("Invalid block tag on line 1: 'for'")).to_be_visible()
    expect(page.get_by_text("Campaign templates allow the tags if, filter,")).to_be_visible()
    shot(page, "admin-campaign-template-refused")
    with pytest.raises(ValidationError, match="Campaign templates allow"):
        approve_campaign(campaign_id=campaign.pk, send_now=True)


def test_a_tenant_adds_finds_and_removes_a_suppression(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme", slug="acme")
    Suppression.objects.create(account=account, email_lower="already@example.com", reason="bounced")
    member(account, username="tina")
    log_in(page, reverse("growth:tenant:login"), "tina")
    expect(page.locator("h1")).to_have_text("Suppression list")

    page.get_by_role("link", name="Add", exact=True).click()
    page.fill("textarea[name=addresses]", "Noisy@Example.com\nquiet@example.com")
    page.get_by_role("button", name="Suppress").click()
    expect(page.locator(".messages")).to_contain_text("Suppressed 2: noisy@example.com, quiet@example.com.")
    shot(page, "tenant-list")

    page.fill("input[name=q]", "noisy")
    page.get_by_role("button", name="Search").click()
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("noisy@example.com")

    rows.first.get_by_role("link", name=re.compile("Remove")).click()
    expect(page.locator("h1")).to_contain_text("noisy@example.com")
    shot(page, "tenant-remove-confirm")
    assert Suppression.objects.filter(email_lower="noisy@example.com").exists()  # not yet
    page.get_by_role("button", name="Remove").click()
    expect(page.locator(".messages")).to_contain_text("noisy@example.com is no longer suppressed.")
    assert sorted(Suppression.objects.values_list("email_lower", flat=True)) == [
        "already@example.com", "quiet@example.com"]
    changes = page.locator("section", has=page.locator("#changes-title"))
    expect(changes).to_contain_text("tina · Removed noisy@example.com")
    expect(changes).to_contain_text("tina · Added quiet@example.com")
    shot(page, "tenant-list-changes")


def test_a_recipient_opens_the_link_and_unsubscribes(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="acme-books", from_name="Acme Books")
    campaign = CampaignFactory(account=account)
    subscriber = SubscriberFactory(segment=SegmentFactory(account=account), email="reader@example.com")
    token = make_token(account_id=account.id, subscriber_id=subscriber.id, campaign_id=campaign.id)
    response = page.goto(reverse("growth:unsubscribe", args=[token]))
    assert response.status == 200
    expect(page.locator("h1")).to_have_text("Unsubscribe from Acme Books?")
    expect(page.locator("main")).to_contain_text("r•••@e•••.com")
    assert "reader@example.com" not in page.content()  # the link may have been forwarded
    shot(page, "public-confirm")
    assert not Suppression.objects.exists()  # opening the link changed nothing
    page.get_by_role("button", name="Unsubscribe").click()
    expect(page.locator("h1")).to_have_text("You are unsubscribed")
    assert "/done/" in page.url  # Post/Redirect/Get
    shot(page, "public-done")
    suppression = Suppression.objects.get()
    assert (suppression.email_lower, suppression.reason, suppression.campaign_id) == (
        "reader@example.com", "unsubscribed", campaign.id)
    subscriber.refresh_from_db()
    assert subscriber.status == Subscriber.Status.UNSUBSCRIBED
    page.reload()  # no "resubmit the form?": nothing is posted again
    expect(page.locator("h1")).to_have_text("You are unsubscribed")

    page.goto(reverse("growth:unsubscribe", args=[token]))  # the email's link, opened again
    expect(page.locator("h1")).to_have_text("You are already unsubscribed")
    expect(page.locator("form")).to_have_count(0)

    bad = page.goto(reverse("growth:unsubscribe", args=[token[:-3]]))
    assert bad.status == 400
    expect(page.locator("h1")).to_have_text("This link is not valid")


def test_a_recipient_undoes_an_unsubscribe_made_by_mistake(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme Books")
    subscriber = SubscriberFactory(segment=SegmentFactory(account=account), email="reader@example.com")
    token = make_token(account_id=account.id, subscriber_id=subscriber.id, campaign_id=None)
    page.goto(reverse("growth:unsubscribe", args=[token]))
    page.get_by_role("button", name="Unsubscribe").click()
    expect(page.locator("h1")).to_have_text("You are unsubscribed")
    done_url = page.url
    page.get_by_role("link", name="Resubscribe").click()
    expect(page.locator("h1")).to_have_text("Resubscribe to Acme Books?")
    shot(page, "public-undo-confirm")
    assert Suppression.objects.exists()  # opening the undo changed nothing
    page.get_by_role("button", name="Resubscribe").click()
    expect(page.locator("h1")).to_have_text("You are subscribed again")
    shot(page, "public-undo-done")
    assert not Suppression.objects.exists()
    subscriber.refresh_from_db()
    assert subscriber.status == Subscriber.Status.CONFIRMED
    page.goto(done_url)  # the done page of an opt-out undone since asks again
    expect(page.locator("h1")).to_have_text("Unsubscribe from Acme Books?")


def test_a_tenant_suppresses_and_removes_an_address_from_its_lookup(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="Acme", slug="acme")
    SubscriberFactory(segment=SegmentFactory(account=account, name="News"), email="ann@example.com")
    member(account, username="tina")
    log_in(page, reverse("growth:tenant:login"), "tina")
    page.get_by_role("link", name="Look up an address").click()
    page.fill("input[name=email]", "ann@example.com")
    page.get_by_role("button", name="Look up").click()
    expect(page.locator("tbody tr").first).to_contain_text("Confirmed")
    page.select_option("select[name=reason]", "complained")
    page.get_by_role("button", name="Suppress").click()
    expect(page.locator(".messages")).to_contain_text("ann@example.com is suppressed.")
    expect(page.locator(".lookup-state")).to_contain_text("Suppressed (complained)")
    expect(page.locator("tbody tr").first).to_contain_text("Suppressed")
    expect(page.locator("tbody tr").first).not_to_contain_text("Confirmed")
    shot(page, "tenant-lookup-suppressed")
    assert Suppression.objects.get().reason == "complained"

    page.get_by_role("link", name=re.compile("Remove ann@example.com")).click()
    expect(page.locator("h1")).to_contain_text("ann@example.com")
    assert Suppression.objects.exists()  # not yet
    page.get_by_role("button", name="Remove").click()
    expect(page.locator(".messages")).to_contain_text("ann@example.com is no longer suppressed.")
    expect(page.locator(".lookup-state")).to_contain_text("Not on the suppression list.")
    assert not Suppression.objects.exists()


def test_a_tenant_user_cannot_reach_another_tenants_pages(page):
    mine = AccountFactory(name="Acme", slug="acme")
    theirs = AccountFactory(name="Globex", slug="globex")
    secret = Suppression.objects.create(account=theirs, email_lower="secret@globex.example")
    member(mine, username="tina")
    log_in(page, reverse("growth:tenant:login"), "tina")
    for path in (reverse("growth:tenant:suppressions", args=["globex"]),
                 reverse("growth:tenant:suppression-remove", args=["globex", secret.pk]),
                 reverse("growth:tenant:suppression-remove", args=["acme", secret.pk]),
                 reverse("growth:tenant:lookup", args=["globex"]) + "?email=secret@globex.example"):
        response = page.goto(path)
        assert response.status == 404, path
        assert "secret@globex.example" not in page.content()
        assert "Globex" not in page.content()
    assert Suppression.objects.filter(pk=secret.pk).exists()


def test_a_guesser_at_the_tenant_login_is_shown_why_it_may_not_sign_in(page, settings):
    from playwright.sync_api import expect

    settings.AXES_FAILURE_LIMIT = 3
    member(AccountFactory(name="Acme"), username="tina")
    login = reverse("growth:tenant:login")
    for _ in range(2):
        page.goto(login)
        page.fill("#id_username", "tina")
        page.fill("#id_password", "guess")
        page.get_by_role("button", name=re.compile("Log in", re.I)).click()
        expect(page.get_by_text("didn't match")).to_be_visible()
    page.fill("#id_username", "tina")
    page.fill("#id_password", "guess")
    with page.expect_response(lambda r: r.url.endswith(login)) as answer:
        page.get_by_role("button", name=re.compile("Log in", re.I)).click()
    assert answer.value.status == 429
    expect(page.get_by_role("heading", name="Too many attempts")).to_be_visible()
    expect(page.get_by_text("After 3 failed sign-ins to this account from your address")).to_be_visible()
    shot(page, "tenant-login-locked-out")
    log_in(page, login, "tina")  # the right password, from the same address: still refused
    expect(page.get_by_role("heading", name="Too many attempts")).to_be_visible()


def test_the_tenant_pages_fit_a_phone(browser, live_server):
    account = AccountFactory(name="Acme Books International", slug="acme")
    campaign = CampaignFactory(account=account, name="A rather long campaign name, spring edition")
    for n in range(3):
        Suppression.objects.create(account=account, reason="unsubscribed", campaign=campaign,
                                   email_lower=f"someone.with.a.long.address{n}@subdomain.example.com")
    member(account, username="tina")
    context = browser.new_context(base_url=live_server.url, viewport=PHONE, is_mobile=True)
    page = context.new_page()
    try:
        log_in(page, reverse("growth:tenant:login"), "tina")
        looked_up = "?email=someone.with.a.long.address0@subdomain.example.com"
        for name, query in (("suppressions", ""), ("suppression-add", ""), ("suppression-import", ""),
                            ("lookup", ""), ("lookup", looked_up)):
            page.goto(reverse(f"growth:tenant:{name}", args=["acme"]) + query)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{name}{query} is {overflow}px wider than the phone"
            shot(page, f"phone-{name}{'-result' if query else ''}")
    finally:
        context.close()


def test_an_operator_resends_a_paused_campaign_to_the_rest(page):
    from playwright.sync_api import expect

    from growth.operations.campaigns import pause_campaign

    account = AccountFactory(name="Acme")
    campaign = sending_campaign(count=5, account=account, name="Spring sale")
    rows = list(Send.objects.filter(campaign=campaign).order_by("id"))
    Send.objects.filter(id__in=[r.id for r in rows[:2]]).update(status="sent")
    Send.objects.filter(id=rows[2].id).update(status="failed")
    pause_campaign(campaign_id=campaign.id)
    operator(account, username="olga")
    log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_campaign_change", args=[campaign.pk]))
    page.get_by_role("link", name="Resend to the rest…").click()
    expect(page.locator("body")).to_contain_text("would reach 3 recipients")
    shot(page, "admin-campaign-resend")
    page.get_by_role("button", name="Create the follow-up (a draft)").click()
    expect(page.locator(".messagelist")).to_contain_text("Created the draft")
    expect(page.locator("body")).to_contain_text("follow-up of")
    # its segments are its original's: shown, with the reason, and no chooser to narrow them
    expect(page.locator("body")).to_contain_text("A follow-up's segments are its original's")
    expect(page.locator("select[id^=id_segments]")).to_have_count(0)
    shot(page, "admin-campaign-follow-up")
    follow_up = Campaign.objects.get(resend_of=campaign)
    assert follow_up.status == "draft" and follow_up.name == "Spring sale — resend to the rest"


def test_the_campaign_page_follows_a_live_send_then_pauses_from_its_button(page):
    """A real worker sends while the page is open: the counts move with no reload; the page's
    Pause button asks first, then pauses, and History says who did it."""
    import threading
    import time

    from playwright.sync_api import expect

    from growth.sending.transports.null import NullTransport
    from growth.sending.worker import Worker

    class SlowTransport(NullTransport):
        def send_bulk(self, deliveries):
            time.sleep(0.05 * len(deliveries))
            return super().send_bulk(deliveries)

    account = AccountFactory(name="Acme")
    campaign = sending_campaign(count=400, account=account, name="Spring sale")
    operator(account, username="olga")
    log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_campaign_change", args=[campaign.pk]))
    label = page.locator(".growth-progress__label a").first
    expect(label).to_have_text("0 / 400 sent")
    worker = Worker(worker_id="live", batch_size=10, transport=SlowTransport(), until_idle=True,
                    tick=0.2)
    sender = threading.Thread(target=worker.run, daemon=True)
    sender.start()
    try:
        expect(label).not_to_have_text("0 / 400 sent", timeout=20_000)  # polled, not reloaded
        shot(page, "admin-campaign-live")
        page.get_by_role("link", name="Pause…").click()
        expect(page.locator(".growth-confirm")).to_contain_text("queued wait until it is resumed")
        page.get_by_role("button", name="Yes, pause").click()
        expect(page.locator(".messagelist")).to_contain_text("1 campaign paused")
        sender.join(30)  # until_idle: a paused campaign leaves it nothing to do
        assert not sender.is_alive()
    finally:
        worker.stop()
        sender.join(30)
    campaign.refresh_from_db()
    assert campaign.status == "paused"
    sent = Send.objects.filter(campaign=campaign, status="sent").count()
    assert 0 < sent < 400
    page.reload()  # a paused campaign is polled only every half minute
    expect(label).to_have_text(f"{sent} / 400 sent")
    page.get_by_role("link", name="History").click()
    expect(page.locator("#change-history")).to_contain_text("Paused.")
    expect(page.locator("#change-history")).to_contain_text("olga")


def test_an_operator_cancelling_a_campaign_is_told_which_recipients_may_already_have_it(page):
    """A row handed over before its worker was lost waits to go again under its key (a receiver
    that de-duplicates). Cancelling ends that: the confirmation page counts it apart from the
    queued rows that will never get the campaign, and the message and History say what it
    became (unknown, for the operator to settle)."""
    from django.contrib.admin.models import LogEntry
    from django.utils import timezone
    from playwright.sync_api import expect

    campaign = sending_campaign(count=3, name="Winter sale")
    (lost,) = Send.objects.claim(worker_id="dead", batch_size=1, lease=60, hand_over=True)
    Send.objects.filter(id=lost.id).update(
        lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
    Send.objects.recover_expired(idempotent=True, max_attempts=5)  # queued again, in doubt
    operator(campaign.account, username="olga")
    log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_campaign_changelist"))
    page.check(f'input[name="_selected_action"][value="{campaign.pk}"]')
    page.select_option('select[name="action"]', "cancel")
    page.click('button[name="index"]')
    shot(page, "admin-campaigns-confirm-cancel-in-doubt")
    expect(page.locator(".growth-confirm")).to_contain_text(
        "2 queued recipients will never get it (cancelled); 1 queued again after an attempt "
        "that may have reached them may already have it: they become unknown, for you to "
        "settle; 0 on the wire")
    page.get_by_role("button", name=re.compile(r"^Yes, ")).click()
    expect(page.locator(".messagelist")).to_contain_text(
        "1 campaign cancelled: “Winter sale” (2 queued recipients dropped; 1 in doubt, now "
        "unknown).")
    assert Send.objects.get(id=lost.id).status == "unknown"
    assert LogEntry.objects.get().change_message == (
        "Cancelled (2 queued recipients dropped; 1 in doubt, now unknown).")


def test_an_operator_reads_why_the_transport_paused_a_campaign(page):
    """The relay refused our login: the worker paused the campaign. Its page says the fault is
    the transport's, not the recipients', what to mend, and that nothing was sent or counted."""
    from playwright.sync_api import expect

    from growth.sending.transports.errors import refusal_reason

    campaign = sending_campaign(count=3, name="Winter sale")
    Campaign.objects.pause(campaign_id=campaign.id,
                           reason=refusal_reason("535 5.7.8 Authentication credentials invalid"))
    operator(campaign.account, username="olga")
    log_in(page, reverse("admin:growth_campaign_change", args=[campaign.pk]), "olga")
    banner = page.locator(".growth-pause-reason")
    expect(banner).to_contain_text("the mail server or provider refused us, not the recipients")
    expect(banner).to_contain_text(
        "The transport refused us: 535 5.7.8 Authentication credentials invalid")
    expect(banner).to_contain_text("Fix the transport (its login or API key, its TLS")
    shot(page, "admin-campaign-refused-by-transport")


def test_a_recipient_whose_address_an_operator_changed_unsubscribes_the_address_mailed(page):
    from playwright.sync_api import expect

    account = AccountFactory(name="acme-books", from_name="Acme Books")
    subscriber = SubscriberFactory(segment=SegmentFactory(account=account), email="old@example.com")
    campaign = CampaignFactory(account=account)
    approve_campaign(campaign_id=campaign.id)
    assert campaign.id in Campaign.objects.start_due()
    Send.objects.build_recipients(campaign_id=campaign.id)
    subscriber.email = "new@example.com"
    subscriber.save()
    token = make_token(account_id=account.id, subscriber_id=subscriber.id, campaign_id=campaign.id)
    page.goto(reverse("growth:unsubscribe", args=[token]))
    expect(page.locator("main")).to_contain_text("o•••@e•••.com")  # the address mailed
    page.get_by_role("button", name="Unsubscribe").click()
    expect(page.locator("h1")).to_have_text("You are unsubscribed")
    assert list(Suppression.objects.values_list("email_lower", flat=True)) == ["old@example.com"]


def test_an_operator_corrects_the_sender_a_provider_refused_and_resumes_the_campaign(page):
    """The campaign goes out as the sender it started with: an account edit reaches it when it
    is resumed, and the resume's confirmation says so before it happens."""
    from playwright.sync_api import expect

    from growth.sending.transports.errors import refusal_reason

    campaign = sending_campaign(count=3, name="Winter sale", account__from_email="news@acme.example",
                                account__from_name="Acme")
    Campaign.objects.pause(campaign_id=campaign.id, reason=refusal_reason(
        "422 The 'From' address you supplied is not a Sender Signature on your account."))
    sending_domain(campaign.account, "acme.example")  # a tenant sends from its verified domains
    operator(campaign.account, username="olga")
    log_in(page, reverse("admin:growth_account_change", args=[campaign.account_id]), "olga")
    expect(page.locator("fieldset").first).to_contain_text(
        "an edit here reaches one sending now only when it is paused and resumed")
    page.fill("#id_from_email", "letters@acme.example")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")

    page.goto(reverse("admin:growth_campaign_change", args=[campaign.pk]))
    sends_as = page.locator(".field-sends_as")
    expect(sends_as).to_contain_text("Acme <news@acme.example>")
    page.get_by_role("link", name="Resume…").click()
    expect(page.locator(".growth-confirm")).to_contain_text(
        "They will go out from the account's sender now, “Acme <letters@acme.example>” "
        "(so far: “Acme <news@acme.example>”).")
    shot(page, "admin-campaign-resume-as-another-sender")
    page.get_by_role("button", name=re.compile(r"^Yes, ")).click()
    expect(sends_as).to_contain_text("Acme <letters@acme.example>")
    campaign.refresh_from_db()
    assert (campaign.status, campaign.from_email) == ("sending", "letters@acme.example")


def test_resuming_warns_of_an_unverified_sender_and_refuses_another_accounts_domain(page):
    """Two paused campaigns resumed from the list by a superuser: one sends as a domain nobody
    verified (warned, resumed), the other as a domain another account verified (refused)."""
    from playwright.sync_api import expect

    outside = sending_campaign(count=2, name="Outside", account__from_email="news@outside.example")
    taken = sending_campaign(count=2, name="Taken", account__from_email="news@acme.example")
    for campaign in (outside, taken):
        assert Campaign.objects.pause(campaign_id=campaign.id)
    sending_domain(AccountFactory(name="Globex"), "globex.example")
    Account.objects.filter(id=taken.account_id).update(from_email="ceo@globex.example")
    UserFactory(username="root", is_staff=True, is_superuser=True)
    log_in(page, reverse("admin:growth_campaign_changelist"), "root")
    for campaign in (outside, taken):
        page.check(f'input[name="_selected_action"][value="{campaign.pk}"]')
    page.select_option('select[name="action"]', "resume")
    page.click('button[name="index"]')

    warnings = page.locator(".growth-confirm__warning")
    expect(warnings).to_have_count(2)
    expect(warnings.nth(0)).to_contain_text(
        "Its sender news@outside.example is one the rule refuses to the account's members; it "
        "goes out as that sender all the same.")
    expect(warnings.nth(1)).to_contain_text(
        "It cannot go out: its sender ceo@globex.example is on globex.example, a sending domain "
        "another account has verified")
    shot(page, "admin-campaigns-resume-sender-warnings")
    page.get_by_role("button", name=re.compile(r"^Yes, ")).click()

    messages = page.locator(".messagelist")
    expect(messages).to_contain_text("1 campaign resumed: “Outside”.")
    expect(messages).to_contain_text("1 not resumed:")
    expect(messages).to_contain_text("“Taken”: It cannot go out: its sender ceo@globex.example")
    outside.refresh_from_db()
    taken.refresh_from_db()
    assert (outside.status, taken.status) == ("sending", "paused")


def test_a_tenant_verifies_its_domain_in_dns_then_sends_from_it(page, settings):
    from playwright.sync_api import expect

    from tests.dns_server import DnsServer
    from tests.test_sender_domains import record_of

    account = AccountFactory(name="Acme")
    domain = sending_domain(account, "acme.example", verified=False)
    operator(account, username="olga")
    dns = DnsServer(txt={"zy1._domainkey.acme.example": [record_of(domain.private_key)]}).start()
    settings.DELIVERABILITY_DNS = dns.address
    try:
        log_in(page, reverse("admin:growth_account_change", args=[account.pk]), "olga")
        page.fill("#id_from_email", "letters@acme.example")
        page.get_by_role("button", name="Save", exact=True).click()
        expect(page.locator(".errorlist")).to_contain_text(
            "acme.example is not one of this account's verified sending domains")
        shot(page, "admin-account-sender-refused")

        page.goto(reverse("admin:growth_sendingdomain_change", args=[domain.pk]))
        expect(page.locator(".field-verification")).to_contain_text("not yet")
        page.get_by_role("button", name="Verify in DNS").click()
        expect(page.locator(".messagelist")).to_contain_text(
            "acme.example (TXT zy1._domainkey.acme.example): verified.")
        expect(page.locator(".field-verification")).to_contain_text("verified 2")
        shot(page, "admin-sending-domain-verified")
    finally:
        dns.stop()

    page.goto(reverse("admin:growth_account_change", args=[account.pk]))
    page.fill("#id_from_email", "letters@acme.example")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    account.refresh_from_db()
    assert account.from_email == "letters@acme.example"


def test_an_operator_told_the_messages_are_too_large_resends_a_smaller_one_to_the_rest(page):
    from playwright.sync_api import expect

    from growth.sending.transports.errors import refusal_reason

    campaign = sending_campaign(count=3, name="Lookbook", body_text="Big pictures\n")
    Campaign.objects.pause(campaign_id=campaign.id, reason=refusal_reason(
        "552 5.3.4 Message size exceeds fixed maximum message size"))
    operator(campaign.account, username="olga")
    log_in(page, reverse("admin:growth_campaign_change", args=[campaign.pk]), "olga")
    banner = page.locator(".growth-pause-reason")
    expect(banner).to_contain_text("the mail server refuses its messages as too large")
    expect(banner).not_to_contain_text("Fix the transport")
    shot(page, "admin-campaign-too-large")
    page.get_by_role("link", name="Resend to the rest…").click()
    expect(page.locator("body")).to_contain_text("would reach 3 recipients")
    page.get_by_role("button", name="Create the follow-up (a draft)").click()
    expect(page.locator(".messagelist")).to_contain_text("Created the draft")
    page.fill("#id_body_text", "Small pictures, on our site")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    follow_up = Campaign.objects.get(resend_of=campaign)
    assert (follow_up.status, follow_up.body_text) == ("draft", "Small pictures, on our site")
