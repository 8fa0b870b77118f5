"""Settings for Zylior growth, read from the environment (and an optional ``.env``).

DATABASE_URL   any PostgreSQL >= 15; unset: the embedded server under .data/ (see embedded_db)
EMAIL_URL      smtp://, submission://, consolemail://, filemail:///abs/path, ... (django-environ)
SITE_URL       public base URL of this site, used in unsubscribe links
SENDER_IDEMPOTENT_TRANSPORT  true when the receiver de-duplicates on our Idempotency-Key
ANYMAIL        anymail's settings as KEY=value,... (e.g. POSTMARK_SERVER_TOKEN=...)
ANYMAIL_WEBHOOK_SECRET  user:password the ESPs' feedback webhooks must send (comma-separated
               while rotating); ANYMAIL_MAILGUN_WEBHOOK_SIGNING_KEY, ANYMAIL_RESEND_SIGNING_SECRET
               and ANYMAIL_AMAZON_SES_AUTO_CONFIRM_SNS_SUBSCRIPTIONS likewise (see README)
"""

from __future__ import annotations

import contextlib
import math
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote, urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = BASE_DIR / ".data"

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")


def env_number(name: str, default: float, *, positive: bool = True) -> float:
    """A number from the environment as it was typed (django-environ's env.float keeps only
    digits, ',', '.' and '-': SENDER_LEASE=1e3 was read as 13 seconds, and "5m" as 5), refused,
    naming the variable, unless finite and above 0 (``positive``) or at least 0."""
    raw = env.str(name, default="").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ImproperlyConfigured(f"{name}={raw!r}: it must be a number "
                                   f"{'above 0' if positive else 'of at least 0'}")
    return value


def env_count(name: str, default: int) -> int:
    """A whole number of at least 1 from the environment, refused otherwise, naming the variable
    (SENDER_CONNECTIONS=0 was a traceback in the worker's wires)."""
    value = env.int(name, default=default)
    if value < 1:
        raise ImproperlyConfigured(f"{name}={value}: it must be at least 1")
    return value

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="insecure-dev-key-change-me-in-production-0123456789")
SECRET_KEY_FALLBACKS = env.list("SECRET_KEY_FALLBACKS", default=[])
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
SITE_URL = env.str("SITE_URL", default="http://localhost:8000").rstrip("/")
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[SITE_URL])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "growth",
]

MIDDLEWARE = [
    "growth.observability.health.ProbeMiddleware",  # before the host and https checks
    "django.middleware.security.SecurityMiddleware",
    "growth.request_guards.TextCharsetMiddleware",  # before anything reads a body
    "growth.request_guards.NulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files, from the WSGI server itself
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "growth.feedback.webhooks.WebhookMiddleware",
    "axes.middleware.AxesMiddleware",  # last: it turns a refused sign-in into its page
]

ROOT_URLCONF = "zylior.urls"
WSGI_APPLICATION = "zylior.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # lazy: the admin index's "N sends need review" (queried only where shown)
                "growth.admin.review_queue.review_queue",
            ],
        },
    },
]


# True when this process uses (and may restart) the embedded server in DATA_DIR.
EMBEDDED_DATABASE = not env.str("DATABASE_URL", default="")


def _database_url() -> str:
    if not EMBEDDED_DATABASE:
        return env.str("DATABASE_URL")
    from zylior import embedded_db

    return embedded_db.database_url(DATA_DIR, env.str("EMBEDDED_DATABASE_NAME", default="zylior"))


