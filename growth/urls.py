from django.urls import include, path

from growth import views

app_name = "growth"

urlpatterns = [
    path("", views.home, name="home"),
    path("u/<str:token>/", views.unsubscribe, name="unsubscribe"),
    path("u/<str:token>/done/", views.unsubscribe_done, name="unsubscribe-done"),
    path("u/<str:undo_token>/undo/", views.unsubscribe_undo, name="unsubscribe-undo"),
    path("app/", include("growth.tenant.urls")),
]
