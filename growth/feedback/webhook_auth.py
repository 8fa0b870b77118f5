"""A webhook post with missing or wrong credentials gets 401 and a challenge.

anymail refuses it with a SuspiciousOperation, which Django answers 400: to an ESP that reads as
a broken payload, not as credentials to fix. (Amazon SNS sends credentials only once challenged;
anymail answers its first, bare post 401 itself.)
"""

from __future__ import annotations

import logging

from anymail.exceptions import AnymailWebhookValidationFailure
from anymail.utils import get_anymail_setting, get_request_basic_auth
from django.http import HttpRequest, HttpResponse
from django.utils.crypto import constant_time_compare

logger = logging.getLogger("growth.feedback")


class WebhookAuthMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, AnymailWebhookValidationFailure):
            return None
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
