"""Turn a campaign and one claimed recipient into an email message.

Templates are compiled once per campaign; per recipient only the context changes. Every message
carries the headers that make a retry harmless and an opt-out one click away:

  Message-ID              derived from the job id: identical on every retry of the same recipient
  Idempotency-Key         the job id itself, for receivers that de-duplicate on it
  List-Unsubscribe(-Post) RFC 8058 one-click unsubscribe
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.utils import formataddr

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives
from django.template import Context, Engine, TemplateSyntaxError

from growth.unsubscribe import LinkMaker

# Subjects and text bodies are not HTML: escaping them would mangle "O'Brien". (Autoescaping
# is decided by the Context a template is rendered with, so each kind gets its own.)
_TEXT = Engine(autoescape=False)
_HTML = Engine(autoescape=True)
_MENTIONS_UNSUBSCRIBE = re.compile(r"{{\s*unsubscribe_url\s*(\|[^}]*)?}}")
TEXT_FOOTER = "\n\n--\nUnsubscribe: {{ unsubscribe_url }}\n"
HTML_FOOTER = '<p style="font-size:12px;color:#666"><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>'


@dataclass(frozen=True, slots=True)
class CampaignContent:
    id: int
    account_id: int
    subject: str
    body_text: str
    body_html: str
    from_email: str
    from_name: str

    @classmethod
    def of(cls, campaign) -> CampaignContent:
        account = campaign.account
        return cls(campaign.id, campaign.account_id, campaign.subject, campaign.body_text,
                   campaign.body_html, account.from_email, account.from_name)


def message_id(job_id: str, domain: str | None = None) -> str:
    """Return the RFC 5322 Message-ID for a job id: ``campaign:4:7`` -> ``<campaign.4.7@domain>``."""
    return f"<{job_id.replace(':', '.')}@{domain or settings.MESSAGE_ID_DOMAIN}>"


def check_content(*, subject: str, body_text: str, body_html: str) -> None:
    """Raise ValidationError unless the content can be sent: subject and text body present, no
    line break in the subject (header injection), templates that compile."""
    errors: dict[str, str] = {}
    if not subject.strip():
        errors["subject"] = "A campaign needs a subject."
    elif "\n" in subject or "\r" in subject:
        errors["subject"] = "The subject must be one line: line breaks would inject headers."
    if not body_text.strip():
        errors["body_text"] = "A campaign needs a plain-text body."
    for field, engine, source in (("subject", _TEXT, subject), ("body_text", _TEXT, body_text),
                                  ("body_html", _HTML, body_html)):
        try:
            engine.from_string(source)
        except TemplateSyntaxError as exc:
            errors.setdefault(field, f"Template error: {exc}")
    if errors:
        raise ValidationError(errors)


class CampaignRenderer:
    """Render one campaign's messages; build once per campaign, call ``render`` per recipient."""

    def __init__(self, content: CampaignContent, *, links: LinkMaker | None = None,
                 message_id_domain: str | None = None) -> None:
        self.content = content
        self._links = links or LinkMaker()
        self._domain = message_id_domain or settings.MESSAGE_ID_DOMAIN
        self._from = formataddr((content.from_name, content.from_email))
        self._subject = _TEXT.from_string(content.subject)
        self._text = _TEXT.from_string(_with_footer(content.body_text, TEXT_FOOTER))
        self._html = (_HTML.from_string(_with_footer(content.body_html, HTML_FOOTER))
                      if content.body_html.strip() else None)

    def render(self, *, job_id: str, email: str, subscriber_id: int) -> EmailMultiAlternatives:
        unsubscribe_url = self._links.url(account_id=self.content.account_id,
                                          subscriber_id=subscriber_id,
                                          campaign_id=self.content.id)
        values = {"email": email, "unsubscribe_url": unsubscribe_url}
        context = Context(values, autoescape=False)
        subject = self._subject.render(context).strip()
        if "\n" in subject or "\r" in subject:
            raise ValueError("the rendered subject has a line break")
        message = EmailMultiAlternatives(
            subject=subject,
            body=self._text.render(context),
            from_email=self._from,
            to=[email],
            headers={
                "Message-ID": message_id(job_id, self._domain),
                "Idempotency-Key": job_id,
                "List-Unsubscribe": f"<{unsubscribe_url}>",
                "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
            },
        )
        if self._html is not None:
            message.attach_alternative(self._html.render(Context(values)), "text/html")
        return message


def _with_footer(body: str, footer: str) -> str:
    """Make sure the body shows an unsubscribe link: add the footer unless it already has one."""
    if _MENTIONS_UNSUBSCRIBE.search(body):
        return body
    end_of_body = body.lower().rfind("</body>")
    if end_of_body >= 0:
        return body[:end_of_body] + footer + body[end_of_body:]
    return body.rstrip("\n") + footer
