from django.contrib import admin
from django.urls import include, path

from growth.feedback.webhooks import MailgunTrackingView, tracking_urls
from growth.observability import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    # ESP feedback: /anymail/<esp>/tracking/, behind ANYMAIL's WEBHOOK_SECRET (see README)
    # Mailgun's before anymail's own: the same view, refusing a replayed signature
    path("anymail/mailgun/tracking/", MailgunTrackingView.as_view(), name="mailgun_tracking_webhook"),
    path("anymail/", include((tracking_urls(), "anymail"))),
    path("", include("growth.urls")),
]
