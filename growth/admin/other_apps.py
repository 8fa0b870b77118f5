"""The admins other apps register (auth's users and groups, axes' sign-in records), made to
refuse a list action's selected value that is no id, a popup's reverse relation and a filter no
list filter offers (400) as ours do (scoping.IdSelection), and to answer a save that lost a race
on a unique value (a username, a group's name) with its form, as ours do (races.ValidatedAgain)."""

from __future__ import annotations

from django.contrib import admin

from growth.admin.races import ValidatedAgain
from growth.admin.scoping import IdSelection

OURS = (ValidatedAgain, IdSelection)  # what every admin of the site is


def make_every_admin_ours(site: admin.AdminSite = admin.site) -> None:
    """Register each admin of ``site`` that is not all of OURS again, with what it lacks."""
    for model, model_admin in list(site._registry.items()):
        missing = tuple(mixin for mixin in OURS if not isinstance(model_admin, mixin))
        if missing:
            own_class = type(model_admin)
            site.unregister(model)
            site.register(model, type(own_class.__name__, (*missing, own_class), {}))
