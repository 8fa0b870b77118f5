"""Tenant scoping for ModelAdmins: querysets, object pages, form choices and list filters."""

from __future__ import annotations

from django.contrib import admin
from django.http import Http404

from growth.models import Account, Campaign, Segment, Subscriber
from growth.tenancy import scoped

# How each model that a form or a filter offers as a choice reaches its account.
ACCOUNT_FIELD = {Account: "id", Segment: "account", Campaign: "account", Subscriber: "account"}


def scoped_choices(model, request):
    return scoped(model._default_manager.all(), request.user, account_field=ACCOUNT_FIELD[model])


class TenantScopedAdmin(admin.ModelAdmin):
    """Show a non-superuser only the rows of its accounts; another account's object is a 404."""

    account_field = "account"

    def get_queryset(self, request):
        return scoped(super().get_queryset(request), request.user, account_field=self.account_field)

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is None:  # absent, or another tenant's: the same answer, no data
            raise Http404(f"There is no {self.opts.verbose_name} with this id.")
        return obj

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.related_model in ACCOUNT_FIELD:
            kwargs["queryset"] = scoped_choices(db_field.related_model, request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.related_model in ACCOUNT_FIELD:
            kwargs["queryset"] = scoped_choices(db_field.related_model, request)
        return super().formfield_for_manytomany(db_field, request, **kwargs)


class ScopedRelatedFilter(admin.RelatedFieldListFilter):
    """A related-object filter that lists only the user's accounts' objects."""

    def field_choices(self, field, request, model_admin):
        choices = scoped_choices(field.related_model, request)
        ordering = self.field_admin_ordering(field, request, model_admin)
        if ordering:
            choices = choices.order_by(*ordering)
        return [(obj.pk, str(obj)) for obj in choices]


class ReadOnlyAdmin:
    """Rows only the engine writes: the admin shows them, never adds, edits or deletes them."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
