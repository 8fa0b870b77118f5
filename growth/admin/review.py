"""For SendAdmin: an operator's decisions about 'unknown' sends — retry with the same key, mark
delivered, mark not delivered — from the list (actions) or one send's page (buttons). Each goes
through a confirmation page that says what will happen to how many sends, as Django's
delete_selected does; confirming records a verdict and a LogEntry on every send moved."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods

from growth.admin.review_queue import QUEUE_PARAMETER, REVIEW_STATUSES
from growth.admin.send_errors import read_error
from growth.job_ids import message_id
from growth.models import Campaign, Send
from growth.operations.unknown_sends import (
    Plan,
    Review,
    mark_delivered,
    mark_not_delivered,
    plan,
    retry_unknown,
)
from growth.tenancy import may_edit

LISTED = 100  # rows listed one by one on a confirmation page; beyond, a count


@dataclass(frozen=True, slots=True)
class Decision:
    slug: str  # in the send page's URL
    action: str  # the list action's name
    title: str
    moves: str
    outcome: str  # what happens to each send moved, and what it means for the recipient
    done: str  # for the message after it: "3 sends <done>."
    retry: bool  # which rows it moves: see operations.unknown_sends.plan
    operation: Callable[..., Review]


DECISIONS = {decision.slug: decision for decision in [
    Decision(
        "retry", "retry_same_key", "Retry with the same key", "unknown → queued",
        "goes back to the queue and is sent again by the worker, with the same job id and "
        "Message-ID. If the first message did arrive, the recipient gets it twice (unless the "
        "receiver de-duplicates on the key). A finished campaign goes back to sending so that "
        "the worker sends it; a paused one stays paused until resumed.",
        "queued again with the same key", True, retry_unknown),
    Decision(
        "delivered", "mark_as_delivered", "Mark as delivered", "unknown → sent",
        "is recorded as delivered. Nothing is sent again. Choose it when the relay's log (or "
        "the recipient) shows that the message arrived.",
        "marked as delivered", False, mark_delivered),
    Decision(
        "not-delivered", "mark_as_not_delivered", "Mark as not delivered", "unknown → failed",
        "is recorded as not delivered. Nothing is sent now; a follow-up campaign (“Resend to "
        "the rest…” on the campaign page) can resend it. Choose it when the relay's log shows "
        "that the message never arrived or was refused.",
        "marked as not delivered (a follow-up campaign can resend them)", False,
        mark_not_delivered),
]}


def decide_url(send_id: int, decision: Decision) -> str:
    return reverse("admin:growth_send_decide", args=[send_id, decision.slug])


class ReviewMixin:
    """For SendAdmin: the three decisions as list actions and as buttons on a send's page, and
    the queue's guidance on the list and on a send's page."""

    def review_urls(self):
        view = require_http_methods(["GET", "POST"])(self.decide_view)
        return [path("<path:object_id>/decide/<slug:decision>/", self.admin_site.admin_view(view),
                     name="growth_send_decide")]

    def has_review_permission(self, request):
        """May decide about 'unknown' rows (of the accounts it edits: see may_decide)."""
        return request.user.has_perm("growth.change_send") and may_edit(request.user, None)

    def may_decide(self, request, send: Send) -> bool:
        return self.has_review_permission(request) and may_edit(request.user, send.account_id)

    def decisions_for(self, request, send: Send) -> list[tuple[Decision, str]]:
        """The buttons of the send's page: (decision, confirmation page URL)."""
        if send.status != Send.Status.UNKNOWN or not self.may_decide(request, send):
            return []
        return [(decision, decide_url(send.pk, decision)) for decision in DECISIONS.values()]

    # --- what the list and a send's page say about the queue ---------------------------------

    def changelist_view(self, request, extra_context=None):
        status = request.GET.get("status__exact")
        in_queue = status in REVIEW_STATUSES or request.GET.get(QUEUE_PARAMETER) == "yes"
        campaign = request.GET.get("campaign__id__exact", "")
        guidance = {"review_guidance": in_queue,
                    "guidance_status": status if status in REVIEW_STATUSES else "",
                    "reconcile_campaign": campaign if campaign.isdigit() else "",
                    "retry_hours": round(settings.SENDER_RETRY_FOR / 3600)}
        return super().changelist_view(request, {**guidance, **(extra_context or {})})

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context.update({
                "needs_review": obj.status in REVIEW_STATUSES,
                "send_message_id": message_id(obj.job_id),
                "send_error": read_error(obj.last_error) if obj.last_error else None,
                "decisions": self.decisions_for(request, obj),
                "campaign_url": reverse("admin:growth_campaign_change", args=[obj.campaign_id]),
                "reconcile_campaign": obj.campaign_id,
                "retry_hours": round(settings.SENDER_RETRY_FOR / 3600),
            })
        return super().render_change_form(request, context, add, change, form_url, obj)

    # --- one send: GET or an unconfirmed POST shows the confirmation, post=yes decides ------

    def decide_view(self, request, object_id, decision):
        send = self.get_object(request, unquote(object_id))  # absent or another tenant's: 404
        chosen = DECISIONS.get(decision)
        if chosen is None:
            raise Http404("There is no such decision.")
        if not self.may_decide(request, send):
            raise PermissionDenied
        selected = Send.objects.filter(pk=send.pk)
        if (request.method == "POST" and request.POST.get("post") == "yes"
                and self._carry_out(request, chosen, selected)):
            return HttpResponseRedirect(reverse("admin:growth_send_change", args=[send.pk]))
        return self._confirmation(request, chosen, selected, send=send)

    # --- the list's actions: Django shows the confirmation, then posts back with post=yes ----

    @admin.action(description="Retry selected unknown sends (same key) → queued…",
                  permissions=["review"])
    def retry_same_key(self, request, queryset):
        return self._decide_selected(request, queryset, DECISIONS["retry"])

    @admin.action(description="Mark selected unknown sends as delivered → sent…",
                  permissions=["review"])
    def mark_as_delivered(self, request, queryset):
        return self._decide_selected(request, queryset, DECISIONS["delivered"])

    @admin.action(description="Mark selected unknown sends as not delivered → failed…",
                  permissions=["review"])
    def mark_as_not_delivered(self, request, queryset):
        return self._decide_selected(request, queryset, DECISIONS["not-delivered"])

    def _decide_selected(self, request, queryset, decision: Decision):
        if request.POST.get("post") == "yes" and self._carry_out(request, decision, queryset):
            return None  # back to the list, as it was filtered
        hidden = [("action", decision.action), ("post", "yes"),
                  *((ACTION_CHECKBOX_NAME, pk) for pk in request.POST.getlist(ACTION_CHECKBOX_NAME))]
        if request.POST.get("select_across") == "1":
            hidden.append(("select_across", "1"))
        return self._confirmation(request, decision, queryset, hidden=hidden)

    # --- both --------------------------------------------------------------------------------

    def _confirmation(self, request, decision: Decision, queryset, *, send: Send | None = None,
                      hidden: list[tuple[str, object]] | None = None):
        planned = plan(queryset, retry=decision.retry)
        rows = list(Send.objects.filter(id__in=planned.moving[:LISTED])
                    .select_related("campaign").order_by("id"))
        for row in rows:
            row.message_id = message_id(row.job_id)
            row.error_read = read_error(row.last_error)
        back = (reverse("admin:growth_send_change", args=[send.pk]) if send is not None
                else request.get_full_path())
        return TemplateResponse(request, "growth/admin/send_confirm_action.html", {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": f"{decision.title}: are you sure?", "decision": decision,
            "send": send, "moving": len(planned.moving), "rows": rows,
            "unlisted": len(planned.moving) - len(rows),
            "left_alone": sorted(planned.left_alone.items()),
            "left_alone_total": sum(planned.left_alone.values()),
            "hidden": [*(hidden or [("post", "yes")]), ("planned", _digest(planned.moving))],
            "back_url": back,
        })

    def _carry_out(self, request, decision: Decision, queryset) -> bool:
        """Move the sends the confirmed page listed, or none: if the selection now plans other
        sends (one became unknown since, a worker settled another), say so and return False,
        for the page to be shown again as it now stands."""
        planned: Plan = plan(queryset, retry=decision.retry)
        if request.POST.get("planned") != _digest(planned.moving):
            self.message_user(request, "The sends this would move changed since the page was "
                              "shown: nothing was done. Here is what it would do now.",
                              messages.WARNING)
            return False
        decided_by = f"operator {request.user.get_username()}"
        review = Review(moved=(), skipped={}, reopened_campaigns=[])
        if planned.moving:
            with transaction.atomic():  # the verdicts and their LogEntries commit together
                review = decision.operation(send_ids=planned.moving, decided_by=decided_by)
                self._log(request, decision, review, decided_by)
        self._report(request, decision, review, planned)
        return True

    def _log(self, request, decision: Decision, review: Review, decided_by: str) -> None:
        sends = Send.objects.filter(id__in=review.moved).only("id", "job_id").order_by("id")
        LogEntry.objects.log_actions(
            user_id=request.user.pk, queryset=sends, action_flag=CHANGE,
            change_message=f"{decision.title} ({decision.moves}), decided by {decided_by}; "
                           "the verdict is recorded on the send.")
        if review.reopened_campaigns:
            LogEntry.objects.log_actions(
                user_id=request.user.pk, action_flag=CHANGE,
                queryset=Campaign.objects.filter(id__in=review.reopened_campaigns).order_by("id"),
                change_message=f"Back to sending: {decided_by} retried unknown sends with the same "
                               "key, for the worker to send them.")

    def _report(self, request, decision: Decision, review: Review, planned: Plan) -> None:
        level = messages.SUCCESS if review.changed else messages.WARNING
        self.message_user(request, f"{review.changed} send{'s' if review.changed != 1 else ''} "
                          f"{decision.done}.", level)
        left_alone = dict(planned.left_alone)
        for why, count in review.skipped.items():
            left_alone[why] = left_alone.get(why, 0) + count
        for why, count in sorted(left_alone.items()):
            self.message_user(request, f"{count} left alone: {why}.", messages.WARNING)
        if review.reopened_campaigns:
            self.message_user(request, f"{len(review.reopened_campaigns)} finished campaign(s) went "
                              "back to sending so that the worker sends these rows.", messages.INFO)


def _digest(send_ids) -> str:
    """The sends a confirmation page promised to move, in one hidden field whatever their
    number (a field per id would pass Django's DATA_UPLOAD_MAX_NUMBER_FIELDS)."""
    return hashlib.sha256(",".join(map(str, sorted(send_ids))).encode()).hexdigest()
