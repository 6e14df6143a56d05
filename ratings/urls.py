from django.urls import path

from ratings import views

app_name = "ratings"
# The downloads (/leaderboard.json, /leaderboard.csv) are ratings.api's router, mounted by
# config.api.
urlpatterns = [
    path("leaderboard", views.leaderboard_page, name="leaderboard"),
    path("transparency", views.transparency_page, name="transparency"),
    # A display name may hold a slash, so the whole rest of the path is the name.
    path("models/<path:name>", views.model_detail_page, name="model"),
]
