from django.apps import AppConfig


class EnvironmentConfig(AppConfig):
    name = "environment"
    verbose_name = "Environment API"

    def ready(self) -> None:
        # ``tasks`` registers the environment API's Celery tasks in every process, not only in
        # a worker: its services queue them by name (the tasks import the services). ``signals``
        # connects the receivers that end every process's copy of "is any run open" when a
        # run's state changes.
        from arena.battle_sources import BattleSource, battle_source_register
        from environment import signals, tasks  # noqa: F401
        from environment.serve import env_battle_serve, env_work_available

        # The arena serves the app's battles in place of pool battles, and offers pool mode when
        # only they can be served, through this source: it never imports the app.
        battle_source_register(
            BattleSource(
                name="environment",
                is_open=signals.env_runs_any_open,
                serve=env_battle_serve,
                has_work=env_work_available,
            )
        )
