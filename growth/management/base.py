"""What the project's management commands share: an unreachable database is one line and exit
status 3, never a traceback. A command's own "no" (check_sender: not ready) is 1, and a mistake
in what was asked (an unknown account, a bad argument) 2, as argparse has it."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from growth.managers.queries import DATABASE_AWAY

UNREACHABLE = 3  # exit status: the database cannot be reached
ASKED_WRONG = 2  # exit status: what was asked names nothing (argparse's for a usage error)


class DatabaseCommand(BaseCommand):
    """A command that reads or writes the database."""

    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except DATABASE_AWAY as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise CommandError(f"The database cannot be reached ({reason}): is it running, and "
                               "does DATABASE_URL name it?", returncode=UNREACHABLE) from exc