DATABASES = {"default": env.db_url_config(_database_url())}
# A Unix socket directory arrives percent-encoded in the URL's host part.
DATABASES["default"]["HOST"] = unquote(DATABASES["default"]["HOST"] or "")
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A database that stops answering (a silent network partition, a host gone) must not hold a
# worker in one call for the kernel's retransmission time, about 15 minutes: connecting gives up
# after DATABASE_CONNECT_TIMEOUT seconds, TCP keepalives probe a connection that waits, and data
# left unacknowledged for a minute breaks it (tcp_user_timeout, ms). The worker then waits the
# database out as after a restart. A query the server is still working on is not cut: its
# host acknowledges. Ignored over a Unix socket; the URL's own parameters win.
for _key, _value in {"connect_timeout": env_count("DATABASE_CONNECT_TIMEOUT", default=5),
                     "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                     "keepalives_count": 3, "tcp_user_timeout": 60_000}.items():
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(_key, _value)
# Lets two test runs share one server (e.g. the embedded one) without sharing a test database.
DATABASES["default"]["TEST"] = {"NAME": env.str("TEST_DATABASE_NAME", default=None)}
# Behind PgBouncer in transaction pooling: a server session is not ours from one transaction to
# the next. No prepared statements (client-side binding is Django's default; this says so), no
# server-side cursors. Nothing else in the engine relies on session state (see the README).
DATABASE_POOL_MODE = env.str("DATABASE_POOL_MODE", default="session")
if DATABASE_POOL_MODE == "transaction":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = None
# The statements a worker runs for every chunk on its wires, prepared once per connection (see
# growth.managers.queries). Session state: never behind PgBouncer's transaction pooling.
DATABASE_PREPARED_STATEMENTS = (DATABASE_POOL_MODE != "transaction"
                                and env.bool("DATABASE_PREPARED_STATEMENTS", default=True))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

vars().update(env.email_url("EMAIL_URL", default="consolemail://"))
if EMAIL_BACKEND.endswith("filebased.EmailBackend"):  # noqa: F821 - set just above
    # django-environ drops the leading slash of filemail:///abs/path.
    EMAIL_FILE_PATH = "/" + vars()["EMAIL_FILE_PATH"].lstrip("/")
# An ESP through django-anymail: EMAIL_BACKEND=anymail.backends.postmark.EmailBackend and
# ANYMAIL=POSTMARK_SERVER_TOKEN=... (comma-separated KEY=value pairs).
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default=EMAIL_BACKEND)  # noqa: F821 - from EMAIL_URL
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=30)  # seconds
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="growth@localhost")
ANYMAIL = env.dict("ANYMAIL", default={})
# The feedback webhooks' secrets may also come one variable each, ANYMAIL_<anymail's name>; such
# a variable wins over the same key in ANYMAIL.
# Amazon SES keeps no idempotency key, and boto3 sends a request again by itself when its answer
# is late or a 5xx: each a second copy to a recipient. One attempt a request: the engine retries,
# and a request whose answer was lost is in doubt, not sent again (errors.py).
if "amazon_ses" in EMAIL_BACKEND:
    from botocore.config import Config as _BotoConfig

    ANYMAIL.setdefault("AMAZON_SES_CLIENT_PARAMS", {}).setdefault(
        "config", _BotoConfig(retries={"total_max_attempts": 1}))
for _name, _read in {"WEBHOOK_SECRET": env.list, "MAILGUN_WEBHOOK_SIGNING_KEY": env.str,
                     "RESEND_SIGNING_SECRET": env.str,
                     "AMAZON_SES_AUTO_CONFIRM_SNS_SUBSCRIPTIONS": env.bool}.items():
    if env.str(f"ANYMAIL_{_name}", default=""):
        ANYMAIL[_name] = _read(f"ANYMAIL_{_name}")

# The sending engine.
SENDER_TRANSPORT = env.str("SENDER_TRANSPORT",
                           default="growth.sending.transports.django_mail.DjangoMailTransport")
# Dotted paths of before the layout of growth/ by area still work (growth.transports.* and
# growth.backends.* live under growth.sending now).
for _name in ("SENDER_TRANSPORT", "EMAIL_BACKEND"):
    for _old in ("growth.transports.", "growth.backends."):
        if vars()[_name].startswith(_old):
            vars()[_name] = "growth.sending." + vars()[_name].removeprefix("growth.")
