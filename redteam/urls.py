from django.urls import path

from redteam import views

app_name = "redteam"

urlpatterns = [
    path("", views.challenge_list, name="list"),
    path("play/<slug:slug>", views.play_page, name="play"),
]
