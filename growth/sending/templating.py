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
"""

from __future__ import annotations

from django.template import Engine, Library, defaultfilters, defaulttags

TAGS = ("if", "filter", "autoescape", "comment", "spaceless", "verbatim", "templatetag", "now")
FILTERS = (
    "add", "addslashes", "capfirst", "cut", "date", "default", "default_if_none", "escape",
    "escapejs", "first", "force_escape", "iriencode", "last", "length", "linebreaks",
    "linebreaksbr", "lower", "pluralize", "safe", "slice", "slugify", "striptags", "time",
    "title", "truncatechars", "truncatechars_html", "truncatewords", "truncatewords_html",
    "upper", "urlencode", "wordcount", "wordwrap", "yesno",
)

register = Library()
register.tags.update({name: defaulttags.register.tags[name] for name in TAGS})
register.filters.update({name: defaultfilters.register.filters[name] for name in FILTERS})


class _CampaignEngine(Engine):
    default_builtins = []  # not Django's tags and filters: only this module's


# Subjects and text bodies are not HTML: escaping them would mangle "O'Brien". (Autoescaping
# is decided by the Context a template is rendered with, so each kind gets its own.)
TEXT = _CampaignEngine(autoescape=False, builtins=[__name__], loaders=[])
HTML = _CampaignEngine(autoescape=True, builtins=[__name__], loaders=[])

ALLOWED = (f"Campaign templates allow the tags {', '.join(TAGS)} and the filters "
           f"{', '.join(FILTERS)}.")
