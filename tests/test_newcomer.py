"""A newcomer's path: the site's front door, the demo's logins, a report whose figures add up
on the page, and commands whose --help says their defaults."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command, load_command_class

from growth.models import Campaign, Membership, Send, Subscriber, Suppression
from growth.sending.transports.null import NullTransport
from growth.sending.unsubscribe import make_token
from growth.sending.worker import Worker
from tests.factories import CampaignFactory, SegmentFactory, SubscriberFactory, UserFactory
from tests.scenarios import audience, member, operator


@pytest.mark.django_db
def test_the_front_door_shows_a_stranger_where_operators_and_tenants_sign_in(client):
    page = client.get("/")
    assert page.status_code == 200
    body = page.content.decode()
    assert 'href="/admin/"' in body and 'href="/app/"' in body


@pytest.mark.django_db
def test_the_front_door_sends_an_operator_to_the_admin_and_a_tenant_to_their_accounts(client, tenant):
    client.force_login(operator(tenant))
    assert client.get("/").headers["Location"] == "/admin/"
    client.force_login(member(tenant, role="viewer"))
    assert client.get("/").headers["Location"] == "/app/"
    client.force_login(UserFactory())  # neither: the page
    assert client.get("/").status_code == 200


@pytest.mark.django_db
def test_the_front_door_leaves_the_public_unsubscribe_page_alone(client, tenant):
    subscriber = SubscriberFactory(segment__account=tenant)
    token = make_token(account_id=tenant.id, subscriber_id=subscriber.id, campaign_id=None)
    page = client.get(f"/u/{token}/")
    assert page.status_code == 200 and "Unsubscribe" in page.content.decode()
    assert client.post("/").status_code == 405


# --- seed_demo's logins --------------------------------------------------------------------------

def seed(*args: str, **options) -> str:
    out = StringIO()
    call_command("seed_demo", "--subscribers", "120", *args, stdout=out, **options)
    return out.getvalue()


@pytest.mark.django_db
def test_no_demo_login_is_made_with_debug_off_unless_asked(settings):
    settings.DEBUG = False
    out = seed()
    assert not User.objects.exists()
    assert "no demo logins" in out and "--demo-logins" in out


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["flag", "debug"])
def test_demo_logins_are_made_with_the_flag_or_debug_and_their_printed_passwords_work(
        settings, client, how):
    settings.DEBUG = how == "debug"
    out = seed("--demo-logins") if how == "flag" else seed()
    logins = dict(re.findall(r"user (\w+)\s+password (\S+)", out))
    assert set(logins) == {"operator", "tenant"}

    staff = User.objects.get(username="operator")
    assert staff.is_staff and not staff.is_superuser
    (group,) = staff.groups.all()
    assert group.name == "Operators"
    assert set(group.permissions.all()) == set(Permission.objects.filter(
        content_type__app_label="growth"))
    tenant_user = User.objects.get(username="tenant")
    assert not tenant_user.is_staff
    memberships = set(Membership.objects.values_list("user__username", "account__slug", "role"))
    assert memberships == {("operator", "acme", "editor"), ("tenant", "acme", "editor")}

    def sign_in(page: str, username: str) -> bool:
        client.logout()
        client.post(page, {"username": username, "password": logins[username]})
        return "_auth_user_id" in client.session

    assert sign_in("/admin/login/", "operator")
    assert client.get("/admin/growth/campaign/").status_code == 200
    assert sign_in("/app/login/", "tenant")
    assert client.get("/app/", follow=True).status_code == 200

    seed("--demo-logins")  # again: the same users, the printed passwords still right
    assert User.objects.count() == 2 and Membership.objects.count() == 2
    assert sign_in("/admin/login/", "operator")


# --- campaign_report ----------------------------------------------------------------------------

LINE = re.compile(r"^\s+(?P<sign>[-+=]?)\s*(?P<label>.*?)\s+(?P<n>-?[\d,]+)$")


def report(*args) -> str:
    out = StringIO()
    call_command("campaign_report", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_the_report_shows_a_campaigns_name_on_one_line_without_controls():
    """A name typed with ESC sequences (which the operator's terminal would act on) and a line
    break (a forged figure below the heading) is printed as one line of text."""
    from tests.scenarios import sending_campaign

    forged = "Spring\x1b]0;owned\x07\x1b[2J\n    sent (accepted by the mail server)    1,000,000"
    campaign = sending_campaign(count=3, name=forged)
    text = report(str(campaign.id))
    assert "\x1b" not in text and "\x07" not in text
    assert not any("1,000,000" in line for line in text.splitlines()[1:])  # no forged figure
    assert text.splitlines()[0].startswith(f"Campaign {campaign.id} “Spring ]0;owned [2J sent")


@pytest.mark.django_db
def test_the_report_of_a_campaign_nobody_has_says_so():
    """0 is an id too: it was read as "not given", and the latest campaign was reported."""
    from django.core.management import CommandError

    from tests.scenarios import sending_campaign

    sending_campaign(count=1, name="The latest")
    with pytest.raises(CommandError, match="No such campaign"):
        report("0")


@pytest.mark.django_db
def test_seed_demo_refuses_a_negative_count_as_a_usage_error():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="a count is 0 or more"):
        call_command("seed_demo", "--subscribers", "-3", stdout=StringIO())


def figures(text: str) -> dict[str, dict[str, int]]:
    """{section heading: {label: figure}}, checking on the way that every "=" line is what the
    lines above it in its section add up to (plain and "+" lines add, "-" lines subtract)."""
    sections: dict[str, dict[str, int]] = {}
    section, running = None, 0
    for line in text.splitlines():
        if not line.startswith(" "):
            section, running = line, 0
            sections[section] = {}
            continue
        found = LINE.match(line)
        assert found, f"not a figure: {line!r}"
        sign, label, n = found["sign"], found["label"], int(found["n"].replace(",", ""))
        if sign == "=":
            assert n == running, f"{section}: {label} is {n}, the lines above make {running}"
        else:
            running += -n if sign == "-" else n
        sections[section][f"{sign} {label}".strip()] = n
    return sections


def section(sections: dict, heading: str) -> dict[str, int]:
    (found,) = [figures for title, figures in sections.items() if title.startswith(heading)]
    return found


@pytest.mark.django_db(transaction=True)
def test_the_demo_report_adds_up_on_the_page():
    seed()
    campaign = Campaign.objects.get()
    assert Campaign.objects.start_due() == [campaign.id]
    Send.objects.build_recipients(campaign_id=campaign.id)
    recipients = list(Send.objects.filter(campaign=campaign).order_by("id"))
    # after the build: a recipient opts out, a subscriber joins, a recipient's address is
    # suppressed once its message went out (an ESP's bounce, say)
    Suppression.objects.suppress(account_id=campaign.account_id,
                                 email_lower=recipients[0].email_lower, reason="unsubscribed")
    SubscriberFactory(segment=Subscriber.objects.first().segment, email="late@example.com")
    Worker(worker_id="w", transport=NullTransport(), batch_size=200, tick=0.05,
           until_idle=True).run()
    Suppression.objects.suppress(account_id=campaign.account_id,
                                 email_lower=recipients[1].email_lower, reason="bounced")

    sections = figures(report())
    audience = section(sections, "Audience")
    outcomes = section(sections, "Recipients by outcome")
    total = len(recipients)
    assert audience["= recipients"] == outcomes["= recipients"] == total
    assert audience["- rows repeating an address (in two segments, say)"] > 0
    assert audience["- not recipients: suppressed by the tenant"] > 0
    assert audience["- not recipients: not confirmed (pending, unsubscribed)"] > 0
    assert audience["- not recipients: confirmed after the build"] == 1
    assert outcomes["suppressed at send time (opted out after the build)"] == 1
    assert outcomes["sent (accepted by the mail server)"] == total - 1
    assert sum(audience[label] for label in audience if label.startswith("- not recipients")) \
        == audience["= distinct addresses"] - total


@pytest.mark.django_db
def test_a_report_before_the_build_adds_up_too():
    seed()
    sections = figures(report())
    audience = section(sections, "Audience")
    assert audience["= recipients"] == 0
    assert audience["- not recipients yet: the list is not built"] > 0


@pytest.mark.django_db
def test_a_recipient_who_left_the_segments_since_the_build_is_shown_apart():
    from growth.operations.campaigns import approve_campaign

    campaign = CampaignFactory()
    subscribers = audience(campaign.account, 3)
    campaign.segments.add(subscribers[0].segment)
    approve_campaign(campaign_id=campaign.id)
    assert Campaign.objects.start_due() == [campaign.id]
    Send.objects.build_recipients(campaign_id=campaign.id)
    Subscriber.objects.filter(id=subscribers[0].id).update(
        segment=SegmentFactory(account=campaign.account))

    sections = figures(report(str(campaign.id)))
    assert section(sections, "Audience") == {
        "subscriber rows": 2, "- rows repeating an address (in two segments, say)": 0,
        "= distinct addresses": 2, "- not recipients: suppressed by the tenant": 0,
        "- not recipients: not confirmed (pending, unsubscribed)": 0,
        "- not recipients: confirmed after the build": 0, "= recipients from this audience": 2,
        "+ recipients no longer in this audience": 1, "= recipients": 3}
    assert section(sections, "Recipients by outcome")["queued (still to send, or to retry)"] == 3


@pytest.mark.parametrize("command", ["run_sender", "seed_demo", "campaign_report"])
def test_help_shows_every_options_default(command):
    parser = load_command_class("growth", command).create_parser("manage.py", command)
    base = {"help", "version", "verbosity", "settings", "pythonpath", "traceback", "no_color",
            "force_color", "skip_checks"}
    own = [action for action in parser._actions if action.dest not in base]
    assert own
    for action in own:
        assert "default" in (action.help or ""), f"{command} {action.option_strings}: {action.help}"
