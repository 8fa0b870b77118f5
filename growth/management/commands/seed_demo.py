"""Seed a demo tenant: ~10,000 subscribers in two overlapping segments, with unconfirmed,
unsubscribed, suppressed and invalid addresses mixed in, and an approved campaign due now."""

import random

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from growth.audience.addresses import parse_address
from growth.models import Account, Campaign, Segment, Subscriber, Suppression
from growth.operations.campaigns import approve_campaign

BODY_TEXT = """Hello {{ email }},

Here is what is new at Acme Books this month.

Unsubscribe with one click: {{ unsubscribe_url }}
"""
BODY_HTML = """<html><body>
<h1>New at Acme Books</h1>
<p>Hello {{ email }}, here is what is new this month.</p>
<p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>
</body></html>"""


class Command(BaseCommand):
    help = "Create (once) a demo tenant with ~10k subscribers, and a new approved campaign."

    def add_arguments(self, parser):
        parser.add_argument("--subscribers", type=int, default=10_000)
        parser.add_argument("--seed", type=int, default=42)

    @transaction.atomic
    def handle(self, *args, subscribers, seed, **options):
        account, created = Account.objects.get_or_create(
            slug="acme", defaults={"name": "Acme Books", "from_email": "news@acme.example",
                                   "from_name": "Acme Books"})
        if created:
            self._seed_audience(account, subscribers, random.Random(seed))
        number = Campaign.objects.filter(account=account).count() + 1
        campaign = Campaign.objects.create(
            account=account, name=f"Monthly news #{number}", subject="What is new at Acme, {{ email }}",
            body_text=BODY_TEXT, body_html=BODY_HTML, scheduled_for=timezone.now())
        approve_campaign(campaign_id=campaign.id)
        self.stdout.write(f"campaign {campaign.id} “{campaign.name}” approved for {account.name}")

    def _seed_audience(self, account, total, rng):
        newsletter = Segment.objects.create(account=account, name="Newsletter")
        customers = Segment.objects.create(account=account, name="Customers")
        rows, invalid = [], 0
        for n in range(total):
            raw = f"reader{n}@example.com" if n % 997 else f"reader{n}@@broken"
            try:
                address = parse_address(raw)
            except ValidationError:
                invalid += 1
                continue
            roll = rng.random()
            status = ("pending" if roll < 0.03 else "unsubscribed" if roll < 0.04 else "confirmed")
            segment = customers if n % 4 == 0 else newsletter
            rows.append(Subscriber(account=account, segment=segment, email=address.email,
                                   email_lower=address.email_lower, status=status))
            if n % 20 == 1:  # the same person in the other segment, typed differently
                other = newsletter if segment is customers else customers
                rows.append(Subscriber(account=account, segment=other,
                                       email=address.email.upper(),
                                       email_lower=address.email_lower, status="confirmed"))
        Subscriber.objects.bulk_create(rows, batch_size=5000)
        suppressed = [Suppression(account=account, email_lower=f"reader{n}@example.com",
                                  reason=rng.choice(["bounced", "complained", "manual"]))
                      for n in rng.sample(range(total), k=total // 50)]
        Suppression.objects.bulk_create(suppressed, batch_size=5000, ignore_conflicts=True)
        self.stdout.write(f"{len(rows)} subscriber rows in 2 segments, {len(suppressed)} suppressed, "
                          f"{invalid} invalid addresses refused")
