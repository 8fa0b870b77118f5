"""Tables of the sending engine (names as in the design write-up: ``growth_*``).

Status columns are changed only by the raw-SQL managers in ``growth.managers``: every transition
is one compare-and-set UPDATE there, never a read-then-save here.
"""

from __future__ import annotations

import zoneinfo

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from growth import job_ids
from growth.audience.addresses import SMTPUTF8_REFUSAL, needs_smtputf8, parse_address
from growth.managers.accounts import AccountManager
from growth.managers.campaigns import CampaignManager
from growth.managers.destinations import MailDomainManager
from growth.managers.domains import SendingDomainManager
from growth.managers.feedback import FeedbackEventManager
from growth.managers.leases import LeaseManager
from growth.managers.ledger import SendLedgerManager
from growth.managers.limits import RateLimitManager
from growth.managers.memberships import MembershipManager
from growth.managers.monitor import CampaignMonitorManager
from growth.managers.sends import SendManager
from growth.managers.subscribers import SubscriberManager
from growth.managers.suppressions import SuppressionManager
from growth.managers.tallies import SendTallyManager
from growth.managers.verdicts import VerdictManager
from growth.managers.workers import HeartbeatManager
from growth.sending.sender import MAX_DISPLAY_NAME, validate_display_name, validate_sender_address


def validate_time_zone(value: str) -> None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidationError(f"{value!r} is not a time zone (try e.g. Europe/Madrid).",
                              code="time_zone") from exc


class Account(models.Model):
    """A tenant: its subscribers, suppressions and campaigns belong to it alone."""

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    # Not an EmailField: its validator would answer "Enter a valid email address." for an
    # address that is valid but cannot be a sender, hiding the reason ours gives.
    from_email = models.CharField(max_length=254, validators=[validate_sender_address])
    from_name = models.CharField(max_length=MAX_DISPLAY_NAME, blank=True,
                                 validators=[validate_display_name])
    # Pacing (growth.sending.pacing): the clock a campaign's sending window and the warm-up's
    # calendar days are read in, and the warm-up schedule: day n (from 0) may send at most
    # start x growth^n messages, until that passes ``warmup_until`` (then no cap).
    time_zone = models.CharField(max_length=64, default="UTC", db_default="UTC",
                                 validators=[validate_time_zone],
                                 help_text="An IANA zone, e.g. Europe/Madrid.")
    warmup_started_on = models.DateField(
        "warm-up started on", null=True, blank=True,
        help_text="Day 0 of a new sending domain's or IP's warm-up. Empty: no warm-up cap.")
    warmup_daily_start = models.PositiveIntegerField(
        "messages on day 0", default=500, db_default=500, validators=[MinValueValidator(1)])
    warmup_daily_growth = models.FloatField(
        "daily growth", default=1.5, db_default=1.5, validators=[MinValueValidator(1.0)],
        help_text="Each day's cap is the day before's times this.")
    warmup_until = models.PositiveIntegerField(
        "warm-up ends at", default=100_000, db_default=100_000,
        help_text="Messages a day past which the warm-up no longer caps anything.")
    # What its change form shows (the fields above, its members), as of which version: an edit
    # saves only onto the version its form was loaded from (growth.admin.account_edits)
    version = models.PositiveIntegerField(db_default=1, editable=False)

    objects = AccountManager()

    class Meta:
        db_table = "growth_accounts"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SendingDomain(models.Model):
    """A DKIM key that signs the mail of one From domain: a tenant's own domain (its account), or
    the platform's (no account) for tenants that send from it. The private key is written, never
    shown back (see growth.admin.domains)."""

    class Algorithm(models.TextChoices):
        RSA = "rsa-sha256", "RSA-SHA256 (2048-bit key or more)"
        ED25519 = "ed25519-sha256", "Ed25519-SHA256 (RFC 8463)"

    account = models.ForeignKey(Account, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="sending_domains",
                                help_text="Empty: the platform's domain, for every tenant using it.")
    domain = models.CharField(max_length=253, help_text="The From address's domain (d=).")
    selector = models.CharField(max_length=63, help_text="s=: the key is published at "
                                "<selector>._domainkey.<domain>.")
    algorithm = models.CharField(max_length=16, choices=Algorithm.choices, default=Algorithm.RSA)
    private_key = models.TextField(help_text="PEM (RSA) or base64 (Ed25519). Never shown again.")
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    # When the DNS was last found publishing this key (its owner's proof of control of the
    # domain: growth.deliverability.sender_domains); a database trigger clears it when the
    # account, domain, selector, algorithm or key changes.
    verified_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = SendingDomainManager()

    class Meta:
        db_table = "growth_sending_domains"
        ordering = ["domain"]
        constraints = [
            # one key per domain per account, and one among the platform's: a tenant's key
            # signs only its own mail, so another's claim on the domain hides nothing from it
            # (unique across tenants, the first to claim a domain kept its owner out, and told
            # the owner so)
            models.UniqueConstraint("account", "domain", condition=Q(account__isnull=False),
                                    name="sending_domain_unique_per_account"),
            models.UniqueConstraint("domain", condition=Q(account__isnull=True),
                                    name="sending_domain_unique_platform"),
        ]

    def __str__(self) -> str:
        return f"{self.selector}._domainkey.{self.domain}"


