"""Rendering a campaign into a message: retry-stable headers, one-click unsubscribe, escaping."""

from __future__ import annotations

import email
import re
from datetime import UTC, datetime
from email import policy
from urllib.parse import urlsplit

import pytest
from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives
from django.template import Context, Engine
from django.urls import resolve

from growth.job_ids import message_id
from growth.sending import rendering
from growth.sending.rendering import MAX_SUBJECT, CampaignContent, CampaignRenderer, check_content
from growth.sending.unsubscribe import LinkMaker, UnsubscribeTarget, read_token
from tests.factories import AccountFactory, CampaignFactory, SubscriberFactory

SITE_URL = "https://growth.example"
DOMAIN = "mail.growth.example"
# RFC 5322 msg-id = "<" dot-atom-text "@" dot-atom-text ">" (no obsolete forms, no literal)
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_DOT_ATOM = rf"{_ATEXT}(?:\.{_ATEXT})*"
MSG_ID = re.compile(rf"<{_DOT_ATOM}@{_DOT_ATOM}>")


@pytest.fixture
def site(settings):
    settings.SITE_URL = SITE_URL
    settings.MESSAGE_ID_DOMAIN = DOMAIN
    return settings


def job_id(campaign, subscriber) -> str:
    return f"campaign:{campaign.id}:{subscriber.id}"


def render(campaign, subscriber, *, email_address: str | None = None) -> EmailMultiAlternatives:
    renderer = CampaignRenderer(CampaignContent.of(campaign))
    return renderer.render(job_id=job_id(campaign, subscriber),
                           email=email_address or subscriber.email, subscriber_id=subscriber.id)


def unsubscribe_url(message: EmailMultiAlternatives) -> str:
    header = message.extra_headers["List-Unsubscribe"]
    assert header.startswith("<") and header.endswith(">"), header
    return header[1:-1]


def html_part(message: EmailMultiAlternatives) -> str | None:
    html = [content for content, mimetype in message.alternatives if mimetype == "text/html"]
    assert len(html) <= 1
    return html[0] if html else None


def parsed(message: EmailMultiAlternatives) -> email.message.EmailMessage:
    return email.message_from_bytes(message.message().as_bytes(), policy=policy.default)


@pytest.fixture
def campaign(site):
    return CampaignFactory(subject="News for {{ email }}",
                           body_text="Hi {{ email }}.\n\nLeave: {{ unsubscribe_url }}\n")


@pytest.fixture
def subscriber(campaign):
    return SubscriberFactory(segment__account=campaign.account)


# --- headers -------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_render_returns_an_email_to_the_recipient(campaign, subscriber):
    message = render(campaign, subscriber)
    assert isinstance(message, EmailMultiAlternatives)
    assert message.to == [subscriber.email]
    assert message.subject == f"News for {subscriber.email}"


def test_message_id_is_derived_from_the_job_id():
    assert message_id("campaign:4:7", "example.org") == "<campaign.4.7@example.org>"


@pytest.mark.django_db
def test_message_id_header_is_campaign_dot_ids_at_the_configured_domain(campaign, subscriber):
    message = render(campaign, subscriber)
    header = message.extra_headers["Message-ID"]
    assert header == message_id(job_id(campaign, subscriber))
    assert header == f"<campaign.{campaign.id}.{subscriber.id}@{DOMAIN}>"
    assert ":" not in header


@pytest.mark.django_db
def test_message_id_is_a_valid_rfc5322_msg_id(campaign, subscriber):
    message = render(campaign, subscriber)
    header = message.extra_headers["Message-ID"]
    assert MSG_ID.fullmatch(header), header
    on_the_wire = parsed(message)["Message-ID"]
    assert str(on_the_wire) == header
    assert not on_the_wire.defects