# true/false forces it; unset: as the email backend declares (growth.sending.backends.*: true;
# others: false)
SENDER_IDEMPOTENT_TRANSPORT = env.bool("SENDER_IDEMPOTENT_TRANSPORT", default=None)
# Retries: a transient failure (4xx, a dropped connection) is retried with backoff until
# SENDER_RETRY_FOR after the row's first attempt (an MTA's queue lifetime), then 'failed'; a
# throttling answer is retried without an attempt counted. SENDER_MAX_ATTEMPTS bounds only rows
# whose worker keeps dying with them on the wire (lease expiry, idempotent receiver).
SENDER_RETRY_FOR = env_number("SENDER_RETRY_FOR_HOURS", default=48.0) * 3600  # seconds
SENDER_MAX_ATTEMPTS = env_count("SENDER_MAX_ATTEMPTS", default=5)
SENDER_BACKOFF_BASE = env_number("SENDER_BACKOFF_BASE", default=30.0)  # seconds; doubles per attempt
SENDER_BACKOFF_MAX = env_number("SENDER_BACKOFF_MAX", default=3600.0)  # seconds
SENDER_LEASE = env_number("SENDER_LEASE", default=300.0)  # seconds a claimed row is ours
# messages/s for the transport; 0: none
SENDER_RATE_LIMIT = env_number("SENDER_RATE_LIMIT", default=0.0, positive=False)
SENDER_RATE_BURST = env_number("SENDER_RATE_BURST", default=20.0)  # messages
# Adaptive throttling (growth.managers.limits): a receiver's "slow down" multiplies the rate of
# the bucket it concerns by SENDER_THROTTLE_DECREASE (at most once per SENDER_THROTTLE_EVERY
# seconds, never below SENDER_THROTTLE_FLOOR messages/s); each such period of good answers adds
# back SENDER_THROTTLE_RECOVERY of the rate it was lowered from.
SENDER_THROTTLE_DECREASE = env_number("SENDER_THROTTLE_DECREASE", default=0.8)
SENDER_THROTTLE_EVERY = env_number("SENDER_THROTTLE_EVERY", default=1.0)  # seconds
SENDER_THROTTLE_FLOOR = env_number("SENDER_THROTTLE_FLOOR", default=0.2)  # messages/s
SENDER_THROTTLE_RECOVERY = env_number("SENDER_THROTTLE_RECOVERY", default=0.05)
# Destinations (growth.audience.destinations): recipient domains are grouped by mailbox
# provider through their MX records. DESTINATIONS_DNS: "system" (resolv.conf), "off" (the static
# table of big consumer domains only), or nameservers as host[:port],...
DESTINATIONS_DNS = env.str("DESTINATIONS_DNS", default="system")
DESTINATIONS_DNS_TIMEOUT = env_number("DESTINATIONS_DNS_TIMEOUT", default=2.0)  # seconds a lookup
DESTINATIONS_RESOLVE_PER_BUILD = env.int("DESTINATIONS_RESOLVE_PER_BUILD", default=500)  # domains
DESTINATIONS_RESOLVE_SECONDS = env_number("DESTINATIONS_RESOLVE_SECONDS", default=10.0)  # a build
# connections a worker delivers on at once (growth.sending.wires): a kill leaves at most this many
# chunks in doubt with a plain receiver
SENDER_CONNECTIONS = env_count("SENDER_CONNECTIONS", default=4)
# messages per hand-over (plain receiver), or between two looks at the lease (idempotent)
SENDER_HANDOFF_CHUNK = env_count("SENDER_HANDOFF_CHUNK", default=5)
# The send protocol of a campaign built from now on (docs/one-write-per-recipient.md): "leases" (a
# lease per batch, or per chunk for a plain receiver, behind the campaign's cursor: one write a
# recipient) or "rows" (each row claimed under a lease of its own: two writes a recipient). A
# campaign keeps the protocol it was built with; a worker serves both.
SENDER_PROTOCOL = env.str("SENDER_PROTOCOL", default="leases")
if SENDER_PROTOCOL not in ("rows", "leases"):
    raise ImproperlyConfigured(f"SENDER_PROTOCOL must be rows or leases, not {SENDER_PROTOCOL!r}")
