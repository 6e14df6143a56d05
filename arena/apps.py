from django.apps import AppConfig


class ArenaConfig(AppConfig):
    name = "arena"
    verbose_name = "Arena"

    def ready(self) -> None:
        # ``checks`` registers the system checks. ``tasks`` registers the arena's Celery tasks in
        # every process, not only in a worker (the environment app registers its own, under the
        # names they had here: ``environment.tasks``). ``pool_cache`` connects the receivers
        # that end every process's copies of the pool when a model, prompt or completion
        # changes, in every process that can change one (an import command, the admin, a worker).
        from arena import checks, pool_cache, tasks  # noqa: F401
