from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from growth.tenant import views

app_name = "tenant"

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(
        template_name="growth/tenant/login.html", redirect_authenticated_user=True,
        next_page=reverse_lazy("growth:tenant:home")), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page=reverse_lazy("growth:tenant:login")),
         name="logout"),
    path("accounts/<slug:slug>/suppressions/", views.suppression_list, name="suppressions"),
    path("accounts/<slug:slug>/suppressions/add/", views.suppression_add, name="suppression-add"),
    path("accounts/<slug:slug>/suppressions/<int:pk>/remove/", views.suppression_remove,
         name="suppression-remove"),
    path("accounts/<slug:slug>/suppressions/import/", views.suppression_import,
         name="suppression-import"),
    path("accounts/<slug:slug>/suppressions/export.csv", views.suppression_export,
         name="suppression-export"),
    path("accounts/<slug:slug>/lookup/", views.lookup, name="lookup"),
    path("accounts/<slug:slug>/lookup/suppress/", views.lookup_suppress, name="lookup-suppress"),
    path("accounts/<slug:slug>/campaigns/", views.campaign_list, name="campaigns"),
    path("accounts/<slug:slug>/campaigns/<int:campaign_id>/sends.csv", views.campaign_export,
         name="campaign-export"),
]
