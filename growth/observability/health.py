"""Health checks for load balancers and orchestrators, and the web app's /metrics."""

from __future__ import annotations

import ipaddress
import logging

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.crypto import constant_time_compare
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from growth.observability.metrics import web_registry

_REGISTRY = None
logger = logging.getLogger(__name__)
_FORWARDED = {"Forwarded", "Via", "X-Real-Ip"}  # headers a reverse proxy adds, or X-Forwarded-*


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """The process answers (no database involved): for liveness probes."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """The database answers and every migration is applied: for readiness probes."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        pending = migrations_pending()
    except DatabaseError as exc:
        connection.close()  # a broken connection is not kept for the next probe
        # the driver's text names the database's host, port and role: the log's, not anyone's
        logger.warning("readiness: the database does not answer (%s)", str(exc).strip()[:500])
        return JsonResponse({"status": "unavailable", "database": "unavailable"}, status=503)
    if pending:
        return JsonResponse({"status": "unavailable", "migrations_pending": pending},
                            status=503)
    return JsonResponse({"status": "ok"})


def migrations_pending() -> int:
    """Migrations the database lacks (a DatabaseError when it does not answer)."""
    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))


PROBES = {"/healthz": healthz, "/readyz": readyz}


class ProbeMiddleware:
    """Answers the probes before anything checks the request's host or scheme. A kubelet or a
    load balancer's health check addresses the process by its own IP, over plain HTTP: the host
    check (ALLOWED_HOSTS) refused it with a 400 and SECURE_SSL_REDIRECT sent it to https, so the
    target never became healthy. What they answer depends on neither."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info)
        return probe(request) if probe is not None else self.get_response(request)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition. With METRICS_TOKEN set, for a Bearer of it; without, loopback only,
    and not through a reverse proxy (which makes every client loopback): none when the settings
    say one is in front (BEHIND_TLS_PROXY, TRUSTED_PROXY_COUNT), nor for a request that shows
    one passed it on."""
    if not _allowed(request):
        return HttpResponse(status=404)
    global _REGISTRY
    _REGISTRY = _REGISTRY or web_registry()
    return HttpResponse(generate_latest(_REGISTRY), content_type=CONTENT_TYPE_LATEST)


def _allowed(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return constant_time_compare(given, token)
    if settings.SECURE_PROXY_SSL_HEADER or settings.TRUSTED_PROXY_COUNT:
        return False  # behind a proxy: loopback is anyone
    if any(name in _FORWARDED or name.startswith("X-Forwarded-") for name in request.headers):
        return False  # a proxy on this host: the client is anyone
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False
