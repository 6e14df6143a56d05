"""Websocket routes, mounted by config/asgi.py."""

from django.urls import path  # noqa: F401

websocket_urlpatterns: list = []
