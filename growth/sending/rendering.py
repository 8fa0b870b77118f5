"""Turn a campaign and one claimed recipient into an email message.

Templates are compiled once per campaign; per recipient only the context changes. Every message
carries the headers that make a retry harmless and an opt-out one click away:

  Message-ID              derived from the job id: identical on every retry of the same recipient
  Idempotency-Key         the job id itself, for receivers that de-duplicate on it
  List-Unsubscribe(-Post) RFC 8058 one-click unsubscribe

and, for the plain SMTP path, what the transport applies as the bytes go on the wire: the VERP
envelope sender naming the send (``growth.sending.verp``, when BOUNCE_DOMAIN is set) and the
campaign's DKIM signer (``growth.sending.dkim``, looked up once per renderer).
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter

from django.conf import settings
from django.core.exceptions import ValidationError
from django.template import Context, TemplateSyntaxError

from growth.audience.addresses import SMTPUTF8_REFUSAL, needs_smtputf8, on_the_wire
from growth.job_ids import message_id
from growth.sending import dkim, verp
from growth.sending.mime import MessageLayout, OutgoingEmail
from growth.sending.sender import from_header
from growth.sending.templating import ALLOWED, HTML, MOMENT, TEXT
from growth.sending.unsubscribe import LinkMaker

_BARE_VARIABLE = re.compile(r"{{\s*([A-Za-z][A-Za-z0-9_]*)\s*}}")  # Django: no leading _
_LITERALS = {"True", "False", "None"}  # Django prints them, as no variable
_MENTIONS_UNSUBSCRIBE = re.compile(r"{{\s*unsubscribe_url\s*(\|[^}]*)?}}")
TEXT_FOOTER = "\n\n--\nUnsubscribe: {{ unsubscribe_url }}\n"
HTML_FOOTER = '<p style="font-size:12px;color:#666"><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>'
# A header line may hold 998 octets (RFC 5322 2.1.1), and a subject with no space in it cannot
# be folded: what is typed is kept well under, what a template makes of it checked as it goes.
MAX_SUBJECT = 250  # characters typed
MAX_RENDERED_SUBJECT = 900  # characters rendered
LOOK_UP = object()  # CampaignRenderer(signer=...): find the campaign's DKIM key


@dataclass(frozen=True, slots=True)
class CampaignContent:
    id: int
    account_id: int
    subject: str
    body_text: str
    body_html: str
    from_email: str
    from_name: str
    started_at: datetime | None = None  # what {% now %} shows (templating.MOMENT)

    @classmethod
    def of(cls, campaign) -> CampaignContent:
        """Its content as it goes out: the sender it took when it started (before: its
        account's, for previews and test messages)."""
        sender = campaign.sends_as
        return cls(campaign.id, campaign.account_id, campaign.subject, campaign.body_text,
                   campaign.body_html, sender.from_email, sender.from_name, campaign.started_at)

    @property
    def sender(self) -> tuple[str, str]:
        return self.from_email, self.from_name


def check_content(*, subject: str, body_text: str, body_html: str) -> None:
    """Raise ValidationError unless the content can be sent: subject and text body present, no
    line break in the subject (header injection), templates that compile."""
    errors: dict[str, str] = {}
    if not subject.strip():
        errors["subject"] = "A campaign needs a subject."
    elif "\n" in subject or "\r" in subject:
        errors["subject"] = "The subject must be one line: line breaks would inject headers."
    elif len(subject) > MAX_SUBJECT:
        errors["subject"] = f"The subject is longer than {MAX_SUBJECT} characters."
    if not body_text.strip():
        errors["body_text"] = "A campaign needs a plain-text body."
    for field, engine, source in (("subject", TEXT, subject), ("body_text", TEXT, body_text),
                                  ("body_html", HTML, body_html)):
        try:
            engine.from_string(source)
        except TemplateSyntaxError as exc:
            errors.setdefault(field, f"Template error: {exc} {ALLOWED}")
    if errors:
        raise ValidationError(errors)


class CampaignRenderer:
    """Render one campaign's messages; build once per campaign, call ``render`` per recipient.

    Building it checks what is the same for every recipient (the sender, the templates, the
    DKIM key): it raises ValidationError, TemplateSyntaxError or DkimKeyError for a campaign that
    cannot be sent at all. ``signer``: the DKIM signer to use (None: none); by default it is
    looked up (one query) when the configured transport signs.
    """

    def __init__(self, content: CampaignContent, *, links: LinkMaker | None = None,
                 message_id_domain: str | None = None, signer=LOOK_UP) -> None:
        self.content = content
        self._links = links or LinkMaker()
        self._domain = message_id_domain or settings.MESSAGE_ID_DOMAIN
        self._from = from_header(name=content.from_name, address=content.from_email)
        self._subject = _compile(content.subject, html=False)
        self._text = _compile(_with_footer(content.body_text, TEXT_FOOTER), html=False)
        self._html = (_compile(_with_footer(content.body_html, HTML_FOOTER), html=True)
                      if content.body_html.strip() else None)
        self._layout = MessageLayout(from_header=self._from, has_html=self._html is not None)
        if signer is LOOK_UP:
            signer = (dkim.signer_for(account_id=content.account_id, from_email=content.from_email)
                      if dkim.transport_signs() else None)
        self.signer: dkim.Signer | None = signer

    def render(self, *, job_id: str, email: str, subscriber_id: int,
               subject_prefix: str = "") -> OutgoingEmail:
        unsubscribe_url = self._links.url(account_id=self.content.account_id,
                                          subscriber_id=subscriber_id,
                                          campaign_id=self.content.id)
        if needs_smtputf8(email):  # a row saved before the rule, or past the forms
            raise ValueError(f"{email} cannot be mailed: {SMTPUTF8_REFUSAL}")
        recipient = on_the_wire(email)  # the template shows the address as the tenant has it
        values = {"email": email, "unsubscribe_url": unsubscribe_url,
                  MOMENT: self.content.started_at}
        subject = subject_prefix + self._subject(values).strip()
        if "\n" in subject or "\r" in subject:
            raise ValueError("the rendered subject has a line break")
        if len(subject) > MAX_RENDERED_SUBJECT:
            raise ValueError(f"the rendered subject is longer than {MAX_RENDERED_SUBJECT} characters")
        text = self._text(values)
        html = self._html(values) if self._html is not None else None
        headers = {
            "Message-ID": message_id(job_id, self._domain),
            "Idempotency-Key": job_id,
            "List-Unsubscribe": f"<{unsubscribe_url}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        }
        message = OutgoingEmail(subject=subject, body=text, from_email=self._from, to=[recipient],
                                headers=headers)
        if html is not None:
            message.attach_alternative(html, "text/html")
        # For ESPs (django-anymail): lets their webhooks be attributed to tenant and campaign.
        message.metadata = {"account_id": str(self.content.account_id),
                            "campaign_id": str(self.content.id), "job_id": job_id}
        message.prebuilt = self._layout.build(to=recipient, subject=subject, headers=headers,
                                              text=text, html=html)
        message.envelope_from = verp.return_path(job_id)
        message.dkim_signer = self.signer
        return message


def _compile(source: str, *, html: bool) -> Callable[[dict[str, str]], str]:
    """Return a function rendering ``source`` with the per-recipient values.

    A template that only prints variables (the common case) becomes a join of its fixed text
    and the values; anything else (tags, filters) is a compiled Django template.
    """
    pieces = _BARE_VARIABLE.split(source)
    literals, names = pieces[::2], pieces[1::2]
    if (any(marker in literal for literal in literals for marker in ("{{", "{%", "{#"))
            or _LITERALS.intersection(names)):
        template = (HTML if html else TEXT).from_string(source)
        return lambda values: template.render(Context(values, autoescape=html))
    # The text between the variables, with a place for each variable's value: joined per
    # recipient. str.format_map would parse the whole template again on every call.
    frame = [piece for literal in literals[:-1] for piece in (literal, "")] + [literals[-1]]
    if not names:
        return lambda values: literals[0]
    value_of = itemgetter(*names) if len(names) > 1 else lambda found: (found[names[0]],)
    if html:
        # the values are plain str (an address, a URL): Django's escape() is this same call,
        # behind a lazy-string check that cost 5 % of a worker's time
        return lambda values: _joined(frame, map(html_lib.escape, value_of(_Blank(values))))
    return lambda values: _joined(frame, value_of(_Blank(values)))


def _joined(frame: list[str], values) -> str:
    text = frame.copy()
    text[1::2] = values
    return "".join(text)


class _Blank(dict):
    """A variable the template names but the context lacks renders empty, as in Django."""

    def __missing__(self, key: str) -> str:
        return ""


def _with_footer(body: str, footer: str) -> str:
    """Make sure the body shows an unsubscribe link: add the footer unless it already has one."""
    if _MENTIONS_UNSUBSCRIBE.search(body):
        return body
    end_of_body = body.lower().rfind("</body>")
    if end_of_body >= 0:
        return body[:end_of_body] + footer + body[end_of_body:]
    return body.rstrip("\n") + footer
