"""Pluggable transports, chosen by dotted path like Django email backends (SENDER_TRANSPORT)."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from growth.sending.transports.base import BaseTransport, Delivery, Outcome, receiver_deduplicates

__all__ = ["BaseTransport", "Delivery", "Outcome", "get_transport", "receiver_deduplicates"]


def get_transport(path: str | None = None, **kwargs) -> BaseTransport:
    """Return an instance of the transport at ``path`` (default: settings.SENDER_TRANSPORT)."""
    return import_string(path or settings.SENDER_TRANSPORT)(**kwargs)
