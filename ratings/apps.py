from django.apps import AppConfig


class RatingsConfig(AppConfig):
    name = "ratings"
    verbose_name = "Ratings"

    def ready(self) -> None:
        from arena.signals import vote_recorded
        from ratings.tasks import snapshot_refresh_after_vote

        vote_recorded.connect(
            snapshot_refresh_after_vote, dispatch_uid="ratings.snapshot_refresh_after_vote"
        )
