from django.urls import path

from arena import views

app_name = "arena"
urlpatterns = [
    path("", views.battle_page, name="battle"),
    path("about", views.about_page, name="about"),
    path("api/battles", views.battle_create, name="battle-create"),
    path("api/battles/<str:battle_id>", views.battle_detail, name="battle-detail"),
    path("api/battles/<str:battle_id>/vote", views.vote_create, name="vote-create"),
    path("api/terms", views.terms_accept_view, name="terms-accept"),
    path("api/challenge", views.challenge_new, name="challenge"),
    path("api/challenge/verify", views.challenge_verify_view, name="challenge-verify"),
    path("api/exports/votes", views.votes_export, name="votes-export"),
    path("api/openapi.json", views.openapi_schema, name="openapi"),
]
