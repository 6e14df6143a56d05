from django.urls import path

from ratings import views

app_name = "ratings"
urlpatterns = [
    path("leaderboard", views.leaderboard_page, name="leaderboard"),
    path("leaderboard.csv", views.leaderboard_csv, name="leaderboard-csv"),
    path("leaderboard.json", views.leaderboard_json, name="leaderboard-json"),
    path("transparency", views.transparency_page, name="transparency"),
    # A display name may hold a slash, so the whole rest of the path is the name.
    path("models/<path:name>", views.model_detail_page, name="model"),
]