class Membership(models.Model):
    """A user's access to one account: the admin and the tenant UI (/app/) show a non-superuser
    only the accounts it is a member of."""

    class Role(models.TextChoices):
        EDITOR = "editor", "Editor (may change the suppression list)"
        VIEWER = "viewer", "Viewer (read only)"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="growth_memberships")
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.EDITOR)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    # What its change page shows (user, account, role), as of which version: an edit saves only
    # onto the version its form was loaded from (growth.admin.membership_edits)
    version = models.PositiveIntegerField(db_default=1, editable=False)

    objects = MembershipManager()

    class Meta:
        db_table = "growth_memberships"
        ordering = ["account", "user"]
        constraints = [models.UniqueConstraint(
            "user", "account", name="membership_unique",
            violation_error_message="This user is a member of this account already: change "
                                    "that membership.")]

    def __str__(self) -> str:
        return f"{self.user} in {self.account} ({self.role})"

    @property
    def can_edit(self) -> bool:
        return self.role == self.Role.EDITOR


class Segment(models.Model):
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="segments")
    name = models.CharField(max_length=200)

    class Meta:
        db_table = "growth_segments"
        ordering = ["account", "name"]
        constraints = [models.UniqueConstraint(
            "account", "name", name="segment_unique_name",
            violation_error_message="This account has a segment of this name already.")]

    def __str__(self) -> str:
        return self.name


class Subscriber(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        CONFIRMED = "confirmed"
        UNSUBSCRIBED = "unsubscribed"

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="subscribers")
    segment = models.ForeignKey(Segment, on_delete=models.CASCADE, related_name="subscribers")
    email = models.CharField(max_length=320, help_text="As entered.")
    email_lower = models.CharField(max_length=320, editable=False, help_text="The dedup key.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(db_default=Now(), editable=False)

    objects = SubscriberManager()

    class Meta:
        db_table = "growth_subscribers"
        ordering = ["email_lower"]
        constraints = [
            models.UniqueConstraint("segment", "email_lower", name="subscriber_unique_per_segment"),
        ]
        indexes = [
            models.Index("account", "email_lower", "created_at", name="subscriber_account_email"),
        ]

    def __str__(self) -> str:
        return self.email

    def clean(self) -> None:
        self.email, self.email_lower = _parsed(self.email)
        if needs_smtputf8(self.email):
            raise ValidationError({"email": f"{self.email} cannot be mailed: {SMTPUTF8_REFUSAL}."})
        if self.segment_id and self.account_id and self.segment.account_id != self.account_id:
            raise ValidationError({"segment": "This segment belongs to another account."})

    def save(self, *args, **kwargs) -> None:
        self.email, self.email_lower = _parsed(self.email)
        super().save(*args, **kwargs)


class Suppression(models.Model):
    """An address a tenant must never mail again. Always wins over a subscriber's status."""

    class Reason(models.TextChoices):
        UNSUBSCRIBED = "unsubscribed"
        BOUNCED = "bounced"
        COMPLAINED = "complained"
        MANUAL = "manual"
        IMPORTED = "imported"

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="suppressions")
    email_lower = models.CharField("email", max_length=320)
    reason = models.CharField(max_length=16, choices=Reason.choices, default=Reason.MANUAL)
    campaign = models.ForeignKey("Campaign", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    created_at = models.DateTimeField(db_default=Now(), editable=False)

    objects = SuppressionManager()

    class Meta:
        db_table = "growth_suppressions"
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint("account", "email_lower", name="suppression_unique_per_account"),
        ]

    def __str__(self) -> str:
        return self.email_lower

    def save(self, *args, **kwargs) -> None:
        self.email_lower = parse_address(self.email_lower).email_lower
        super().save(*args, **kwargs)


