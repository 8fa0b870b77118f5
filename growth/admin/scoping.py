"""Tenant scoping for ModelAdmins: querysets, object pages, form choices, list filters, and
what a member may change (an editor of the account) rather than only see (a viewer)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import get_fields_from_path
from django.core.exceptions import BadRequest, FieldDoesNotExist, ValidationError
from django.http import Http404

from growth.admin.races import ValidatedAgain
from growth.models import Account, Campaign, Segment, Subscriber
from growth.tenancy import may_edit, scoped

# How each model that a form or a filter offers as a choice reaches its account.
ACCOUNT_FIELD = {Account: "id", Segment: "account", Campaign: "account", Subscriber: "account"}
# The parameters Django's list filters read, after their field's path (a relation's also
# <path>__<its key>__exact).
FILTER_PARAMETERS = ("", "__exact", "__isnull", "__isempty", "__gte", "__lt")


def scoped_choices(model, request, *, editable: bool = False):
    return scoped(model._default_manager.all(), request.user, account_field=ACCOUNT_FIELD[model],
                  editable=editable)


class IdSelection:
    """What a list's request selects rows by is checked, or refused (400), never a 500: an
    action's selected rows are ids (Django's filter(pk__in=...) of another value raises), a
    popup selects by a field, and the list is filtered only as its filters offer."""

    link_lookups: tuple[str, ...] = ()  # filters the links of other pages use, beyond its own

    def response_action(self, request, queryset):
        self._refuse_what_is_no_id(request)
        return super().response_action(request, queryset)

    def _refuse_what_is_no_id(self, request) -> None:
        try:
            for pk in request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME):
                if "\x00" in pk:  # PostgreSQL refuses a NUL in text: a key that is a name too
                    raise ValidationError("NUL")
                self.opts.pk.to_python(pk)
        except ValidationError:
            raise BadRequest("A selected row is not an id.") from None

    def lookup_allowed(self, lookup, value, request):
        """Django also takes any lookup of the model's own fields: some answered 500
        (?name__regex=(, ?id__range=1), and any read a field no page shows, one character at a
        time (?private_key__startswith=…)."""
        allowed = lookup in self.link_lookups or lookup in self._filter_parameters(request)
        return allowed and super().lookup_allowed(lookup, value, request)

    def _filter_parameters(self, request) -> set[str]:
        names = set()
        for item in self.get_list_filter(request):
            if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
                names.add(item.parameter_name)
                continue
            path = item[0] if isinstance(item, list | tuple) else item
            field = get_fields_from_path(self.model, path)[-1]
            if field.is_relation:
                names.add(f"{path}__{field.target_field.name}__exact")
            names.update(path + suffix for suffix in FILTER_PARAMETERS)
        return names

    def get_object(self, request, object_id, from_field=None):
        # an empty ?_to_field= passes Django's check (it checks a value only when there is one),
        # and its object pages then looked the field "" up, a 500: it selects by the key
        return super().get_object(request, object_id, from_field or None)

    def to_field_allowed(self, request, to_field):
        # a reverse relation is no field to select by: Django reads its primary_key, a 500
        try:
            concrete = self.opts.get_field(to_field).concrete
        except FieldDoesNotExist:
            return False
        return concrete and super().to_field_allowed(request, to_field)


class TenantScopedAdmin(ValidatedAgain, IdSelection, admin.ModelAdmin):
    """Show a non-superuser only the rows of its accounts; another account's object is a 404."""

    account_field = "account"

    def get_queryset(self, request):
        return scoped(super().get_queryset(request), request.user, account_field=self.account_field)

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is None:  # absent, or another tenant's: the same answer, no data
            raise Http404(f"There is no {self.opts.verbose_name} with this id.")
        return obj

    # --- a viewer's membership reads, an editor's changes -------------------------------------

    def _account_id(self, obj) -> int:
        return obj.pk if self.account_field == "id" else getattr(obj, f"{self.account_field}_id")

    def _may_edit(self, request, obj) -> bool:
        return may_edit(request.user, None if obj is None else self._account_id(obj))

    def has_add_permission(self, request, *args):
        return super().has_add_permission(request, *args) and may_edit(request.user, None)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._may_edit(request, obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and self._may_edit(request, obj)

    def response_action(self, request, queryset):
        """Run an action that changes rows on the rows of accounts the user may change only,
        saying how many selected rows were left alone."""
        self._refuse_what_is_no_id(request)  # before the count of them below
        # every posted value, not the one Django will pick (a list has an action form at its top
        # and one at its bottom): judged by the last, a post of a changing action and a view-only
        # one had a viewer's rows changed
        if any(self._changes_rows(name) for name in request.POST.getlist("action")):
            editable = scoped(queryset, request.user, account_field=self.account_field,
                              editable=True)
            selected = {self.opts.pk.to_python(pk)
                        for pk in request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)}
            # as Django's ActionForm reads it: a browser posts "0" until "select all" is taken
            across = forms.BooleanField(required=False).to_python(
                request.POST.get("select_across"))
            if not across and selected:
                shown = queryset.filter(pk__in=selected).count()
                viewed = shown - editable.filter(pk__in=selected).count()
                # another tenant's id and no id at all are one count, worded alike: telling
                # them apart would say which ids another tenant has
                elsewhere = len(selected) - shown
                if viewed:
                    self.message_user(request, f"{viewed} selected left alone: your role in their "
                                      "account is viewer (read only).", messages.WARNING)
                if elsewhere:
                    self.message_user(request, f"{elsewhere} selected left alone: not yours to "
                                      "change, or not there.", messages.WARNING)
            queryset = editable
        return super().response_action(request, queryset)

    def _changes_rows(self, action_name: str) -> bool:
        action = self.get_action(action_name)
        return action is not None and bool(
            set(getattr(action[0], "allowed_permissions", ())) - {"view"})

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.related_model in ACCOUNT_FIELD:
            kwargs["queryset"] = scoped_choices(db_field.related_model, request, editable=True)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.related_model in ACCOUNT_FIELD:
            kwargs["queryset"] = scoped_choices(db_field.related_model, request, editable=True)
        return super().formfield_for_manytomany(db_field, request, **kwargs)


class ScopedRelatedFilter(admin.RelatedFieldListFilter):
    """A related-object filter that lists only the user's accounts' objects."""

    def field_choices(self, field, request, model_admin):
        choices = scoped_choices(field.related_model, request)
        ordering = self.field_admin_ordering(field, request, model_admin)
        if ordering:
            choices = choices.order_by(*ordering)
        return [(obj.pk, str(obj)) for obj in choices]

    def has_output(self):
        # Django leaves out (and so does not apply) a filter of one choice: an operator of one
        # campaign who asked for another tenant's campaign would get their own rows instead of
        # none. A filter asked for is applied, whatever the choices.
        return super().has_output() or bool(self.lookup_val)


class ReadOnlyAdmin:
    """Rows only the engine writes: the admin shows them, never adds, edits or deletes them."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
