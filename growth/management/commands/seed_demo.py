"""Seed a demo tenant: ~10,000 subscribers in two overlapping segments, with unconfirmed,
unsubscribed, suppressed and invalid addresses mixed in, and an approved campaign due now.

With DEBUG on, or when asked with --demo-logins, also two logins with known passwords, printed:
an operator (staff, in an "Operators" group holding the growth app's permissions, editor of the
demo tenant) for /admin/, and a tenant user (editor) for /app/. Never on its own in production:
a known password there is an open door."""

import random

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from growth.audience.addresses import parse_address
from growth.management.arguments import count
from growth.management.base import DatabaseCommand
from growth.models import Account, Campaign, Membership, Segment, Subscriber, Suppression
from growth.operations.campaigns import approve_campaign
from growth.sending.console import on_one_line

BODY_TEXT = """Hello {{ email }},

Here is what is new at Acme Books this month.

Unsubscribe with one click: {{ unsubscribe_url }}
"""
BODY_HTML = """<html><body>
<h1>New at Acme Books</h1>
<p>Hello {{ email }}, here is what is new this month.</p>
<p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>
</body></html>"""


OPERATORS_GROUP = "Operators"
# username -> (password, staff): known on purpose, for a development machine only
DEMO_LOGINS = {"operator": ("operator-demo-password", True),
               "tenant": ("tenant-demo-password", False)}


class Command(DatabaseCommand):
    help = ("Create (once) a demo tenant with ~10k subscribers, and a new approved campaign; with "
            "DEBUG on or --demo-logins, demo logins for /admin/ and /app/.")

    def add_arguments(self, parser):
        parser.add_argument("--subscribers", type=count, default=10_000,
                            help="Subscribers of a new demo tenant (default: 10000).")
        parser.add_argument("--seed", type=int, default=42,
                            help="Random seed of the demo audience (default: 42).")
        parser.add_argument("--demo-logins", action="store_true",
                            help="Create the demo logins, with known passwords, even with DEBUG "
                                 "off (default: only with DEBUG on). Never in production.")

    @transaction.atomic
    def handle(self, *args, subscribers, seed, demo_logins=False, **options):
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
        self.stdout.write(f"campaign {campaign.id} “{on_one_line(campaign.name)}” approved for "
                          f"{on_one_line(account.name)}")
        if demo_logins or settings.DEBUG:
            self._demo_logins(account)
        else:
            self.stdout.write("no demo logins (DEBUG is off): --demo-logins creates them on a "
                              "development machine, or `manage.py createsuperuser`")

    def _demo_logins(self, account):
        """The operator and the tenant user, their passwords set again at every run (so that
        the printed ones are always right)."""
        operators, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
        operators.permissions.set(Permission.objects.filter(content_type__app_label="growth"))
        users = get_user_model().objects
        for username, (password, staff) in DEMO_LOGINS.items():
            user, _ = users.get_or_create(username=username)
            user.is_staff, user.is_active = staff, True
            user.set_password(password)
            user.save()
            if staff:
                user.groups.add(operators)
            Membership.objects.update_or_create(user=user, account=account,
                                                defaults={"role": Membership.Role.EDITOR})
        self.stdout.write(self.style.WARNING("demo logins (known passwords: a development machine "
                                             "only):"))
        operator, tenant = (DEMO_LOGINS["operator"], DEMO_LOGINS["tenant"])
        self.stdout.write(f"  operator  /admin/  user operator  password {operator[0]}  "
                          f"(staff, group {OPERATORS_GROUP}, editor of {account.name})")
        self.stdout.write(f"  tenant    /app/    user tenant    password {tenant[0]}  "
                          f"(editor of {account.name})")

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