class AccountLogEntry(models.Model):
    """One change a tenant's member made in /app/ (added, imported or removed suppressions), on
    its account: /app/ shows an account its trail from these rows and nothing else. The admin's
    LogEntry of the change (its History) is linked, but Django deletes a user's LogEntries with
    the user: the row keeps its own copy of who, when and what, and outlives the entry. The
    address in full: LogEntry.object_repr keeps 200 characters of one, which may have 320."""

    entry = models.OneToOneField("admin.LogEntry", on_delete=models.SET_NULL, null=True,
                                 related_name="+")
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="+",
                                db_index=False)  # the indexes below lead with it
    email_lower = models.CharField(max_length=320, blank=True)  # "": an import's summary
    username = models.CharField(max_length=150)  # as it was then
    action_time = models.DateTimeField()
    action_flag = models.PositiveSmallIntegerField()  # LogEntry's
    change_message = models.TextField()

    class Meta:
        db_table = "growth_account_log_entries"
        indexes = [
            models.Index(fields=["account", "action_time", "id"], name="account_log_recent"),
            models.Index(fields=["account", "email_lower", "action_time", "id"],
                         name="account_log_address"),
        ]


class OptOutClock(models.Model):
    """How many times a tenant's opt-outs changed in a way that may block a send: a suppression
    written, a confirmed subscriber no longer confirmed. Moved by triggers (migration 0022) in
    the writer's own transaction, whoever writes. A worker that looked at its rows' opt-outs and
    reads the same ticks later knows the look still stands, without looking again
    (sends.sql, ``opt_outs_moved``). No row: 0."""

    account = models.OneToOneField(Account, on_delete=models.CASCADE, primary_key=True,
                                   related_name="+")
    ticks = models.BigIntegerField(db_default=0)

    class Meta:
        db_table = "growth_opt_out_clocks"


