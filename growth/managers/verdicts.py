from __future__ import annotations

from django.db import models

from growth.managers.queries import Queries

QUERIES = Queries.beside(__file__)


class VerdictManager(models.Manager):
    """Decisions about sends in doubt, each written with the status change it records (see
    verdicts.sql)."""
