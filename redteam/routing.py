"""The red-teaming websocket route, mounted by config/asgi.py beside the arena's."""

from django.urls import URLPattern, path

from redteam.consumer import RedteamConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/redteam", RedteamConsumer.as_asgi(), name="ws-redteam"),
]
