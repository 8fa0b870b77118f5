from __future__ import annotations

import csv
from datetime import UTC
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from growth.admin.send_errors import read_error
from growth.audience.address_files import UnreadableFile, read_csv, read_text, spreadsheet_safe
from growth.audience.opt_outs import lookup_address
from growth.ledger.download import csv_download
from growth.ledger.export import for_the_tenant
from growth.models import Campaign, Membership, Subscriber, Suppression
from growth.tenant import audit
from growth.tenant.access import LOGIN_URL, member_view
from growth.tenant.forms import AddSuppressionsForm, ImportSuppressionsForm, LookupForm, SuppressAddressForm

PAGE_SIZE = 50
SHOWN_IN_MESSAGES = 10  # addresses named in a message; beyond, a count


@require_GET
@login_required(login_url=LOGIN_URL)
def home(request: HttpRequest) -> HttpResponse:
    """The accounts the user belongs to; straight to the list when there is only one."""
    memberships = list(Membership.objects.filter(user=request.user).select_related("account")
                       .order_by("account__name"))
    if len(memberships) == 1:
        return redirect("growth:tenant:suppressions", slug=memberships[0].account.slug)
    return render(request, "growth/tenant/home.html", {"memberships": memberships})


@require_GET
@member_view()
def suppression_list(request: HttpRequest, member: Membership) -> HttpResponse:
    # typed by anyone: PostgreSQL refuses NUL in text, and no address is longer than 320
    query = request.GET.get("q", "").replace("\x00", "").strip()[:320]
    reason = request.GET.get("reason", "")
    suppressions = (Suppression.objects.filter(account=member.account).select_related("campaign")
                    .order_by("-created_at", "-id"))
    if query:
        suppressions = suppressions.filter(email_lower__icontains=query)
    counts = _counts_by_reason(suppressions)
    if reason in Suppression.Reason.values:
        suppressions = suppressions.filter(reason=reason)
    else:
        reason = ""
    page = Paginator(suppressions, PAGE_SIZE).get_page(request.GET.get("page"))
    return _page(request, member, "suppression_list.html", page=page, query=query, reason=reason,
                 reasons=Suppression.Reason.choices, counts=counts,
                 changes=audit.recent_changes(member.account_id))


def _counts_by_reason(suppressions) -> list[tuple[str, str, int]]:
    """(reason, label, how many) for every reason, "" first for all of them: one aggregate over
    the list as searched, each a link that filters it."""
    counted = suppressions.aggregate(
        all=Count("id"),
        **{value: Count("id", filter=Q(reason=value)) for value in Suppression.Reason.values})
    return [("", "All", counted["all"])] + [
        (value, label, counted[value]) for value, label in Suppression.Reason.choices]


@require_http_methods(["GET", "POST"])
@member_view(edit=True)
def suppression_add(request: HttpRequest, member: Membership) -> HttpResponse:
    form = AddSuppressionsForm(request.POST or None)
    invalid = []
    if request.method == "POST" and form.is_valid():
        addresses = read_text(form.cleaned_data["addresses"])
        report = audit.add(member, request.user, addresses=addresses,
                           reason=form.cleaned_data["reason"])
        if report.imported:
            _say_added(request, report)
            return redirect("growth:tenant:suppressions", slug=member.account.slug)
        invalid = report.invalid  # nothing added; the form keeps what was typed
        form.add_error("addresses", f"Nothing was added: {len(invalid)} invalid "
                                    f"address{'es' if len(invalid) != 1 else ''}.")
    return _page(request, member, "suppression_add.html", form=form, invalid=invalid)


@require_http_methods(["GET", "POST"])
@member_view(edit=True)
def suppression_remove(request: HttpRequest, member: Membership, pk: int) -> HttpResponse:
    """GET asks for confirmation; POST removes. Another tenant's id is a 404, like a missing one.
    ``back=lookup``: asked from the address's lookup, which it then returns to."""
    back_to_lookup = request.POST.get("back", request.GET.get("back")) == "lookup"
    if request.method == "POST":
        try:
            address = audit.remove(member, request.user, suppression_id=pk)
        except Suppression.DoesNotExist:
            raise Http404("There is no such suppression in this account.") from None
        messages.success(request, f"{address} is no longer suppressed.")
        if back_to_lookup:
            return redirect(_lookup_url(member, address))
        return redirect("growth:tenant:suppressions", slug=member.account.slug)
    suppression = get_object_or_404(Suppression.objects.select_related("campaign"),
                                    pk=pk, account=member.account)
    unsubscribed = Subscriber.objects.filter(account=member.account,
                                             email_lower=suppression.email_lower,
                                             status=Subscriber.Status.UNSUBSCRIBED).count()
    cancel_url = (_lookup_url(member, suppression.email_lower) if back_to_lookup
                  else reverse("growth:tenant:suppressions", args=[member.account.slug]))
    return _page(request, member, "suppression_remove.html", suppression=suppression,
                 unsubscribed=unsubscribed, back_to_lookup=back_to_lookup, cancel_url=cancel_url)


@require_http_methods(["GET", "POST"])
@member_view(edit=True)
def suppression_import(request: HttpRequest, member: Membership) -> HttpResponse:
    form = ImportSuppressionsForm(request.POST or None, request.FILES or None)
    report = error = None
    if request.method == "POST" and form.is_valid():
        try:
            report = audit.import_file(member, request.user,
                                       addresses=read_csv(form.cleaned_data["file"]),
                                       file_name=form.cleaned_data["file"].name,
                                       skip_invalid=form.cleaned_data["skip_invalid"],
                                       check_only=form.cleaned_data["check_only"])
        except UnreadableFile as exc:
            error = f"Nothing was imported: {exc}"
    return _page(request, member, "suppression_import.html", form=form, report=report, error=error)


