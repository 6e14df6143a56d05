from django.urls import path

from arena import views

app_name = "arena"
# The JSON API under /api/ is arena.visitor_api's router, mounted by config.api.
urlpatterns = [
    path("", views.battle_page, name="battle"),
    path("about", views.about_page, name="about"),
    path("run/frame", views.run_frame, name="run-frame"),
    # The card first: a page's token pattern would take "<token>.png" too.
    path("s/<str:token>.png", views.share_card, name="share-card"),
    path("s/<str:token>", views.share_page, name="share"),
    path("images/<uuid:image_id>", views.prompt_image, name="prompt-image"),
]
