from django.urls import path

from growth import views

app_name = "growth"

urlpatterns = [
    path("u/<str:token>/", views.unsubscribe, name="unsubscribe"),
]
