"""Deleting segments (one, or the list's delete_selected) never widens a campaign.

A campaign names its segments, and one that names none goes to every segment of its account.
Until its recipients are built, deleting the last segment it names would silently make it mail
the whole account: such a deletion is refused, with the campaigns named and what to do. Deleting
a segment a campaign still to be built names beside others shrinks its audience: the confirmation
page says which campaigns lose what, and each one's History records it. A campaign built already
has its recipients; its rows protect the subscribers it mailed (Django's own refusal).

The decision and the deletion run in one transaction, under the lock of those campaigns' rows a
build takes before it reads their segments (Campaign.objects.audiences_of_segments)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext_lazy

from growth.managers.campaigns import AudienceLoss
from growth.models import Campaign, Segment


class SegmentsInUse(Exception):
    """Deleting the segments would leave campaigns still to be built with no segment."""

    def __init__(self, losses: list[AudienceLoss]) -> None:
        super().__init__(f"{len(losses)} campaign(s) would be left with no segment")
        self.losses = losses


def losses_of(segments: list[Segment], *, lock: bool) -> list[AudienceLoss]:
    """What deleting ``segments`` does to the campaigns still to be built; SegmentsInUse if it
    would widen any."""
    losses = Campaign.objects.audiences_of_segments([s.pk for s in segments], lock=lock)
    widened = [loss for loss in losses if loss.widens]
    if widened:
        raise SegmentsInUse(widened)
    return losses


def described(losses: list[AudienceLoss], segments: list[Segment]) -> list[dict]:
    """Each campaign as the pages name it: a link, its status, the segments it loses (none: it
    names no segment, and loses those of its account)."""
    names = {s.pk: str(s) for s in segments}
    return [{"loss": loss, "status": Campaign.Status(loss.status).label.lower(),
             "url": reverse("admin:growth_campaign_change", args=[loss.campaign_id]),
             "segments": [names[pk] for pk in loss.segment_ids] or [
                 str(s) for s in segments if s.account_id == loss.account_id],
             "editable": loss.status == Campaign.Status.DRAFT and not loss.follow_up}
            for loss in losses]


def history_message(loss: AudienceLoss, segments: dict[int, Segment]) -> str:
    """What a campaign's History says of the deletion (``segments``: by their id before it)."""
    if loss.segment_ids:
        names = ", ".join(f"“{segments[pk]}”" for pk in loss.segment_ids)
        return (f"Segment(s) {names} deleted: no longer in its audience, which is now its other "
                "segments.")
    names = ", ".join(f"“{s}”" for s in segments.values() if s.account_id == loss.account_id)
    return (f"Segment(s) {names} of its account deleted: their subscribers are no longer in its "
            "audience (it names no segment: every segment of the account).")


class SegmentDeletionMixin:
    """For SegmentAdmin: Django's delete page and delete_selected, refusing a deletion that
    would widen a campaign and saying which campaigns a deletion shrinks."""

    delete_confirmation_template = "growth/admin/segment_delete_confirmation.html"
    delete_selected_confirmation_template = "growth/admin/segment_delete_selected_confirmation.html"
    actions = ["delete_selected"]

    def delete_view(self, request, object_id, extra_context=None):
        segment = self.get_object(request, unquote(object_id))  # another tenant's: 404
        if not self.has_delete_permission(request, segment):
            raise PermissionDenied
        try:
            # Django's own view runs in this transaction, its check of protected rows after the
            # lock: a build committed meanwhile protects the subscribers it mailed
            with transaction.atomic():
                losses = losses_of([segment], lock=request.method == "POST")
                return super().delete_view(request, object_id, {
                    **(extra_context or {}), "audience_losses": described(losses, [segment])})
        except SegmentsInUse as refused:
            return self._refusal(request, [segment], refused.losses,
                                 reverse("admin:growth_segment_change", args=[segment.pk]))

    @admin.action(permissions=["delete"],
                  description=gettext_lazy("Delete selected %(verbose_name_plural)s"))
    def delete_selected(self, request, queryset):
        segments = list(queryset.order_by("pk"))
        try:
            with transaction.atomic():
                losses = losses_of(segments, lock=bool(request.POST.get("post")))
                response = django_delete_selected(self, request, queryset)
        except SegmentsInUse as refused:
            return self._refusal(request, segments, refused.losses, request.get_full_path())
        if response is not None:  # the confirmation page
            response.context_data["audience_losses"] = described(losses, segments)
        return response

    # Where the rows go, whoever calls: checked again (the lock is held already) and recorded.
    def delete_model(self, request, obj):
        with transaction.atomic():
            losses = losses_of([obj], lock=True)
            segments = {obj.pk: obj}  # before Django's delete() clears its pk
            super().delete_model(request, obj)
            self._record(request, losses, segments)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            segments = list(queryset.order_by("pk"))
            losses = losses_of(segments, lock=True)
            super().delete_queryset(request, queryset)
            self._record(request, losses, {s.pk: s for s in segments})

    def _record(self, request, losses: list[AudienceLoss], segments: dict[int, Segment]) -> None:
        """A change in the History of each campaign whose audience the deletion shrank."""
        campaigns = Campaign.objects.in_bulk([loss.campaign_id for loss in losses])
        for loss in losses:
            self.log_change(request, campaigns[loss.campaign_id], history_message(loss, segments))

    def _refusal(self, request, segments, losses, back_url):
        return TemplateResponse(request, "growth/admin/segment_delete_refused.html", {
            **self.admin_site.each_context(request), "opts": self.opts,
            "title": (f"Cannot delete segment “{segments[0]}”" if len(segments) == 1
                      else "Cannot delete the selected segments"),
            "segments": segments, "campaigns": described(losses, segments),
            "back_url": back_url})
