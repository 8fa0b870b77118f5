from django.apps import AppConfig


class GrowthConfig(AppConfig):
    name = "growth"
    verbose_name = "Growth"
    default_auto_field = "django.db.models.BigAutoField"
