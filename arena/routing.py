"""Websocket routes, mounted by config/asgi.py."""

from django.urls import path

from arena.consumers import BattleConsumer

websocket_urlpatterns: list = [
    path("ws/battle", BattleConsumer.as_asgi(), name="ws-battle"),
]
