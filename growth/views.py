from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from growth.models import Account, Subscriber, Suppression
from growth.sending.unsubscribe import BadToken, read_token


@csrf_exempt  # RFC 8058: mail clients POST here with no cookie and no token but the signed URL
@never_cache  # a shared cache must not answer for someone else's link
@require_http_methods(["GET", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows a confirmation and changes nothing (link scanners follow GETs); POST, from the
    page's button or a one-click client, records the opt-out. Repeating it is harmless."""
    try:
        target = read_token(token)
    except BadToken:
        return render(request, "growth/unsubscribe_invalid.html", status=400)
    account = Account.objects.filter(id=target.account_id).first()
    if account is None or not Subscriber.objects.filter(id=target.subscriber_id,
                                                        account=account).exists():
        return render(request, "growth/unsubscribe_invalid.html", status=400)
    if request.method == "GET":
        return render(request, "growth/unsubscribe_confirm.html", {"account": account})
    address = Suppression.objects.unsubscribe(account_id=target.account_id,
                                              subscriber_id=target.subscriber_id,
                                              campaign_id=target.campaign_id)
    if address is None:
        return render(request, "growth/unsubscribe_invalid.html", status=400)
    return render(request, "growth/unsubscribe_done.html", {"account": account})
