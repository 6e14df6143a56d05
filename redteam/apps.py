from django.apps import AppConfig


class RedteamConfig(AppConfig):
    name = "redteam"
    verbose_name = "Red teaming"
