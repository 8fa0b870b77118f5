from __future__ import annotations

from django.db import models

from growth.managers.queries import Queries

QUERIES = Queries.beside(__file__)


class CampaignMonitorManager(models.Manager):
    """Reads for the operators' live monitor (see monitor.sql)."""
