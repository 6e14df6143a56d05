from django.urls import path

from arena import views

app_name = "arena"
# The JSON API under /api/ is arena.visitor_api's router, mounted by config.api.
urlpatterns = [
    path("", views.battle_page, name="battle"),
    path("about", views.about_page, name="about"),
]
