from django.urls import include, path

from growth import views

app_name = "growth"

urlpatterns = [
    path("u/<str:token>/", views.unsubscribe, name="unsubscribe"),
    path("app/", include("growth.tenant.urls")),
]