# in IDNA form: a header holds ASCII, and a Message-ID is no place for an encoded word
try:
    MESSAGE_ID_DOMAIN = env.str("MESSAGE_ID_DOMAIN",
                                default=urlsplit(SITE_URL).hostname or "localhost").encode("idna").decode()
except UnicodeError as exc:
    raise ImproperlyConfigured(f"MESSAGE_ID_DOMAIN (or SITE_URL's host) is no domain: {exc}") from None
# VERP (growth.sending.verp): bounces come back to <BOUNCE_LOCAL_PART>+<signed job>@BOUNCE_DOMAIN;
# unset, the envelope sender is the From address and bounces cannot be matched to their send.
BOUNCE_DOMAIN = env.str("BOUNCE_DOMAIN", default="").strip().lower().rstrip(".")
BOUNCE_LOCAL_PART = env.str("BOUNCE_LOCAL_PART", default="bounces")
# Bounces over a mailbox (growth.bounces, manage.py run_bounces): the IMAP mailbox to read them
# from when --imap is not given (imaps://user:password@host:993/INBOX), and how many sends to an
# address may bounce softly within the window before it is suppressed for the tenant (0: never).
BOUNCE_IMAP_URL = env.str("BOUNCE_IMAP_URL", default="")
BOUNCE_SOFT_LIMIT = env.int("BOUNCE_SOFT_LIMIT", default=3)
BOUNCE_SOFT_WINDOW_DAYS = env.int("BOUNCE_SOFT_WINDOW_DAYS", default=7)
# LMTP: what is kept in the unparsed directory for a person, at most (past it: 452, and the mail
# server keeps the message queued)
BOUNCE_UNPARSED_MAX_MB = env.int("BOUNCE_UNPARSED_MAX_MB", default=1024)
# DKIM (growth.sending.dkim): a tenant's own sending domains are keyed in the admin; these give
# the platform's key, which signs (d=DKIM_DOMAIN) the mail of every tenant without a key of its
# own. Without DKIM_PRIVATE_KEY_FILE, the platform sending domain DKIM_DOMAIN in the admin holds
# the key. DKIM_DOMAIN unset: no platform key (such mail goes out unsigned).
DKIM_DOMAIN = env.str("DKIM_DOMAIN", default="").strip().lower().rstrip(".")
DKIM_SELECTOR = env.str("DKIM_SELECTOR", default="").strip()
DKIM_PRIVATE_KEY_FILE = env.str("DKIM_PRIVATE_KEY_FILE", default="")  # PEM (RSA), base64 (Ed25519)
DKIM_ALGORITHM = env.str("DKIM_ALGORITHM", default="rsa-sha256")  # or ed25519-sha256

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = env.path("STATIC_ROOT", default=DATA_DIR / "static")
# WhiteNoise warns on every start without it; a read-only code directory (a container's
# readOnlyRootFilesystem, an image owned by root run as another user) must still run commands
with contextlib.suppress(OSError):
    Path(STATIC_ROOT).mkdir(parents=True, exist_ok=True)
