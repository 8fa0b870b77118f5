"""Steering a campaign from the admin: the buttons its current state allows, a confirmation page
for each (what will happen, to how many recipients), the compare-and-set itself, and a History
entry (LogEntry) with who and what."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format

from growth.managers.campaigns import Cancelled
from growth.models import Campaign
from growth.operations.campaigns import (
    TransitionRefused,
    approve_campaign,
    cancel_campaign,
    pause_campaign,
    resume_campaign,
    send_now,
    sender_warning,
)
from growth.operations.follow_ups import resend_audience
from growth.sending.sender import as_read

MAX_MESSAGES = 20  # refusals listed one by one; beyond, a count
S = Campaign.Status


@dataclass(frozen=True)
class Seen:
    """A campaign as its confirmation page showed it: what the operator agreed to act on."""

    status: str
    version: datetime  # its updated_at

    def key(self, campaign_id: int) -> str:
        return f"{campaign_id}:{self.status}:{self.version.isoformat()}"

    @classmethod
    def of(cls, campaign: Campaign) -> Seen:
        return cls(campaign.status, campaign.updated_at)

    @classmethod
    def posted(cls, request) -> dict[int, Seen]:
        """The campaigns the confirmed page showed, by id (a damaged value: not shown)."""
        seen = {}
        for value in request.POST.getlist("seen"):
            try:
                pk, status, version = value.split(":", 2)
                seen[int(pk)] = cls(status, datetime.fromisoformat(version))
            except ValueError:
                continue
        return seen


@dataclass(frozen=True)
class Transition:
    name: str
    button: str
    done: str  # past participle, for messages and History
    run: Callable[[int, Seen], object]  # (campaign id, as shown): compare-and-set on what was shown
    allowed: tuple[str, ...]  # the statuses the button shows in
    dangerous: bool = False
    on_the_wire: bool = False  # it puts the campaign on the wire, as its account's sender


TRANSITIONS = {t.name: t for t in [
    Transition("approve", "Approve", "approved",
               lambda pk, seen: approve_campaign(campaign_id=pk, version=seen.version), (S.DRAFT,),
               on_the_wire=True),
    Transition("send_now", "Send now", "set to go out now",
               lambda pk, seen: send_now(campaign_id=pk, expected=seen.status, version=seen.version),
               (S.DRAFT, S.APPROVED), on_the_wire=True),
    Transition("pause", "Pause", "paused", lambda pk, seen: pause_campaign(campaign_id=pk),
               (S.SENDING,)),
    Transition("resume", "Resume", "resumed", lambda pk, seen: resume_campaign(campaign_id=pk),
               (S.PAUSED,), on_the_wire=True),
    Transition("cancel", "Cancel", "cancelled",
               lambda pk, seen: cancel_campaign(campaign_id=pk, expected=seen.status),
               (S.DRAFT, S.APPROVED, S.SENDING, S.PAUSED), dangerous=True),
]}


def effect(transition: Transition, campaign: Campaign) -> str:
    """What confirming will do to this campaign's recipients, counted now."""
    counts = Campaign.objects.progress([campaign.id]).get(campaign.id, {})
    queued, on_wire, sent = (counts.get(s, 0) for s in ("queued", "sending", "sent"))
    if transition.name in ("approve", "send_now"):
        when = ("at once" if transition.name == "send_now" or campaign.scheduled_for is None
                or campaign.scheduled_for <= timezone.now()
                else f"at {date_format(timezone.localtime(campaign.scheduled_for), 'DATETIME_FORMAT')}")
        return f"It will start {when} and go to {_audience(campaign)}."
    if transition.name == "pause":
        return (f"The worker stops taking its recipients: {queued:,} queued wait until it is "
                f"resumed; {on_wire:,} on the wire now finish; {sent:,} are sent.")
    if transition.name == "resume":
        return (f"The worker goes on with its {queued:,} queued recipients ({sent:,} are "
                f"sent).{_new_sender(campaign)}")
    if campaign.recipients_built_at is None:
        return f"Nobody will get it: it would have gone to {_audience(campaign)}."
    in_doubt = Campaign.objects.queued_in_doubt(campaign_id=campaign.id)
    doubt = (f"; {in_doubt:,} queued again after an attempt that may have reached them may "
             "already have it: they become unknown, for you to settle" if in_doubt else "")
    return (f"{queued - in_doubt:,} queued recipients will never get it (cancelled){doubt}; "
            f"{on_wire:,} on the wire now finish; {sent:,} already sent stay sent. This cannot "
            "be undone (a follow-up campaign can resend to the rest later).")


