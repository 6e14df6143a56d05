"""Websocket routes, mounted by config/asgi.py."""

from django.urls import URLPattern, path

from arena.live.consumer import BattleConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/battle", BattleConsumer.as_asgi(), name="ws-battle"),
]
