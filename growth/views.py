from __future__ import annotations

from urllib.parse import urlencode

from django.core.exceptions import BadRequest, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods

from growth.audience import opt_outs
from growth.models import Subscriber
from growth.sending.unsubscribe import (
    UNDO_MAX_AGE,
    BadToken,
    ExpiredToken,
    UnsubscribeTarget,
    make_undo_token,
    read_token,
    read_undo_token,
)
from growth.tenancy import account_ids_for


@csrf_exempt  # RFC 8058: mail clients POST here with no cookie and no token but the signed URL
@never_cache  # a shared cache must not answer for someone else's link
@require_http_methods(["GET", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows a confirmation, or that the address is unsubscribed already, and changes nothing
    (link scanners follow GETs). POST records the opt-out; repeating it is harmless. The page's
    own button (its form says ``source=page``) is sent on to the done page, which offers the undo
    (Post/Redirect/Get: a reload of it posts nothing); any other POST, a mail client's RFC 8058
    one-click (body ``List-Unsubscribe=One-Click``) first, is answered 200 at once."""
    found = _recipient_of(token)
    if found is None:
        return _invalid_link(request)
    target, recipient = found
    if request.method == "GET":
        shown = "already" if recipient.is_suppressed() else "confirm"
        return render(request, f"growth/unsubscribe_{shown}.html", {"recipient": recipient})
    from_the_page = _from_the_page(request)  # read first: a bad body must not cost the opt-out
    try:
        undo = opt_outs.unsubscribe(recipient, campaign_id=target.campaign_id)
    except Subscriber.DoesNotExist:  # deleted since it was read
        return _invalid_link(request)
    undo_token = make_undo_token(undo) if undo else ""
    if not from_the_page:
        return render(request, "growth/unsubscribe_done.html",
                      {"recipient": recipient, "undo_token": undo_token})
    done = reverse("growth:unsubscribe-done", args=[token])
    return _see_other(f"{done}?{urlencode({'undo': undo_token})}" if undo_token else done)


@never_cache
@require_GET
def unsubscribe_done(request: HttpRequest, token: str) -> HttpResponse:
    """Where the page's button lands. ``undo``: the undo token of that opt-out, offered as a
    link while it can still be used (an expired or spent one is simply not offered)."""
    found = _recipient_of(token)
    if found is None:
        return _invalid_link(request)
    target, recipient = found
    if not recipient.is_suppressed():  # never unsubscribed, or undone since: ask
        return redirect("growth:unsubscribe", token=token)
    undo_token = request.GET.get("undo", "")
    if undo_token:
        try:
            undo = read_undo_token(undo_token)
        except ExpiredToken:
            undo = None
        except BadToken:
            return _invalid_link(request)
        if undo and (undo.account_id, undo.subscriber_id) != (target.account_id,
                                                              target.subscriber_id):
            return _invalid_link(request)
        if undo is None or not opt_outs.can_resubscribe(recipient, undo):
            undo_token = ""
    return render(request, "growth/unsubscribe_done.html",
                  {"recipient": recipient, "undo_token": undo_token})


@never_cache
@require_http_methods(["GET", "POST"])
def unsubscribe_undo(request: HttpRequest, undo_token: str) -> HttpResponse:
    """"Unsubscribed by mistake? Resubscribe": GET asks (or says it is done, or cannot be done
    from here); POST, with the CSRF token of that page, undoes the opt-out the undo token names
    (see growth.audience.opt_outs.resubscribe for what it lifts and what never) and redirects to
    the GET. A damaged token gets the 400 page and changes nothing."""
    try:
        undo = read_undo_token(undo_token)
    except ExpiredToken:
        return _invalid_link(request, expired=True)
    except BadToken:
        return _invalid_link(request)
    recipient = opt_outs.find_recipient(account_id=undo.account_id, subscriber_id=undo.subscriber_id)
    if recipient is None:
        return _invalid_link(request)
    if request.method == "POST":
        opt_outs.resubscribe(recipient, undo)
        return _see_other(request.path)
    if opt_outs.can_resubscribe(recipient, undo):
        state = "confirm"
    elif opt_outs.is_resubscribed(recipient, undo):
        state = "done"
    else:
        state = "refused"
    return render(request, "growth/unsubscribe_undo.html",
                  {"recipient": recipient, "state": state, "days": UNDO_MAX_AGE.days})


def _recipient_of(token: str) -> tuple[UnsubscribeTarget, opt_outs.Recipient] | None:
    """Who an unsubscribe link names; None for a damaged link or a subscriber not (or no longer)
    of that account."""
    try:
        target = read_token(token)
    except BadToken:
        return None
    recipient = opt_outs.find_recipient(account_id=target.account_id,
                                        subscriber_id=target.subscriber_id,
                                        campaign_id=target.campaign_id)
    return None if recipient is None else (target, recipient)


def _from_the_page(request: HttpRequest) -> bool:
    try:
        return request.POST.get("source") == "page"
    except (MultiPartParserError, SuspiciousOperation, BadRequest, ValueError):
        return False  # a body that cannot be read is not our form's; the opt-out still counts


def _see_other(url: str) -> HttpResponse:
    response = HttpResponseRedirect(url)
    response.status_code = 303  # GET the page that follows, whatever the method was
    return response


def _invalid_link(request: HttpRequest, *, expired: bool = False) -> HttpResponse:
    return render(request, "growth/unsubscribe_invalid.html", {"expired": expired}, status=400)


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The site's front door: an operator goes to the admin, a tenant to their accounts, anyone
    else gets a page saying which is which (recipients come with a link of their own)."""
    user = request.user
    if user.is_authenticated and user.is_active:
        if user.is_staff:
            return redirect("admin:index")
        if account_ids_for(user):
            return redirect("growth:tenant:home")
    return render(request, "growth/home.html")
