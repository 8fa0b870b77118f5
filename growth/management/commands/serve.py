"""``manage.py serve``: the admin, /app/ and the public unsubscribe endpoint under gunicorn, in
production mode, with the static files collected first (WhiteNoise serves them)."""

import os
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Collect static files, then run the site under gunicorn (not runserver)."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1:8000",
                            help="Address and port (default: 127.0.0.1:8000).")
        parser.add_argument("--workers", type=int, default=2,
                            help="gunicorn worker processes (default: 2).")
        parser.add_argument("--migrate", action="store_true",
                            help="Apply migrations first (default: no; the operator decides).")

    def handle(self, *args, bind, workers, migrate, **options):
        if migrate:
            call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        self.stdout.write(f"serving on http://{bind}/ (admin: /admin/, tenants: /app/, "
                          f"health: /healthz /readyz)" + (" with DEBUG on" if settings.DEBUG else ""))
        sys.stdout.flush()
        os.execvp(sys.executable, [
            sys.executable, "-m", "gunicorn", "zylior.wsgi:application", "--bind", bind,
            "--workers", str(workers), "--config", "python:zylior.gunicorn_conf",
        ])