def _row(transition: Transition, campaign: Campaign) -> tuple[Campaign, str | None, str]:
    """(campaign, what confirming does to it or None: left alone, a warning of its sender)."""
    if campaign.status not in transition.allowed:
        return campaign, None, ""
    warning = sender_warning(campaign=campaign) if transition.on_the_wire else ""
    return campaign, effect(transition, campaign), warning


def _new_sender(campaign: Campaign) -> str:
    """Resuming takes the account's sender: say so when it is not the one the campaign has sent
    as so far."""
    account = campaign.account
    if not campaign.from_email or ((campaign.from_email, campaign.from_name)
                                   == (account.from_email, account.from_name)):
        return ""
    now = as_read(name=account.from_name, address=account.from_email)
    so_far = as_read(name=campaign.from_name, address=campaign.from_email)
    return f" They will go out from the account's sender now, “{now}” (so far: “{so_far}”)."


def _n(count: int, noun: str, plural: str = "") -> str:
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def _audience(campaign: Campaign) -> str:
    """The recipients its build would create, counted without building it."""
    if campaign.resend_of_id:
        original = campaign.resend_of
        counted = resend_audience(original).total(
            include_unknown=campaign.resend_unknown,
            include_new_subscribers=campaign.resend_new_subscribers)
        return (f"{_n(counted, 'recipient')} (those “{original}” did not reach, as of now; "
                "counted again when it starts)")
    audience = Campaign.objects.audience(campaign_id=campaign.id)
    left_out = audience["addresses"] - audience["recipients"]
    return (f"{_n(audience['recipients'], 'recipient')}, as of now "
            f"({_n(audience['addresses'], 'address', 'addresses')} in its "
            f"segments, {left_out:,} of them suppressed or not confirmed; the list is built when "
            "it starts)")