class Campaign(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft"
        APPROVED = "approved"
        SENDING = "sending"
        PAUSED = "paused"
        SENT = "sent"
        CANCELLED = "cancelled"

    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="campaigns")
    name = models.CharField(max_length=200)
    subject = models.CharField(
        max_length=998, blank=True,
        help_text="Django's template language without loops or includes: {{ email }}, "
                  "{{ unsubscribe_url }}, {% if %}, text filters…")
    body_text = models.TextField(blank=True,
                                 help_text="Plain text, in the subject's template language.")
    body_html = models.TextField(blank=True, help_text="Optional. HTML, in the subject's "
                                                       "template language; values are escaped.")
    segments = models.ManyToManyField(Segment, blank=True, db_table="growth_campaigns_segments",
                                      help_text="None selected: every segment of the account.")
    status = models.CharField(max_length=16, choices=Status.choices, db_default=Status.DRAFT,
                              default=Status.DRAFT, editable=False)
    scheduled_for = models.DateTimeField(null=True, blank=True)
    recipients_built_at = models.DateTimeField(null=True, blank=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The sender it goes out as: its account's, taken when it starts and again when it is
    # resumed, so that every try of one recipient (a retry under the same idempotency key, which
    # an ESP may refuse with another body) and every worker send the same From. Empty: not
    # started; the account's is shown.
    from_email = models.CharField(max_length=254, db_default="", blank=True, editable=False)
    from_name = models.CharField(max_length=MAX_DISPLAY_NAME, db_default="", blank=True,
                                 editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Set when the engine paused the campaign because it cannot be sent as it is (its sender,
    # its templates, its transport); cleared by resume and by an operator's pause.
    pause_reason = models.TextField(db_default="", blank=True, editable=False)
    # A follow-up ("resend to the rest"): its audience is what ``resend_of`` did not deliver,
    # taken from it at build time (see SendManager.build_recipients). ``resend_root``: the first
    # campaign of the chain, whose every member's addresses the "new subscribers" option excludes.
    resend_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                                  related_name="follow_ups", editable=False)
    resend_root = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="+", editable=False)
    resend_unknown = models.BooleanField(
        db_default=False, default=False, editable=False,
        help_text="Also the recipients in doubt, whose message may already have arrived.")
    resend_new_subscribers = models.BooleanField(
        db_default=False, default=False, editable=False,
        help_text="Also subscribers who joined the audience after the original was built.")
    # Hours of the day (in the tenant's time zone) the campaign may send in; both empty: any
    # time. A window may span midnight (22:00-06:00).
    window_starts = models.TimeField("sends from", null=True, blank=True,
                                     help_text="Local time of the tenant. Empty: any time.")
    window_ends = models.TimeField("sends until", null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    updated_at = models.DateTimeField(db_default=Now(), auto_now=True, editable=False)

    objects = CampaignManager()
    monitor = CampaignMonitorManager()

    @property
    def sends_as(self) -> Campaign | Account:
        """What holds the sender it goes out as (from_email, from_name): itself once started,
        its account before."""
        return self if self.from_email else self.account

    class Meta:
        db_table = "growth_campaigns"
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(name="campaign_status_valid", condition=Q(status__in=[
                "draft", "approved", "sending", "paused", "sent", "cancelled"])),
            models.CheckConstraint(name="campaign_window_whole", condition=(
                Q(window_starts__isnull=True, window_ends__isnull=True)
                | Q(window_starts__isnull=False, window_ends__isnull=False)
                & ~Q(window_starts=models.F("window_ends")))),
        ]
        indexes = [
            models.Index("scheduled_for", name="campaign_due", condition=Q(status="approved")),
            models.Index("id", name="campaign_sending", condition=Q(status="sending")),
        ]

    def __str__(self) -> str:
        return self.name


class Destination(models.Model):
    """A mailbox provider as pacing sees it: the domains whose mail the same servers take
    (``google`` for gmail.com and every Google Workspace domain), named by
    ``growth.audience.destinations``. A deferral from one slows that one only."""

    name = models.CharField(max_length=253, unique=True)
    created_at = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        db_table = "growth_destinations"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class MailDomain(models.Model):
    """What a recipient domain resolved to: its destination, and how that was found. A cache:
    rows are resolved again once ``expires_at`` has passed."""

    class Source(models.TextChoices):
        MX = "mx", "its MX records"
        STATIC = "static", "the table of big consumer domains"
        UNRESOLVED = "unresolved", "no answer from DNS (grouped by its own name)"

    domain = models.CharField(max_length=253, primary_key=True)
    destination = models.ForeignKey(Destination, on_delete=models.PROTECT, related_name="domains")
    mx_hosts = models.TextField(blank=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    resolved_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()

    objects = MailDomainManager()

    class Meta:
        db_table = "growth_mail_domains"
        ordering = ["domain"]

    def __str__(self) -> str:
        return f"{self.domain} -> {self.destination_id}"


class Send(models.Model):
    """One recipient of one campaign: the unit the worker claims, delivers and settles."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        SENDING = "sending"
        SENT = "sent"
        SUPPRESSED = "suppressed"
        FAILED = "failed"
        UNKNOWN = "unknown"
        CANCELLED = "cancelled"

    # No index of their own: (campaign, status, sent_at) and (campaign, email_lower) lead with
    # campaign, and nothing looks sends up by account alone. Every index of growth_sends is
    # written on every claim and settle: each one has to earn its place.
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="sends",
                                 db_index=False)
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="+",
                                db_index=False)
    # PROTECT: deleting the subscriber would drop the row that says this address was mailed.
    # No index of its own: the unique (subscriber, campaign) serves lookups by subscriber.
    subscriber = models.ForeignKey(Subscriber, on_delete=models.PROTECT, related_name="sends",
                                   db_index=False)
    email = models.CharField(max_length=320)
    email_lower = models.CharField(max_length=320)
    # Computed by the database, so it can only ever be 'campaign:<cid>:<sid>' (never a uuid or a
    # timestamp), and unique because (campaign, subscriber) is: no index of its own to write.
    job_id = models.GeneratedField(
        expression=job_ids.database_expression(), output_field=models.CharField(max_length=100),
        db_persist=True)
    status = models.CharField(max_length=16, choices=Status.choices, db_default=Status.QUEUED)
    attempts = models.PositiveIntegerField(db_default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Set, in its own commit, just before this attempt's message is handed to the transport:
    # a row whose lease expired without it was never sent and can safely be queued again.
    handed_over_at = models.DateTimeField(null=True, blank=True)
    # When the row went into doubt, if an operator has queued it again since (retry_unknown, which
    # clears handed_over_at so that the claim sends it under its key, as the operator chose):
    # until a verdict settles the row, that attempt's message may have arrived (sends.sql,
    # _in_doubt). Not read once the row is sent.
    in_doubt_since = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, db_default="", blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    provider_message_id = models.CharField(max_length=255, db_default="", blank=True)
    last_error = models.TextField(db_default="", blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # When the first attempt went on the wire: a transient failure is retried until
    # SENDER_RETRY_FOR after it (an MTA's queue lifetime), however many attempts that takes.
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    # The mailbox provider of the address, set at build (null: not classified, never paced
    # per destination). No foreign key: a constraint check on every insert of a 1M build for
    # a table of a few hundred rows that is never deleted from.
    destination_id = models.IntegerField(null=True, blank=True)
    # The follow-up campaign this row's recipient was handed to (resend to the rest): from then
    # on this row is never sent or retried here. No index: nothing looks rows up by it.
    resent_in = models.ForeignKey(Campaign, null=True, blank=True, on_delete=models.PROTECT,
                                  related_name="+", db_index=False)
    # A hard bounce or a complaint about this send was reported (an ESP's webhook, the bounce
    # mailbox): kept by a trigger on growth_feedback_events (migration 0017), never written by
    # the engine. The tallies count by them, so that the reputation figures read no events.
    bounce_reported = models.BooleanField(db_default=False, editable=False)
    complaint_reported = models.BooleanField(db_default=False, editable=False)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    objects = SendManager()
    ledger = SendLedgerManager()

    class Meta:
        db_table = "growth_sends"
        ordering = ["id"]
        constraints = [
            # subscriber first: it also serves the foreign key (PROTECT looks sends up by
            # subscriber), so that no second index of subscriber_id is written
            models.UniqueConstraint("subscriber", "campaign", name="send_unique_subscriber"),
            models.UniqueConstraint("campaign", "email_lower", name="send_unique_address"),
            models.CheckConstraint(name="send_status_valid", condition=Q(status__in=[
                "queued", "sending", "sent", "suppressed", "failed", "unknown", "cancelled"])),
            # a row on the wire without a lease could never be recovered
            models.CheckConstraint(name="send_sending_has_lease",
                                   condition=~Q(status="sending") | Q(lease_expires_at__isnull=False)),
        ]
        indexes = [
            models.Index("lease_expires_at", name="send_leased", condition=Q(status="sending")),
            models.Index("next_attempt_at", name="send_backoff",
                         condition=Q(status="queued", next_attempt_at__isnull=False)),
            # a campaign's rows in a status (the sends list's filters, who holds rows on the
            # wire, the failed rows the reputation guard reads; counts come from the tallies);
            # with sent_at, a tenant's current rate (its campaigns' last seconds of sends), so
            # that no index of its own is written on every settle
            models.Index("campaign", "status", "sent_at", name="send_campaign_status"),
            # the claim (the worker serves campaigns in turn) walks this; only queued rows are in
            # it, so it stays small. No (id) WHERE queued beside it: the planner took that one
            # for a campaign's claim and read every older campaign's queued rows first. With the
            # destination, the lease claim's walk past its cursor (which reads it) is index-only
            # here too: without it, on a vacuumed table, the planner took the next index, out of
            # id order, and sorted all of the campaign's queued rows on every claim (0021)
            models.Index(fields=["campaign", "id"], include=["destination_id"],
                         name="send_queued_by_campaign", condition=Q(status="queued")),
            # the claim's share of a paced destination (as many rows as its tokens allow)
            models.Index("campaign", "destination_id", "id", name="send_queued_by_destination",
                         condition=Q(status="queued")),
            # the lease protocol's rows behind a campaign's cursor that are due again (retries,
            # requeues, a paced destination's rows set aside), of all destinations or of one;
            # status is left out of the condition so that a settle writing none stays HOT there
            models.Index("campaign", "next_attempt_at", name="send_due",
                         condition=Q(next_attempt_at__isnull=False)),
            models.Index("campaign", "destination_id", "next_attempt_at",
                         name="send_due_by_destination", condition=Q(next_attempt_at__isnull=False)),
            # queued again though its message may have arrived (handed over before its worker
            # was lost, or retried by an operator: sends.sql, _doubt_kept): the few rows a cancel
            # makes 'unknown', counted for its confirmation without walking the campaign's
            # queued rows
            models.Index("campaign", name="send_queued_doubt_kept",
                         condition=Q(status="queued")
                         & (Q(handed_over_at__isnull=False) | Q(in_doubt_since__isnull=False))),
            # Not declared here, as their predicates call growth_hard_refusal(): the reputation
            # figures' partial indexes send_hard_refused (migration 0016), send_bounced_unsent
            # and send_complained_unsent (0018), see growth/managers/reputation.sql.
        ]

    def __str__(self) -> str:
        return self.job_id


class SendCursor(models.Model):
    """How far the lease protocol's claims of one campaign have gone: every row of the campaign
    up to ``claimed_to`` is in a lease, settled, or due again. Each claim locks this row for its
    few milliseconds, so that the claims of a campaign take turns (docs/one-write-per-recipient.md).
    Created with the campaign's recipient list."""

    campaign = models.OneToOneField(Campaign, on_delete=models.CASCADE, primary_key=True,
                                    related_name="+")
    claimed_to = models.BigIntegerField(db_default=0)

    class Meta:
        db_table = "growth_send_cursors"


class SendLease(models.Model):
    """One claim's rows in the lease protocol: a worker's batch (or a wire's chunk) with its
    expiry. The rows stay 'queued' until their settle ends the lease, which writes each of them
    once. No worker: free, for the next claim to take over whole under a new id."""

    id = models.BigAutoField(primary_key=True)
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)
    worker_id = models.CharField(max_length=200, null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    send_ids = ArrayField(models.BigIntegerField())
    # set, in a commit of its own (or with the claim, for a receiver that de-duplicates), before
    # any of its rows goes on the wire: a lease that expires without it was never sent
    handed_over_at = models.DateTimeField(null=True, blank=True)
    # how many times it was taken over after a hand-over: a crash writes no send row, so the
    # lease counts the attempts the rows cannot
    takeovers = models.PositiveIntegerField(db_default=0)
    # taken over after a hand-over: when its rows were first handed over. A receiver that forgets
    # keys absorbs their resend only while it remembers that one (sends.sql, _forgotten_before)
    in_doubt_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    objects = LeaseManager()

    class Meta:
        db_table = "growth_send_leases"
        indexes = [
            models.Index("campaign", "id", name="send_lease_free",
                         condition=Q(worker_id__isnull=True)),
            models.Index("expires_at", name="send_lease_expiry",
                         condition=Q(worker_id__isnull=False)),
        ]


class TallyFields(models.Model):
    """A count of a campaign's sends in a status, per minute of their ``sent_at`` (null: not
    sent) and by whether a bounce or a complaint was reported about them. No foreign key:
    tallies only follow growth_sends."""

    campaign_id = models.BigIntegerField()
    status = models.CharField(max_length=16)
    sent_minute = models.DateTimeField(null=True)
    bounce_reported = models.BooleanField(db_default=False)
    complaint_reported = models.BooleanField(db_default=False)
    sends = models.BigIntegerField()

    class Meta:
        abstract = True


class SendTally(TallyFields):
    """What the admin, the monitor and the reports count instead of the sends. Kept by triggers
    on growth_sends (migration 0015): each statement that changes a row's campaign, status or
    sent minute appends its net change to growth_send_tally_deltas; the workers fold those into
    these rows (SendTallyManager.fold). A count is this table plus the deltas not folded yet:
    the view growth_send_counts, exact in any snapshot."""

    objects = SendTallyManager()

    class Meta:
        db_table = "growth_send_tallies"
        constraints = [
            # a constraint, not an expression index: the fold's ON CONFLICT names it
            models.UniqueConstraint(fields=["campaign_id", "status", "sent_minute",
                                            "bounce_reported", "complaint_reported"],
                                    nulls_distinct=False, name="send_tally_key"),
        ]


class SendTallyDelta(TallyFields):
    """A statement's net change to a tally, appended by the triggers and never updated: the
    writers of growth_sends never wait on one another here (SendTally explains)."""

    class Meta:
        db_table = "growth_send_tally_deltas"
        indexes = [models.Index(fields=["campaign_id"], name="send_tally_delta_campaign")]


def _parsed(raw: str) -> tuple[str, str]:
    address = parse_address(raw)
    return address.email, address.email_lower


class SendVerdict(models.Model):
    """A decision about a send whose outcome was in doubt (``unknown``), with who or what made
    it and on which evidence: an operator, an ESP's delivery event, a relay's log. Written in the
    same statement as the status change it records (see VerdictManager)."""

    class Verdict(models.TextChoices):
        SENT = "sent", "delivered (sent)"
        FAILED = "failed", "not delivered (failed)"
        RETRIED = "retried", "sent again with the same key (queued)"

    send = models.ForeignKey(Send, on_delete=models.CASCADE, related_name="verdicts")
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    decided_by = models.CharField(max_length=200, help_text="An operator, or the tool and source.")
    evidence = models.TextField(blank=True)
    decided_at = models.DateTimeField(db_default=Now(), editable=False)

    objects = VerdictManager()

    class Meta:
        db_table = "growth_send_verdicts"
        ordering = ["-decided_at", "-id"]

    def __str__(self) -> str:
        return f"{self.send_id}: {self.verdict} by {self.decided_by}"


class RateLimit(models.Model):
    """A token bucket shared by every worker on every host (see limits.sql). Its scope: a tenant,
    a whole transport, a destination (a mailbox provider), or a tenant's mail to a destination.

    ``per_second`` is what the operator configured (empty: no configured limit, only what
    throttling taught), ``version`` the version of that configuration; ``throttled_to`` the
    rate a receiver's deferrals lowered it to, which grows back while answers are good.
    ``max_in_flight`` caps a destination's messages on the wire at once. ``per_day`` turns the
    bucket into a calendar-day quota in the tenant's time zone (the warm-up schedule's).
    """

    account = models.ForeignKey(Account, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="rate_limits")
    transport = models.CharField(max_length=200, blank=True, default="",
                                 help_text="For a transport-wide limit: its SENDER_TRANSPORT path.")
    destination = models.ForeignKey(Destination, null=True, blank=True, on_delete=models.CASCADE,
                                    related_name="rate_limits",
                                    help_text="For a mailbox provider's limit (with a tenant: "
                                              "that tenant's mail to it).")
    # at most what no relay takes: a refill computed from 1e308 overflowed, and failed every claim
    per_second = models.FloatField("messages per second", null=True, blank=True,
                                   validators=[MinValueValidator(0.01), MaxValueValidator(100_000)])
    burst = models.FloatField(default=20, validators=[MinValueValidator(1), MaxValueValidator(100_000)],
                              help_text="Messages that may go at once after a quiet spell.")
    max_in_flight = models.PositiveIntegerField(
        "at most on the wire", null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Messages to this destination being delivered at once, by all workers.")
    per_day = models.PositiveIntegerField(null=True, blank=True, editable=False)
    throttled_to = models.FloatField("throttled to (per second)", null=True, blank=True,
                                     editable=False)
    throttled_at = models.DateTimeField(null=True, blank=True, editable=False)
    # the effective rate when this episode of throttling began: recovery adds back a share of
    # it per period (additive increase), however often the rate was lowered since
    throttled_from = models.FloatField(null=True, blank=True, editable=False)
    adjusted_at = models.DateTimeField(null=True, blank=True, editable=False)
    tokens = models.FloatField(db_default=0, editable=False)
    refilled_at = models.DateTimeField(db_default=Now(), editable=False)
    # counts the changes of what an operator configures (the form's fields), not the engine's
    # writes (tokens, throttling): an edit saves only onto the version its form was loaded from
    version = models.PositiveIntegerField(db_default=1, editable=False)

    objects = RateLimitManager()

    class Meta:
        db_table = "growth_rate_limits"
        constraints = [
            models.CheckConstraint(name="rate_limit_one_scope", condition=(
                Q(account__isnull=False, transport="", destination__isnull=True)
                | Q(account__isnull=True, destination__isnull=True) & ~Q(transport="")
                | Q(destination__isnull=False, transport=""))),
            models.CheckConstraint(name="rate_limit_has_a_limit", condition=(
                Q(per_second__isnull=False) | Q(throttled_to__isnull=False)
                | Q(max_in_flight__isnull=False) | Q(per_day__isnull=False))),
            models.UniqueConstraint("transport", name="rate_limit_unique_transport",
                                    condition=Q(account__isnull=True, destination__isnull=True)),
            models.UniqueConstraint("account", name="rate_limit_unique_account",
                                    condition=Q(destination__isnull=True, per_day__isnull=True)),
            models.UniqueConstraint("account", name="rate_limit_unique_warmup",
                                    condition=Q(per_day__isnull=False)),
            models.UniqueConstraint("destination", name="rate_limit_unique_destination",
                                    condition=Q(account__isnull=True)),
            models.UniqueConstraint("destination", "account",
                                    name="rate_limit_unique_tenant_destination",
                                    condition=Q(account__isnull=False)),
        ]

    def __str__(self) -> str:
        if self.destination_id and self.account_id:
            scope = f"{self.account} to {self.destination}"
        else:
            scope = self.destination or self.account or f"transport {self.transport}"
        if self.per_day is not None:
            return f"{scope}: {self.per_day} a day (warm-up)"
        rate = self.throttled_to if self.throttled_to is not None else self.per_second
        return f"{scope}: {rate:g}/s" if rate is not None else f"{scope}: no rate"


class RateLimitChange(models.Model):
    """One change of a bucket's effective rate: a throttle lowered it, good answers raised it,
    an operator configured it, a worker set it from the settings. The admin draws these."""

    rate_limit = models.ForeignKey(RateLimit, on_delete=models.CASCADE, related_name="changes")
    per_second = models.FloatField(null=True, help_text="The effective rate after the change.")
    reason = models.CharField(max_length=500)
    changed_at = models.DateTimeField(db_default=Now(), editable=False)
    # a configuration no user saved (the SENDER_RATE_LIMIT setting's): the version it made, for
    # a form loaded before to be told who changed the limit (a user's edit is its LogEntry)
    version = models.PositiveIntegerField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "growth_rate_limit_changes"
        ordering = ["-changed_at", "-id"]
        indexes = [models.Index("rate_limit", "changed_at", name="rate_limit_change_at")]

    def __str__(self) -> str:
        return f"{self.rate_limit_id} -> {self.per_second} ({self.reason})"


class FeedbackEvent(models.Model):
    """What an ESP reported about a message we sent: a bounce, a delay, a complaint, an opt-out.

    One row per (ESP, event id, recipient), written only by ``FeedbackEventManager.record``: a
    webhook posted again finds its row and changes nothing. An event that names no send of ours
    (or names one whose address or tenant it contradicts) is kept unattributed, with no account,
    and suppresses nothing: only superusers see those.
    """

    esp = models.CharField("ESP", max_length=32)
    event_id = models.CharField(max_length=255, help_text="The ESP's, or derived from the event.")
    event_type = models.CharField(max_length=16)
    reject_reason = models.CharField(max_length=16, blank=True)
    email_lower = models.CharField("recipient", max_length=320)
    account = models.ForeignKey(Account, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="+", help_text="Empty: the event was not attributed.")
    campaign = models.ForeignKey(Campaign, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    send = models.ForeignKey(Send, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    unattributed_because = models.CharField(max_length=200, blank=True)
    suppressed = models.BooleanField(
        default=False, help_text="The event suppressed the address for the tenant (it may already "
                                 "have been suppressed); false for soft bounces and delays.")
    description = models.CharField(max_length=1000, blank=True)
    mta_response = models.CharField("MTA response", max_length=1000, blank=True)
    occurred_at = models.DateTimeField(null=True, blank=True, help_text="The ESP's timestamp.")
    received_at = models.DateTimeField(db_default=Now(), editable=False)

    objects = FeedbackEventManager()

    class Meta:
        db_table = "growth_feedback_events"
        ordering = ["-received_at"]
        constraints = [
            # Per recipient as well: Amazon SES gives one id to a notification about several.
            models.UniqueConstraint("esp", "event_id", "email_lower", name="feedback_event_once"),
        ]
        indexes = [
            # an address's recent soft bounces in a tenant (suppression after N in a window)
            models.Index("account", "email_lower", "received_at", name="feedback_account_address"),
            # the reputation guard's newest evidence per campaign and kind: one probe each
            models.Index("campaign", "event_type", "received_at", name="feedback_campaign_news",
                         condition=Q(suppressed=True)),
        ]

    def __str__(self) -> str:
        return f"{self.esp} {self.event_type} {self.email_lower}"


class WebhookToken(models.Model):
    """A webhook signature's one-time token (Mailgun's), once used: the same token on another
    body is a replay and is refused; on the same body it is the ESP posting again."""

    esp = models.CharField("ESP", max_length=32)
    token = models.CharField(max_length=255)
    body_sha256 = models.CharField(max_length=64)
    used_at = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        db_table = "growth_webhook_tokens"
        constraints = [models.UniqueConstraint("esp", "token", name="webhook_token_once")]

    def __str__(self) -> str:
        return f"{self.esp} {self.token}"


class WorkerHeartbeat(models.Model):
    """A ``run_sender`` process, as it last said it was alive: one row per worker id, written
    every few seconds by the worker itself. A worker whose beat is late holds its rows until
    their leases end; the admin shows which."""

    worker_id = models.CharField(max_length=200, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    receiver = models.CharField(max_length=16, help_text="plain or idempotent")
    batch_size = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    objects = HeartbeatManager()

    class Meta:
        db_table = "growth_workers"
        ordering = ["-seen_at"]
        verbose_name = "worker"

    def __str__(self) -> str:
        return self.worker_id
