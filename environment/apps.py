from django.apps import AppConfig


class EnvironmentConfig(AppConfig):
    name = "environment"
    verbose_name = "Environment API"

    def ready(self) -> None:
        # ``tasks`` registers the environment API's Celery tasks in every process, not only in
        # a worker: its services queue them by name (the tasks import the services). ``signals``
        # connects the receivers that end every process's copy of "is any run open" when a run's
        # state changes, and registers the app's battle source with the arena, which serves its
        # battles in place of pool battles without importing this app.
        from environment import signals, tasks  # noqa: F401