@pytest.mark.django_db
def test_message_id_is_the_same_on_a_retry_and_across_renderer_instances(campaign, subscriber):
    first = CampaignRenderer(CampaignContent.of(campaign))
    second = CampaignRenderer(CampaignContent.of(campaign))
    kwargs = {"job_id": job_id(campaign, subscriber), "email": subscriber.email,
              "subscriber_id": subscriber.id}
    ids = {first.render(**kwargs).extra_headers["Message-ID"],
           first.render(**kwargs).extra_headers["Message-ID"],
           second.render(**kwargs).extra_headers["Message-ID"]}
    assert len(ids) == 1
    # and it is what goes on the wire: Django does not replace it with a random one
    assert parsed(first.render(**kwargs))["Message-ID"] == ids.pop()


@pytest.mark.django_db
def test_different_recipients_get_different_message_ids(campaign, subscriber):
    other = SubscriberFactory(segment=subscriber.segment)
    assert (render(campaign, subscriber).extra_headers["Message-ID"]
            != render(campaign, other).extra_headers["Message-ID"])


@pytest.mark.django_db
def test_idempotency_key_is_the_job_id(campaign, subscriber):
    message = render(campaign, subscriber)
    assert message.extra_headers["Idempotency-Key"] == job_id(campaign, subscriber)
    assert parsed(message)["Idempotency-Key"] == job_id(campaign, subscriber)


@pytest.mark.django_db
def test_list_unsubscribe_is_a_one_click_url_on_the_site(campaign, subscriber):
    message = render(campaign, subscriber)
    url = unsubscribe_url(message)
    assert url.startswith(SITE_URL + "/")
    assert message.extra_headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"


@pytest.mark.django_db
def test_list_unsubscribe_follows_the_site_url_setting(settings, campaign, subscriber):
    settings.SITE_URL = "https://other.example/"
    url = unsubscribe_url(render(campaign, subscriber))
    assert url.startswith("https://other.example/u/")


@pytest.mark.django_db
def test_list_unsubscribe_token_names_account_subscriber_and_campaign(campaign, subscriber):
    url = unsubscribe_url(render(campaign, subscriber))
    match = resolve(urlsplit(url).path)
    assert match.view_name == "growth:unsubscribe"
    assert read_token(match.kwargs["token"]) == UnsubscribeTarget(
        campaign.account_id, subscriber.id, campaign.id)


