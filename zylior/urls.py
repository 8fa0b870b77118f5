from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # ESP feedback: /anymail/<esp>/tracking/, behind ANYMAIL's WEBHOOK_SECRET (see README)
    path("anymail/", include("anymail.urls")),
    path("", include("growth.urls")),
]
