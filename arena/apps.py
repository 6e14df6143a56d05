from django.apps import AppConfig


class ArenaConfig(AppConfig):
    name = "arena"
    verbose_name = "Arena"

    def ready(self) -> None:
        # ``checks`` registers the system checks. ``tasks`` registers the arena's Celery tasks in
        # every process, not only in a worker: the env services queue theirs by name (arena.tasks
        # imports them, so they cannot import it).
        from arena import checks, tasks  # noqa: F401
