from __future__ import annotations

from django.db import models

from growth.managers.queries import Queries

QUERIES = Queries.beside(__file__)


class SendLedgerManager(models.Manager):
    """Reads of the per-recipient ledger: who got what (see ledger.sql)."""
