"""The ESPs' webhooks around anymail's views: what a post gets back whatever it holds, and
Mailgun's one-time tokens.

- Missing or wrong credentials: 401 and a challenge. anymail refuses them with a
  SuspiciousOperation, which Django answers 400: to an ESP that reads as a broken payload, not as
  credentials to fix. (Amazon SNS sends credentials only once challenged; anymail answers its
  first, bare post 401 itself.)
- A body anymail cannot parse (truncated JSON, an array or a string where an object belongs,
  bytes that are not UTF-8, XML): 400, never a 500 that the ESP would post again for days.
- Each post is one transaction: a body that fails half way writes nothing. Only a database that
  is away answers 500, so that the ESP posts again later (harmless: each event acts once).
- Mailgun: a signature's token is good for one body. The same token on another body is a
  replayed signature (Mailgun's documentation: cache the token, refuse it when seen again).
- Only the tracking webhooks are routed (the feedback reads tracking events; an inbound post
  would reach no receiver), and those of an ESP this install does not use answer 404: anymail
  refuses to build the view of an ESP without its settings, which was a 500 for anyone's post.
  An ESP in use (its backend, or any of its ANYMAIL settings) that lacks one still answers 500.
"""

from __future__ import annotations

import json
import logging

from anymail.exceptions import AnymailWebhookValidationFailure
from anymail.utils import get_anymail_setting, get_request_basic_auth
from anymail.webhooks.mailgun import MailgunTrackingWebhookView
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db import DatabaseError, transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotFound
from django.urls import URLPattern
from django.utils.crypto import constant_time_compare

from growth.models import FeedbackEvent

logger = logging.getLogger("growth.feedback")

WEBHOOK_PREFIX = "/anymail/"


class WebhookMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(WEBHOOK_PREFIX):
            return self.get_response(request)
        with transaction.atomic():
            return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not request.path.startswith(WEBHOOK_PREFIX):
            return None
        transaction.set_rollback(True)
        if isinstance(exception, ImproperlyConfigured) and not _in_use(_esp_of(request.path)):
            return HttpResponseNotFound("No such webhook here.\n",
                                        content_type="text/plain; charset=utf-8")
        if isinstance(exception, DatabaseError | ImproperlyConfigured | Http404 | PermissionDenied):
            return None  # a 500 for our database or settings: the ESP posts again later
        if isinstance(exception, AnymailWebhookValidationFailure):
            return _challenge(request)
        logger.warning("malformed webhook body refused (%s: %s)", type(exception).__name__,
                       exception, extra={"path": request.path})
        return HttpResponse("Malformed webhook body.\n", status=400,
                            content_type="text/plain; charset=utf-8")


def tracking_urls() -> list[URLPattern]:
    """anymail's tracking webhooks, and Mandrill's, which takes tracking and inbound at one URL."""
    from anymail import urls

    return [pattern for pattern in urls.urlpatterns
            if pattern.name.endswith("_tracking_webhook") or pattern.name == "mandrill_webhook"]


def _esp_of(path: str) -> str:
    return path.removeprefix(WEBHOOK_PREFIX).split("/", 1)[0]


def _in_use(esp: str) -> bool:
    return (settings.EMAIL_BACKEND.startswith(f"anymail.backends.{esp}.")
            or any(key.startswith(f"{esp.upper()}_") for key in settings.ANYMAIL))


def _challenge(request: HttpRequest) -> HttpResponse | None:
    secrets = get_anymail_setting("webhook_secret", default=[])
    secrets = [secrets] if isinstance(secrets, str) else list(secrets)
    given = get_request_basic_auth(request) or ""
    if not secrets or any(constant_time_compare(given, secret) for secret in secrets):
        return None  # the credentials are fine: a bad signature or payload stays anymail's 400
    logger.warning("webhook post with missing or wrong credentials refused",
                   extra={"path": request.path, "has_credentials": bool(given)})
    response = HttpResponse(status=401)
    response["WWW-Authenticate"] = 'Basic realm="webhooks"'
    return response


class MailgunTrackingView(MailgunTrackingWebhookView):
    """anymail's Mailgun tracking view, refusing a signature whose token was used on another
    body."""

    def validate_request(self, request: HttpRequest) -> None:
        super().validate_request(request)  # the signature is genuine: now, is it fresh?
        if request.content_type == "application/json":
            token = json.loads(request.body.decode("utf-8"))["signature"]["token"]
        else:
            token = request.POST["token"]
        if not FeedbackEvent.objects.use_token(esp=self.esp_name, token=str(token),
                                               body=request.body):
            logger.warning("Mailgun webhook with a used token refused: a replayed signature",
                           extra={"path": request.path})
            raise AnymailWebhookValidationFailure("Mailgun webhook token already used")
