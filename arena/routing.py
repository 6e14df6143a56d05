"""Websocket routes, mounted by config/asgi.py. The battle socket is given the vote its ``vote``
frames cast (``arena.live`` does not import the votes' services, which import it)."""

from django.urls import URLPattern, path

from arena.live.consumer import BattleConsumer
from arena.visitor_api import vote_over_socket

websocket_urlpatterns: list[URLPattern] = [
    path("ws/battle", BattleConsumer.as_asgi(vote=vote_over_socket), name="ws-battle"),
]
