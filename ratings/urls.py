from django.urls import path

from ratings import views

app_name = "ratings"
# The downloads (/leaderboard.json, /leaderboard.csv) are ratings.api's router, mounted by
# config.api.
urlpatterns = [
    path("leaderboard", views.leaderboard_page, name="leaderboard"),
    path("transparency", views.transparency_page, name="transparency"),
]
