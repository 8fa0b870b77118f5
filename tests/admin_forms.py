"""A versioned admin change form as an operator's browser holds and posts it (the account's, the
rate limit's and the membership's: growth.admin.versioned), what a refused save tells, and two
saves validated before either writes (growth.admin.races)."""

from __future__ import annotations

import threading

from django.contrib.admin.models import LogEntry
from django.test import Client

from tests.factories import UserFactory


def logged_in(username: str) -> Client:
    client = Client()
    client.force_login(UserFactory(username=username, is_staff=True, is_superuser=True))
    return client


def _posted(value) -> str | None:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else None  # an unticked box is not posted
    return str(value)


def posted_form(client: Client, url: str) -> dict:
    """The change form at ``url`` as the browser holds it: every field the page lets it post
    (hidden ones included), its inlines' rows too, with the values the page was rendered with."""
    response = client.get(url)
    assert response.status_code == 200
    data = {}
    for fieldset in response.context["adminform"]:
        for line in fieldset:
            for field in line:
                if not field.is_readonly:
                    data[field.field.name] = _posted(field.field.value())
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        for form in [formset.management_form, *formset.forms]:
            for name in form.fields:
                data[form.add_prefix(name)] = _posted(form[name].value())
    return {name: value for name, value in data.items() if value is not None}


def refusal(response) -> str:
    assert response.status_code == 200, f"not refused: {response.status_code}"
    return " ".join(response.context["adminform"].form.non_field_errors())


def refused_page(response) -> str:
    """The page a refused save answers, read from its body: a test client's ``context`` holds
    every template its process rendered meanwhile, other threads' pages too."""
    assert response.status_code == 200, f"not refused: {response.status_code}"
    return response.content.decode()


def log_of(obj) -> list[str]:
    """Who saved ``obj`` in the admin, oldest first (its History)."""
    return [entry.user.username for entry in
            LogEntry.objects.filter(object_id=str(obj.pk),
                                    content_type__model=obj._meta.model_name)]


def validated_together(monkeypatch, admin_class: type, method: str = "save_model", *,
                       parties: int = 2) -> None:
    """Hold each thread's first call of ``admin_class.method`` (which the admin makes once the
    form is valid) until every party's has come: all were validated before any writes."""
    all_validated = threading.Barrier(parties, timeout=30)
    waited = set()
    original = getattr(admin_class, method)

    def wait_for_the_others_then_save(self, *args, **kwargs):
        if threading.get_ident() not in waited:  # a thread's first save only
            waited.add(threading.get_ident())
            all_validated.wait()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(admin_class, method, wait_for_the_others_then_save)
