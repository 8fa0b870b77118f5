"""Recipients opting out while their campaign is going out, some through the public RFC 8058
endpoint over HTTP, some straight through the suppression manager.

Each chosen row is still ``queued`` and stays locked (FOR UPDATE) until the opt-out has committed,
so no worker can have claimed it first: from ``locked_at`` on, the receiver must never get it. On
the lease protocol a claim writes no send row (a row on the wire stays ``queued``) and takes the
campaign's cursor lock instead: the round holds that lock too, and chooses among the rows in no
lease. Holding it stops every claim of the campaign, so on leases the round opts out through the
manager only, a few milliseconds (the one-click's HTTP round trips held the claims long enough,
on a loaded machine, that a CI-sized run did not finish): the one-click path is driven on the row
protocol, and its own tests cover it.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.request
from dataclasses import dataclass
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.wsgi import get_wsgi_application
from django.db import transaction

from growth.models import Send, SendCursor, SendLease, Suppression
from growth.sending.unsubscribe import LinkMaker


@dataclass(frozen=True, slots=True)
class OptOut:
    key: str  # the job id the receiver must never get from locked_at on
    email_lower: str
    via: str  # http | manager
    locked_at: float  # time.time() when the queued row was locked
    committed_at: float


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


class PublicSite:
    """This project's own WSGI application on a loopback port, for the one-click POSTs."""

    def __init__(self) -> None:
        self._server: WSGIServer = make_server("127.0.0.1", 0, get_wsgi_application(),
                                               handler_class=_Quiet)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> PublicSite:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class OptOutDriver:
    def __init__(self, campaign_id: int, *, site: PublicSite | None, seed: int = 0) -> None:
        self.campaign_id = campaign_id
        self.site = site
        self.links = LinkMaker(site.url) if site else None
        self.done: list[OptOut] = []
        self._rng = random.Random(seed)

    def round(self, count: int) -> None:
        """Opt out up to ``count`` recipients whose rows are still queued."""
        with transaction.atomic():
            on_leases = list(SendCursor.objects.select_for_update()  # no claim from here on
                             .filter(campaign_id=self.campaign_id).values_list("pk", flat=True))
            leased = ([i for ids in SendLease.objects.filter(campaign_id=self.campaign_id)
                       .values_list("send_ids", flat=True) for i in ids] if on_leases else [])
            rows = list(Send.objects.select_for_update(skip_locked=True)
                        .filter(campaign_id=self.campaign_id, status=Send.Status.QUEUED)
                        .exclude(id__in=leased)
                        .order_by("?")[:count]
                        .values("id", "account_id", "subscriber_id", "email_lower", "job_id"))
            locked_at = time.time()
            through_manager = []
            for row in rows:
                if self.site and not on_leases and self._rng.random() < 0.5:
                    self._one_click(row)
                    self.done.append(OptOut(row["job_id"], row["email_lower"], "http", locked_at,
                                            time.time()))
                else:
                    Suppression.objects.suppress(account_id=row["account_id"],
                                                 email_lower=row["email_lower"],
                                                 reason="unsubscribed",
                                                 campaign_id=self.campaign_id)
                    through_manager.append(row)
        committed_at = time.time()
        self.done += [OptOut(r["job_id"], r["email_lower"], "manager", locked_at, committed_at)
                      for r in through_manager]

    def _one_click(self, row: dict) -> None:
        url = self.links.url(account_id=row["account_id"], subscriber_id=row["subscriber_id"],
                             campaign_id=self.campaign_id)
        request = urllib.request.Request(url, data=b"List-Unsubscribe=One-Click", method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(request, timeout=30) as response:
            if response.status != 200:
                raise RuntimeError(f"one-click unsubscribe answered {response.status}")
