"""A campaign's ledger as a CSV download, streamed: the admin's and the tenant UI's."""

from __future__ import annotations

from django.http import StreamingHttpResponse

from growth.ledger.export import csv_chunks, filename
from growth.models import Send


def csv_download(campaign_id: int, *, tenant: bool = False) -> StreamingHttpResponse:
    """Every row of the campaign, read page by page while the response is sent (the caller has
    checked who may see the campaign; ``tenant``: for the tenant UI, without the platform's
    names in the errors)."""
    chunks = csv_chunks(Send.ledger.pages(campaign_id=campaign_id), tenant=tenant)
    return StreamingHttpResponse(chunks, content_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="{filename(campaign_id)}"'})
