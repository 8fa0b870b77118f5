"""Admin widgets that hold up against whatever is posted."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.autocomplete import AutocompleteJsonView
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import ForeignObjectRel


class TolerantAutocompleteSelect(AutocompleteSelect):
    """Django's autocomplete select, re-rendering a form whose posted value is not an id: Django
    5.2 filters the choices by it and answers 500; here the field shows nothing selected and the
    form its "Select a valid choice" error."""

    def optgroups(self, name, value, attr=None):
        try:
            return super().optgroups(name, value, attr)
        except (ValueError, TypeError, ValidationError):
            return super().optgroups(name, [], attr)


class TolerantAutocomplete:
    """For a ModelAdmin or an inline with ``autocomplete_fields``."""

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name in self.get_autocomplete_fields(request) and "widget" not in kwargs:
            kwargs["widget"] = TolerantAutocompleteSelect(db_field, self.admin_site,
                                                          using=kwargs.get("using"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class TolerantAutocompleteJsonView(AutocompleteJsonView):
    """Django's autocomplete endpoint, refusing a field_name that names a reverse relation (403,
    as for any other field it cannot serve): Django 5.2 asks it for limit_choices_to, a 500."""

    def process_request(self, request):
        found = super().process_request(request)
        if isinstance(found[2], ForeignObjectRel):
            raise PermissionDenied
        return found


def tolerant_autocomplete_view(site: admin.AdminSite = admin.site) -> None:
    """Serve ``site``'s autocomplete/ with TolerantAutocompleteJsonView (before its URLs are
    built)."""
    site.autocomplete_view = TolerantAutocompleteJsonView.as_view(admin_site=site)
