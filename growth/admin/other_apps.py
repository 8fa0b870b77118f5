"""The admins other apps register (auth's users and groups, axes' sign-in records), made to
refuse a list action's selected value that is no id, a popup's reverse relation and a filter no
list filter offers (400) as ours do (scoping.IdSelection)."""

from __future__ import annotations

from django.contrib import admin

from growth.admin.scoping import IdSelection


def refuse_selections_that_are_no_ids(site: admin.AdminSite = admin.site) -> None:
    """Register each admin of ``site`` that is no IdSelection again, as one."""
    for model, model_admin in list(site._registry.items()):
        if not isinstance(model_admin, IdSelection):
            own_class = type(model_admin)
            site.unregister(model)
            site.register(model, type(own_class.__name__, (IdSelection, own_class), {}))
