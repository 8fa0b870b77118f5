from __future__ import annotations

from django.apps import AppConfig


class GrowthConfig(AppConfig):
    name = "growth"
    verbose_name = "Growth"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from anymail.signals import tracking

        from growth.feedback.events import on_tracking

        tracking.connect(on_tracking, dispatch_uid="growth.feedback")
