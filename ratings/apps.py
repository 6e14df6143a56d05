from django.apps import AppConfig


class RatingsConfig(AppConfig):
    name = "ratings"
    verbose_name = "Ratings"

    def ready(self) -> None:
        from arena.signals import vote_flags_changed, vote_recorded
        from ratings.tasks import (
            env_rewards_after_vote,
            snapshot_refresh_after_flags,
            snapshot_refresh_after_vote,
        )

        vote_recorded.connect(
            snapshot_refresh_after_vote, dispatch_uid="ratings.snapshot_refresh_after_vote"
        )
        vote_recorded.connect(env_rewards_after_vote, dispatch_uid="ratings.env_rewards_after_vote")
        vote_flags_changed.connect(
            snapshot_refresh_after_flags, dispatch_uid="ratings.snapshot_refresh_after_flags"
        )
