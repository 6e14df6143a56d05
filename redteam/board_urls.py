from django.urls import path

from redteam import board

app_name = "redteam_board"

urlpatterns = [path("", board.leaderboard, name="leaderboard")]