@require_GET
@member_view()
def suppression_export(request: HttpRequest, member: Membership) -> StreamingHttpResponse:
    """The whole list as CSV, streamed (a list can be long); the import reads it back as is."""
    rows = (Suppression.objects.filter(account=member.account).order_by("email_lower")
            .values_list("email_lower", "reason", "created_at", "campaign__name")
            .iterator(chunk_size=2000))
    writer = csv.writer(_Echo())

    def lines():
        yield writer.writerow(["email", "reason", "suppressed_at", "campaign"])
        for email, reason, created_at, campaign in rows:
            yield writer.writerow([spreadsheet_safe(email), reason,
                                   created_at.astimezone(UTC).isoformat(),
                                   spreadsheet_safe(campaign or "")])

    filename = f"{member.account.slug}-suppressions-{timezone.now():%Y%m%d}.csv"
    return StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="{filename}"'})


@require_GET
@member_view()
def campaign_list(request: HttpRequest, member: Membership) -> HttpResponse:
    """The account's campaigns, newest first, each with its recipients' export."""
    campaigns = Campaign.objects.filter(account=member.account).order_by("-created_at", "-id")
    page = Paginator(campaigns, PAGE_SIZE).get_page(request.GET.get("page"))
    return _page(request, member, "campaign_list.html", page=page)


@require_GET
@member_view()
def campaign_export(request: HttpRequest, member: Membership, campaign_id: int) -> StreamingHttpResponse:
    """Who got what in one of the account's campaigns, as CSV, streamed page by page (a campaign
    can have millions of recipients). Another tenant's campaign is a 404, like a missing one."""
    campaign = get_object_or_404(Campaign.objects.only("id"), pk=campaign_id, account=member.account)
    return csv_download(campaign.id, tenant=True)


@require_GET
@member_view()
def lookup(request: HttpRequest, member: Membership) -> HttpResponse:
    form = LookupForm(request.GET if "email" in request.GET else None)
    result = None
    if form.is_bound and form.is_valid():
        try:
            result = lookup_address(account_id=member.account_id, raw=form.cleaned_data["email"])
        except ValidationError as exc:
            form.add_error("email", exc.messages)
    return _lookup_page(request, member, form, result)


@require_POST
@member_view(edit=True)
def lookup_suppress(request: HttpRequest, member: Membership) -> HttpResponse:
    """Suppress the address a lookup shows, then show its lookup again."""
    form = SuppressAddressForm(request.POST)
    if form.is_valid():
        try:
            result = lookup_address(account_id=member.account_id, raw=form.cleaned_data["email"])
        except ValidationError as exc:
            form.add_error("email", exc.messages)
        else:
            if audit.suppress_one(member, request.user, email_lower=result.email_lower,
                                  reason=form.cleaned_data["reason"]):
                messages.success(request, f"{result.email_lower} is suppressed.")
            else:
                messages.info(request, f"{result.email_lower} was already suppressed; "
                                       "left as it was.")
            return redirect(_lookup_url(member, result.email_lower))
    problems = " ".join(f"{form[field].label}: {' '.join(errors)}"
                        for field, errors in form.errors.items())
    return _lookup_page(request, member, LookupForm(), None, status=400,
                        error=f"Nothing was suppressed. {problems}")


def _lookup_page(request: HttpRequest, member: Membership, form: LookupForm,
                 result, *, status: int = 200, error: str = "") -> HttpResponse:
    failure = result and result.last_failure
    suppress_form = None
    if result and result.suppression is None and member.can_edit:
        suppress_form = SuppressAddressForm(initial={"email": result.email_lower})
    reason = failure and read_error(for_the_tenant(failure.last_error))
    changes = result and audit.recent_changes(member.account_id, email_lower=result.email_lower)
    response = _page(request, member, "lookup.html", form=form, result=result, error=error,
                     failure=failure, failure_reason=reason, suppress_form=suppress_form,
                     changes=changes)
    response.status_code = status
    return response


def _lookup_url(member: Membership, email_lower: str) -> str:
    return (reverse("growth:tenant:lookup", args=[member.account.slug])
            + "?" + urlencode({"email": email_lower}))


def _page(request: HttpRequest, member: Membership, template: str, **context) -> HttpResponse:
    """Render a page of the account, with what the layout needs (the account switcher)."""
    others = (Membership.objects.filter(user=request.user).exclude(id=member.id)
              .select_related("account").order_by("account__name"))
    return render(request, f"growth/tenant/{template}", {
        "member": member, "account": member.account, "other_memberships": others, **context})


def _say_added(request: HttpRequest, report) -> None:
    added = [entry.address.email_lower for entry in report.accepted]
    already = [d.email for d in report.duplicates if d.why == "already suppressed"]
    if added:
        messages.success(request, f"Suppressed {len(added)}: {_names(added)}.")
    if already:
        messages.info(request, f"Already suppressed, left as they were: {_names(already)}.")


def _names(addresses: list[str]) -> str:
    shown = ", ".join(addresses[:SHOWN_IN_MESSAGES])
    more = len(addresses) - SHOWN_IN_MESSAGES
    return f"{shown} and {more} more" if more > 0 else shown


class _Echo:
    def write(self, value: str) -> str:
        return value

