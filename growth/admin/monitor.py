"""The campaign admin's live monitor."""

from __future__ import annotations


class MonitorMixin:
    """For CampaignAdmin: the monitor's endpoints."""

    def get_monitor_urls(self):
        return []
