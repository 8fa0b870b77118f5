"""gunicorn's settings for ``manage.py serve``: access and error logs on stderr, as JSON lines
when LOG_FORMAT=json (the same formatter as the Django processes)."""

import os

accesslog = "-"
errorlog = "-"
# seconds a request may take before its worker is replaced: a one-click unsubscribe is one short
# transaction, but a tenant's import of the largest file it may upload (20 MB, 900,000
# addresses) takes about 30 s on two cores, most of it PostgreSQL's (measured; see README)
timeout = 120
graceful_timeout = 20

if os.environ.get("LOG_FORMAT") == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "pythonjsonlogger.json.JsonFormatter",
                                "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
                                "rename_fields": {"asctime": "time", "levelname": "level",
                                                  "name": "logger"}}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json",
                                 "stream": "ext://sys.stderr"}},
        "loggers": {"gunicorn.error": {"handlers": ["console"], "level": "INFO",
                                       "propagate": False},
                    "gunicorn.access": {"handlers": ["console"], "level": "INFO",
                                        "propagate": False}},
    }