class TransitionAdminMixin:
    """For CampaignAdmin: buttons on the page, confirmed actions on the list."""

    def transition_urls(self):
        return [path("<path:object_id>/do/<str:name>/", self.admin_site.admin_view(
            self.transition_view), name="growth_campaign_transition")]

    def transition_buttons(self, request, campaign: Campaign) -> list[tuple[str, str, bool]]:
        """(label, url, dangerous) of the transitions the campaign's status allows."""
        if not self.has_change_permission(request, campaign):
            return []
        return [(f"{t.button}…", reverse("admin:growth_campaign_transition",
                                         args=[campaign.pk, t.name]), t.dangerous)
                for t in TRANSITIONS.values() if campaign.status in t.allowed]

    def transition_view(self, request, object_id, name):
        transition = TRANSITIONS.get(name)
        if transition is None:
            raise Http404("There is no such action.")
        campaign = self.get_object(request, unquote(object_id))  # another tenant's: 404
        if not self.has_change_permission(request, campaign):
            raise PermissionDenied
        change_url = reverse("admin:growth_campaign_change", args=[campaign.pk])
        if request.method == "POST" and request.POST.get("post") == "yes":
            self._run(request, transition, [campaign])
            return HttpResponseRedirect(change_url)
        if campaign.status not in transition.allowed:
            self.message_user(request, f"“{campaign}” is {campaign.status}: it cannot be "
                              f"{transition.done}.", messages.ERROR)
            return HttpResponseRedirect(change_url)
        return self._confirmation(request, transition, [campaign], change_url)

    # --- the list's actions, confirmed like delete_selected ---------------------------------

    @admin.action(description="Approve selected campaigns…", permissions=["change"])
    def approve(self, request, queryset):
        return self._confirmed_action(request, queryset, TRANSITIONS["approve"])

    @admin.action(description="Send selected campaigns now…", permissions=["change"])
    def send_now(self, request, queryset):
        return self._confirmed_action(request, queryset, TRANSITIONS["send_now"])

    @admin.action(description="Pause selected campaigns…", permissions=["change"])
    def pause(self, request, queryset):
        return self._confirmed_action(request, queryset, TRANSITIONS["pause"])

    @admin.action(description="Resume selected campaigns…", permissions=["change"])
    def resume(self, request, queryset):
        return self._confirmed_action(request, queryset, TRANSITIONS["resume"])

    @admin.action(description="Cancel selected campaigns…", permissions=["change"])
    def cancel(self, request, queryset):
        return self._confirmed_action(request, queryset, TRANSITIONS["cancel"])

    def _confirmed_action(self, request, queryset, transition: Transition):
        campaigns = list(queryset.order_by("id"))
        if request.POST.get("post") == "yes":
            self._run(request, transition, campaigns)
            return None  # back to the list
        return self._confirmation(request, transition, campaigns,
                                  reverse("admin:growth_campaign_changelist"), from_list=True)

    def _confirmation(self, request, transition: Transition, campaigns, back_url, *,
                      from_list=False):
        rows = [_row(transition, c) for c in campaigns]
        return TemplateResponse(request, "growth/admin/campaign_confirm.html", {
            **self.admin_site.each_context(request),
            "title": f"{transition.button} {len(campaigns)} campaign{'s' if len(campaigns) != 1 else ''}?"
                     if from_list else f"{transition.button} “{campaigns[0]}”?",
            "opts": self.opts, "transition": transition, "rows": rows, "back_url": back_url,
            "from_list": from_list, "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "movable": sum(1 for _, e, _ in rows if e is not None),
            "seen": [Seen.of(c).key(c.pk) for c in campaigns],
        })

    def _run(self, request, transition: Transition, campaigns) -> None:
        """Each campaign as its confirmation page showed it, or not at all: a campaign that moved
        (or was edited) since is left alone with a word, never acted on in a state the operator
        did not see (a draft's "nobody will get it" cancelling a campaign that started since)."""
        moved, refusals = [], []
        shown = Seen.posted(request)
        for campaign in campaigns:
            seen = shown.get(campaign.pk)
            if seen is None:
                refusals.append(f"“{campaign}” was not offered by the page you confirmed: nothing "
                                "was done to it.")
                continue
            if seen.status != campaign.status:
                refusals.append(f"“{campaign}” is {campaign.status} now, not {seen.status} as the "
                                "page you confirmed showed it: nothing was done to it. Look again.")
                continue
            try:
                outcome = transition.run(campaign.pk, seen)
            except TransitionRefused as exc:
                refusals.append(str(exc))
                continue
            except ValidationError as exc:
                refusals.append(f"“{campaign}”: {' '.join(exc.messages)}")
                continue
            dropped = f" ({outcome})" if isinstance(outcome, Cancelled) else ""
            self.log_change(request, campaign, f"{transition.done.capitalize()}{dropped}.")
            moved.append(f"“{campaign}”{dropped}")
        if moved:
            self.message_user(request, f"{len(moved)} campaign{'s' if len(moved) != 1 else ''} "
                              f"{transition.done}: {', '.join(moved)}.", messages.SUCCESS)
        if refusals:
            self.message_user(request, f"{len(refusals)} not {transition.done}:", messages.WARNING)
            for refusal in refusals[:MAX_MESSAGES]:
                self.message_user(request, refusal, messages.WARNING)
            if len(refusals) > MAX_MESSAGES:
                self.message_user(request, f"… and {len(refusals) - MAX_MESSAGES} more.",
                                  messages.WARNING)