@pytest.mark.django_db
def test_list_unsubscribe_headers_survive_serialisation(campaign, subscriber):
    message = render(campaign, subscriber)
    wire = parsed(message)
    assert str(wire["List-Unsubscribe"]).strip() == f"<{unsubscribe_url(message)}>"
    assert wire["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"


@pytest.mark.django_db
def test_from_is_the_accounts_name_and_address(site):
    account = AccountFactory(from_name="Acme News", from_email="news@acme.example")
    campaign = CampaignFactory(account=account)
    subscriber = SubscriberFactory(segment__account=account)
    message = render(campaign, subscriber)
    assert message.from_email == "Acme News <news@acme.example>"
    assert parsed(message)["From"] == "Acme News <news@acme.example>"


@pytest.mark.django_db
def test_a_non_ascii_sender_name_is_encoded_and_decodes_back(site):
    account = AccountFactory(from_name="Jörg's Bücher, Inc.", from_email="news@acme.example")
    campaign = CampaignFactory(account=account)
    subscriber = SubscriberFactory(segment__account=account)
    sender = parsed(render(campaign, subscriber))["From"]
    assert sender.addresses[0].display_name == "Jörg's Bücher, Inc."
    assert sender.addresses[0].addr_spec == "news@acme.example"


# --- bodies --------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_text_body_gets_an_unsubscribe_footer_when_it_has_no_link(site):
    campaign = CampaignFactory(body_text="Hello {{ email }}, no link here.")
    subscriber = SubscriberFactory(segment__account=campaign.account)
    message = render(campaign, subscriber)
    url = unsubscribe_url(message)
    assert message.body.startswith(f"Hello {subscriber.email}, no link here.")
    assert message.body.count(url) == 1
    assert message.body.rstrip().endswith(url)


@pytest.mark.django_db
@pytest.mark.parametrize("mention", ["{{ unsubscribe_url }}", "{{unsubscribe_url}}"])
def test_text_body_that_shows_the_link_gets_no_second_footer(site, mention):
    campaign = CampaignFactory(body_text=f"Hello.\nLeave here: {mention}\nBye.")
    subscriber = SubscriberFactory(segment__account=campaign.account)
    message = render(campaign, subscriber)
    url = unsubscribe_url(message)
    assert message.body == f"Hello.\nLeave here: {url}\nBye."


@pytest.mark.django_db
@pytest.mark.parametrize("body_html", ["", "   \n  "])
def test_no_html_alternative_without_an_html_body(site, body_html):
    campaign = CampaignFactory(body_html=body_html)
    subscriber = SubscriberFactory(segment__account=campaign.account)
    message = render(campaign, subscriber)
    assert message.alternatives == []
    assert parsed(message).get_content_type() == "text/plain"


@pytest.mark.django_db
def test_html_alternative_gets_the_footer_just_before_the_closing_body_tag(site):
    campaign = CampaignFactory(body_html="<html><body><p>Hi {{ email }}</p></BODY></html>")
    subscriber = SubscriberFactory(segment__account=campaign.account)
    message = render(campaign, subscriber)
    html = html_part(message)
    url = unsubscribe_url(message)
    assert html is not None
    assert html.startswith(f"<html><body><p>Hi {subscriber.email}</p><p")
    assert html.endswith(f'<a href="{url}">Unsubscribe</a></p></BODY></html>')
    assert html.count(url) == 1
    assert parsed(message).get_content_type() == "multipart/alternative"


@pytest.mark.django_db
def test_html_without_a_body_tag_gets_the_footer_at_the_end(site):
    campaign = CampaignFactory(body_html="<p>Hi</p>")
    subscriber = SubscriberFactory(segment__account=campaign.account)
    message = render(campaign, subscriber)
    assert html_part(message) == (
        f'<p>Hi</p><p style="font-size:12px;color:#666">'
        f'<a href="{unsubscribe_url(message)}">Unsubscribe</a></p>')


@pytest.mark.django_db
def test_html_that_links_to_unsubscribe_gets_no_second_footer(site):
    campaign = CampaignFactory(
        body_html='<body><a href="{{ unsubscribe_url }}">Leave</a></body>')
    subscriber = SubscriberFactory(segment__account=campaign.account)
    message = render(campaign, subscriber)
    assert html_part(message) == f'<body><a href="{unsubscribe_url(message)}">Leave</a></body>'


@pytest.mark.django_db
def test_subject_and_text_body_are_not_html_escaped(site):
    address = "o'brien@example.com"
    campaign = CampaignFactory(subject="Hi {{ email }} & co", body_text="Dear <{{ email }}>")
    subscriber = SubscriberFactory(segment__account=campaign.account, email=address)
    message = render(campaign, subscriber)
    assert message.subject == f"Hi {address} & co"
    assert message.body.startswith(f"Dear <{address}>")
    wire = parsed(message)
    assert wire["Subject"] == f"Hi {address} & co"
    assert wire.get_content().startswith(f"Dear <{address}>")


@pytest.mark.django_db
def test_html_body_is_escaped(site):
    address = "o'brien@example.com"
    campaign = CampaignFactory(body_html="<p>{{ email }}</p>")
    subscriber = SubscriberFactory(segment__account=campaign.account, email=address)
    html = html_part(render(campaign, subscriber))
    assert "<p>o&#x27;brien@example.com</p>" in html
    assert address not in html


# --- refusals ------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_subject_that_renders_a_line_break_is_refused(site):
    # passes check_content (no line break in the source) but renders "aaaa\nbbbb"
    subject = "{% filter wordwrap:4 %}aaaa bbbb{% endfilter %}"
    check_content(subject=subject, body_text="x", body_html="")
    campaign = CampaignFactory(subject=subject)
    subscriber = SubscriberFactory(segment__account=campaign.account)
    with pytest.raises(ValueError, match="line break"):
        render(campaign, subscriber)


def test_a_subject_longer_than_a_header_can_hold_unfolded_is_refused():
    """A subject with no space cannot be folded: 998 x's made a 1,007-octet header line."""
    check_content(subject="x" * MAX_SUBJECT, body_text="x", body_html="")
    errors = errors_of(subject="x" * (MAX_SUBJECT + 1))
    assert errors["subject"] == [f"The subject is longer than {MAX_SUBJECT} characters."]


@pytest.mark.django_db
@pytest.mark.parametrize("subject", ["x" * 998, "{{ unsubscribe_url }}" * 12])
def test_a_stored_or_rendered_subject_too_long_for_a_header_line_is_refused_at_render(site, subject):
    campaign = CampaignFactory(subject=subject)
    subscriber = SubscriberFactory(segment__account=campaign.account)
    with pytest.raises(ValueError, match="rendered subject is longer than 900"):
        render(campaign, subscriber)


@pytest.mark.django_db
def test_a_stored_subject_with_a_line_break_is_refused_at_render(site):
    campaign = CampaignFactory(subject="Hi\nBcc: victim@evil.example")
    subscriber = SubscriberFactory(segment__account=campaign.account)
    with pytest.raises(ValueError):
        render(campaign, subscriber)


@pytest.mark.django_db
def test_a_rendered_message_serialises(site):
    campaign = CampaignFactory(subject="Ünïcödé {{ email }}", body_text="Grüße",
                               body_html="<html><body>Grüße</body></html>")
    subscriber = SubscriberFactory(segment__account=campaign.account)
    message = render(campaign, subscriber)
    raw = message.message().as_bytes()
    assert isinstance(raw, bytes) and raw
    wire = email.message_from_bytes(raw, policy=policy.default)
    assert wire["Subject"] == f"Ünïcödé {subscriber.email}"
    assert wire["To"] == subscriber.email
    assert wire.get_body(("plain",)).get_content().startswith("Grüße")
    assert "Grüße" in wire.get_body(("html",)).get_content()


# --- check_content -------------------------------------------------------------------------------

def test_check_content_accepts_good_content():
    check_content(subject="Hi {{ email }}", body_text="Body {{ unsubscribe_url }}",
                  body_html="<p>{{ email }}</p>")
    check_content(subject="Hi", body_text="Body", body_html="")


def errors_of(**content) -> dict[str, list[str]]:
    fields = {"subject": "Hi", "body_text": "Body", "body_html": ""} | content
    with pytest.raises(ValidationError) as caught:
        check_content(**fields)
    return caught.value.message_dict


@pytest.mark.parametrize("subject", ["", "   "])
def test_check_content_refuses_an_empty_subject(subject):
    assert list(errors_of(subject=subject)) == ["subject"]


@pytest.mark.parametrize("body_text", ["", " \n\t"])
def test_check_content_refuses_an_empty_text_body(body_text):
    assert list(errors_of(body_text=body_text)) == ["body_text"]


@pytest.mark.parametrize("subject", ["Hi\nBcc: x@evil.example", "Hi\rthere", "Hi\r\nthere"])
def test_check_content_refuses_a_subject_with_a_line_break(subject):
    errors = errors_of(subject=subject)
    assert list(errors) == ["subject"]
    assert "line break" in errors["subject"][0]


@pytest.mark.parametrize("field", ["subject", "body_text", "body_html"])
@pytest.mark.parametrize("source", ["{% if %}x{% endif %}", "{{ email|no_such_filter }}",
                                    "{% endif %}"])
def test_check_content_refuses_a_template_syntax_error(field, source):
    errors = errors_of(**{field: source})
    assert list(errors) == [field]
    assert errors[field][0].startswith("Template error:")


@pytest.mark.parametrize("source", [
    '{% for a in "0123456789abcdef" %}{% for b in "0123456789abcdef" %}x{% endfor %}{% endfor %}',
    '{{ email|ljust:"3000000000" }}', "{% lorem 1000000 %}", '{{ email|stringformat:"c" }}',
    "{% with a=email|add:email %}{% with b=a|add:a %}{{ b }}{% endwith %}{% endwith %}",
    "{% firstof email as a %}", '{% include "other.html" %}', "{% debug %}", "{% load i18n %}",
    '{{ email|join:"," }}', '{{ 1|floatformat:"1000000" }}',
])
def test_check_content_refuses_what_could_run_away_or_reach_past_the_template(source):
    """The worker renders each tenant's template for every recipient, for every tenant in turn:
    a template whose cost does not follow its length stopped all of them."""
    errors = errors_of(body_text=source)
    assert list(errors) == ["body_text"]
    assert "Campaign templates allow the tags if, filter," in errors["body_text"][0]


@pytest.mark.django_db
def test_conditions_and_text_filters_still_render(site):
    campaign = CampaignFactory(
        subject="{{ email|upper|truncatechars:12 }}",
        body_text="{% if email %}Hi {{ email|default:'you'|title }}{% endif %}"
                  "{# a comment #}{% filter lower %}BYE{% endfilter %} {{ unsubscribe_url|length }}")
    subscriber = SubscriberFactory(segment__account=campaign.account, email="ann@example.com")
    message = render(campaign, subscriber)
    assert message.subject == "ANN@EXAMPLE…"
    assert message.body.startswith("Hi Ann@Example.Combye ")


@pytest.mark.django_db
def test_django_s_literals_render_as_django_renders_them(site):
    campaign = CampaignFactory(subject="{{ True }} {{ None }} {{ False }} {{ email }}")
    subscriber = SubscriberFactory(segment__account=campaign.account, email="ann@example.com")
    assert render(campaign, subscriber).subject == "True None False ann@example.com"


def test_check_content_reports_every_bad_field_at_once():
    errors = errors_of(subject="", body_text="", body_html="{% if %}")
    assert set(errors) == {"subject", "body_text", "body_html"}


@pytest.mark.parametrize("source", [
    "no variable at all",
    "{{ email }}",
    "Hi {{email}}, {{ email }} again; {{ nobody_knows_me }}.",
    "{ a brace } {{ unsubscribe_url }} {{x}}{{ email }}",
    "Ünïcode {{ email }}\r\nline two",
])
@pytest.mark.parametrize("html", [False, True], ids=["text", "html"])
def test_a_template_that_only_prints_variables_renders_as_djangos_engine_would(source, html):
    values = {"email": "o'brien&co@example.com", "unsubscribe_url": "https://x.example/u/T?a=1&b=<2>"}
    fast = rendering._compile(source, html=html)
    django = Engine(autoescape=html).from_string(source).render(Context(values, autoescape=html))
    assert fast(values) == django


# --- the same message on every try -----------------------------------------------------------

def _content(started_at=None) -> CampaignContent:
    return CampaignContent(7, 3, "News of {% now 'F Y' %}",
                           "Sent {% now 'Y-m-d H:i:s' %}, {% now 'U' as stamp %}{{ stamp }}\n", "",
                           "news@acme.example", "Acme", started_at)


def _rendered(content: CampaignContent) -> EmailMultiAlternatives:
    renderer = CampaignRenderer(content, links=LinkMaker(SITE_URL), signer=None)
    return renderer.render(job_id="campaign:7:1", email="ana@example.com", subscriber_id=1)


def test_now_shows_the_moment_the_campaign_started_in_every_try_of_a_message():
    """A message sent again under its key, on another worker an hour later, must be the message
    first sent: Resend refuses a key reused with another body."""
    started = datetime(2026, 3, 1, 8, 30, tzinfo=UTC)
    first = _rendered(_content(started))
    again = _rendered(_content(started))  # a renderer of another worker
    assert first.subject == "News of March 2026"
    assert first.body.startswith("Sent 2026-03-01 08:30:00, 1772353800\n")
    assert (again.subject, again.body) == (first.subject, first.body)


def test_before_a_campaign_sends_now_is_the_clock():
    """A preview or a test message: the campaign has not started."""
    assert _rendered(_content()).subject == f"News of {datetime.now(UTC):%B %Y}"


def test_a_template_cannot_name_the_moment_now_shows():
    with pytest.raises(ValidationError, match="may not begin with underscores"):
        check_content(subject="Hi", body_text="{{ _moment }}", body_html="")
