from django.apps import AppConfig


class RatingsConfig(AppConfig):
    name = "ratings"
    verbose_name = "Ratings"

    def ready(self) -> None:
        from arena.signals import vote_recorded
        from ratings.tasks import env_rewards_after_vote, snapshot_refresh_after_vote

        vote_recorded.connect(
            snapshot_refresh_after_vote, dispatch_uid="ratings.snapshot_refresh_after_vote"
        )
        vote_recorded.connect(env_rewards_after_vote, dispatch_uid="ratings.env_rewards_after_vote")