# WhiteNoise serves them from gunicorn: compressed once `collectstatic` ran (`manage.py serve`
# runs it), straight from the apps otherwise. No hashed names: a page never depends on a
# manifest that a deployment forgot to build.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Production: behind HTTPS, every cookie secure and HTTP redirected; HSTS when you are sure.
SECURE_COOKIES = env.bool("SECURE_COOKIES", default=SITE_URL.startswith("https://"))
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_COOKIES
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
if env.bool("BEHIND_TLS_PROXY", default=False):  # the proxy sets X-Forwarded-Proto
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)  # opt-in: 31536000 is a year
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# Sign-in throttling (django-axes), on the admin's and the tenants' login pages alike: after
# LOGIN_FAILURE_LIMIT failed attempts at one username from one client address, that pair is
# refused (429) for LOGIN_COOLOFF_MINUTES, renewed by every attempt meanwhile. Keyed on the pair,
# so that nobody elsewhere can lock a user out; an operator unlocks in the admin ("Access
# attempts"). TRUSTED_PROXY_COUNT: how many reverse proxies in front of gunicorn append to
# X-Forwarded-For (0: the client is the connection's address; a header anyone can send is never
# believed beyond the proxies').
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend",
                           "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=10)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "growth/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "growth.request_guards.client_address"
AXES_USERNAME_CALLABLE = "growth.request_guards.client_username"
AXES_SENSITIVE_PARAMETERS = ["password"]
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)

# /metrics of the web app: with a token, for whoever sends it as a Bearer; without, loopback only.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")

# LOG_FORMAT=json: one JSON object per line, with the same fields as the text format and the
# records' extras (campaign_id, worker_id, counts), from every process (gunicorn's included).
LOG_FORMAT = env.str("LOG_FORMAT", default="text")
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOG_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": LOG_FIELDS},
        "json": {"()": "pythonjsonlogger.json.JsonFormatter", "fmt": LOG_FIELDS,
                 "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"}},
    },
    "handlers": {"console": {"class": "logging.StreamHandler",
                             "formatter": "json" if LOG_FORMAT == "json" else "text"}},
    "loggers": {"growth": {"handlers": ["console"], "level": LOG_LEVEL},
                "django": {"handlers": ["console"], "level": "WARNING"}},
}

# The reputation guard (growth.reputation.guard): per tenant, its bounce and complaint rates over
# the sends of the last REPUTATION_WINDOW_DAYS days. At or above a *_WARN threshold the admin
# shows it; at or above a *_STOP threshold the tenant's sending campaigns are paused with the
# reason, until an operator resumes them. Thresholds in percent. Complaints: Gmail's and Yahoo's
# 2024 bulk-sender figures (below 0.1 %, never 0.3 %); bounces: our choice, after Amazon SES's
# (below 2 % recommended, review at 5 %). Nothing is judged under REPUTATION_MIN_SENDS messages.
REPUTATION_WINDOW_DAYS = env.int("REPUTATION_WINDOW_DAYS", default=7)
REPUTATION_MIN_SENDS = env.int("REPUTATION_MIN_SENDS", default=500)
REPUTATION_BOUNCE_WARN = env_number("REPUTATION_BOUNCE_WARN", default=2.0, positive=False)  # percent
REPUTATION_BOUNCE_STOP = env_number("REPUTATION_BOUNCE_STOP", default=5.0, positive=False)  # percent
REPUTATION_COMPLAINT_WARN = env_number("REPUTATION_COMPLAINT_WARN", default=0.1, positive=False)  # percent
REPUTATION_COMPLAINT_STOP = env_number("REPUTATION_COMPLAINT_STOP", default=0.3, positive=False)  # percent
REPUTATION_CHECK_EVERY = env_number("REPUTATION_CHECK_EVERY", default=30.0)  # seconds, per worker
# check_sender / the account page's readiness panel: the public addresses mail leaves the relay
# from, to check that SPF authorizes them (unset: SPF is reported, the relay not checked).
DELIVERABILITY_RELAY_IPS = env.list("DELIVERABILITY_RELAY_IPS", default=[])
# The DNS that check_sender, the account page's panel and a sending domain's "Verify in DNS" read:
# "system" (resolv.conf), or nameservers as host[:port],...
DELIVERABILITY_DNS = env.str("DELIVERABILITY_DNS", default="system")
DELIVERABILITY_DNS_TIMEOUT = env_number("DELIVERABILITY_DNS_TIMEOUT", default=3.0)  # seconds a lookup
