import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.core.management.base import CommandError

from growth.ledger.export import FORMATS
from growth.management.base import DatabaseCommand
from growth.managers.ledger import PAGE_SIZE, LedgerRow
from growth.models import Campaign, Send


class Command(DatabaseCommand):
    help = ("Export a campaign's recipients and what became of each (status, attempts, errors, "
            "ids, ESP feedback) as CSV or JSON Lines, read page by page in constant memory.")

    def add_arguments(self, parser):
        parser.add_argument("--campaign", type=int, required=True, metavar="ID")
        parser.add_argument("--format", choices=sorted(FORMATS), default="csv")
        parser.add_argument("--output", type=Path, metavar="FILE", help="default: standard output")
        parser.add_argument("--page-size", type=int, default=PAGE_SIZE,
                            help=f"rows read at a time (default: {PAGE_SIZE})")

    def handle(self, *args, campaign, format, output=None, page_size=PAGE_SIZE, verbosity=1,
               **options):
        if page_size < 1:
            raise CommandError("--page-size must be at least 1.")
        if not Campaign.objects.filter(id=campaign).exists():
            raise CommandError(f"There is no campaign with id {campaign}.")
        started, counter = time.monotonic(), _Counter()
        chunks = FORMATS[format](counter.pages(Send.ledger.pages(campaign_id=campaign,
                                                                 size=page_size)))
        if output is None:
            for chunk in chunks:
                self.stdout.write(chunk, ending="")
            self.stdout.flush()
        else:
            with Path(output).open("w", encoding="utf-8", newline="") as file:
                file.writelines(chunks)
        if verbosity >= 1:  # on stderr: stdout may be the export itself
            self.stderr.write(f"campaign {campaign}: {counter.rows:,} rows exported as {format} "
                              f"in {time.monotonic() - started:.2f} s", style_func=str)


class _Counter:
    def __init__(self) -> None:
        self.rows = 0

    def pages(self, pages: Iterable[list[LedgerRow]]) -> Iterator[list[LedgerRow]]:
        for page in pages:
            self.rows += len(page)
            yield page
