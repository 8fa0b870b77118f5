"""The template language of a campaign's subject and bodies: Django's, cut down to what cannot
run away.

A tenant's template is rendered for every recipient, on the worker that serves every tenant in
turn, so its cost must follow its length. Django's full language does not: seven ``{% for %}``
nested over a 16-character string render 268 million times, ``ljust:"3000000000"`` asks for 3 GB,
``{% lorem %}`` for as many words as it is told, and ``{% with %}``, ``{% firstof … as %}`` and
``{% cycle … as %}`` can name a doubled value and double it again. Each stopped the worker for
every campaign until it was killed; ``stringformat:"c"`` wrote a NUL that PostgreSQL refuses,
and ``{% include %}``, ``{% debug %}`` and ``{% load %}`` reach past the template.

What is left renders in time and space linear in the template and the values: conditions,
comments, and filters that change text without multiplying it.

And it renders the same message for a recipient every time: ``{% now %}`` shows the moment the
campaign started sending (``MOMENT`` in the context), not the clock's. A message sent again under
its key, after its first answer was lost, must be the one first sent: an ESP that de-duplicates
refuses a key reused with another body (Resend's 409 ``invalid_idempotent_request``).
"""

from __future__ import annotations

from django.template import Engine, Library, defaultfilters, defaulttags
from django.utils import timezone

TAGS = ("if", "filter", "autoescape", "comment", "spaceless", "verbatim", "templatetag", "now")
FILTERS = (
    "add", "addslashes", "capfirst", "cut", "date", "default", "default_if_none", "escape",
    "escapejs", "first", "force_escape", "iriencode", "last", "length", "linebreaks",
    "linebreaksbr", "lower", "pluralize", "safe", "slice", "slugify", "striptags", "time",
    "title", "truncatechars", "truncatechars_html", "truncatewords", "truncatewords_html",
    "upper", "urlencode", "wordcount", "wordwrap", "yesno",
)

MOMENT = "_moment"  # a template cannot name it (a variable may not begin with an underscore)


class _MomentNode(defaulttags.NowNode):
    def render(self, context):
        moment = context.get(MOMENT)
        if moment is None:  # a preview, a test message: not sending yet
            return super().render(context)
        formatted = defaultfilters.date(timezone.localtime(moment), self.format_string)
        if self.asvar:
            context[self.asvar] = formatted
            return ""
        return formatted


def _now(parser, token) -> _MomentNode:
    clock = defaulttags.now(parser, token)  # Django's parsing and its errors
    return _MomentNode(clock.format_string, clock.asvar)


register = Library()
register.tags.update({name: defaulttags.register.tags[name] for name in TAGS})
register.tags["now"] = _now
register.filters.update({name: defaultfilters.register.filters[name] for name in FILTERS})


class _CampaignEngine(Engine):
    default_builtins = []  # not Django's tags and filters: only this module's


# Subjects and text bodies are not HTML: escaping them would mangle "O'Brien". (Autoescaping
# is decided by the Context a template is rendered with, so each kind gets its own.)
TEXT = _CampaignEngine(autoescape=False, builtins=[__name__], loaders=[])
HTML = _CampaignEngine(autoescape=True, builtins=[__name__], loaders=[])

ALLOWED = (f"Campaign templates allow the tags {', '.join(TAGS)} and the filters "
           f"{', '.join(FILTERS)}.")
