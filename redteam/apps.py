from django.apps import AppConfig
from django.db.models.signals import post_save


class RedteamConfig(AppConfig):
    name = "redteam"
    verbose_name = "Red teaming"

    def ready(self) -> None:
        from redteam import tasks  # noqa: F401  registers the Celery task
        from redteam.models import Attempt
        from redteam.signals import refit_after_attempt_end

        post_save.connect(
            refit_after_attempt_end, sender=Attempt, dispatch_uid="redteam-refit-after-attempt"
        )
