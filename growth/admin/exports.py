"""The admin's export of a campaign's ledger: a CSV download, streamed page by page.

``CampaignAdmin`` takes it in as a mixin: ``class CampaignAdmin(ExportMixin, TenantScopedAdmin)``
and ``*self.get_export_urls()`` ahead of ``*super().get_urls()`` in its ``get_urls`` (ahead: the
admin's catch-all ``<path:object_id>/`` would take ``<id>/export/`` for an object id).
"""

from __future__ import annotations

from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.urls import path
from django.views.decorators.http import require_GET

from growth.ledger.download import csv_download
from growth.models import Send


def export_view(model_admin, request, object_id):
    """The campaign's sends as CSV, for an operator who may view both the campaign (of one of
    their accounts: another tenant's id is a 404, as a missing one) and its sends."""
    campaign = model_admin.get_object(request, unquote(object_id))
    if campaign is None:
        raise Http404(f"There is no {model_admin.opts.verbose_name} with this id.")
    sends_admin = model_admin.admin_site.get_model_admin(Send)
    if not (model_admin.has_view_permission(request, campaign)
            and sends_admin.has_view_permission(request)):
        raise PermissionDenied
    return csv_download(campaign.pk)


class ExportMixin:
    """For a campaign ModelAdmin: ``<id>/export/``, named ``growth_campaign_export``."""

    def get_export_urls(self):
        view = self.admin_site.admin_view(require_GET(self.export_view))
        return [path("<path:object_id>/export/", view, name="growth_campaign_export")]

    def export_view(self, request, object_id):
        return export_view(self, request, object_id)
