from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Visitors' optional accounts: the pages around django-allauth's (the personal board, the
    data download, the deletion). Downstream of the arena and the ratings; nothing imports it."""

    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from accounts import checks  # noqa: F401  (registers the system checks)
