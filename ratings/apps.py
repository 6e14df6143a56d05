from django.apps import AppConfig


class RatingsConfig(AppConfig):
    name = "ratings"
    verbose_name = "Ratings"

    def ready(self) -> None:
        from arena.signals import (
            counted_reaction_changed,
            env_submission_created,
            vote_flags_changed,
            vote_recorded,
        )
        from environment.model_rewards import model_rewards_register
        from ratings.tasks import (
            _reward_model_unavailable,
            env_rewards_after_vote,
            reward_model_after_submission,
            reward_model_refit_after_vote,
            snapshot_refresh_after_flags,
            snapshot_refresh_after_reaction,
            snapshot_refresh_after_vote,
        )

        vote_recorded.connect(
            snapshot_refresh_after_vote, dispatch_uid="ratings.snapshot_refresh_after_vote"
        )
        counted_reaction_changed.connect(
            snapshot_refresh_after_reaction, dispatch_uid="ratings.snapshot_refresh_after_reaction"
        )
        vote_recorded.connect(env_rewards_after_vote, dispatch_uid="ratings.env_rewards_after_vote")
        vote_recorded.connect(
            reward_model_refit_after_vote, dispatch_uid="ratings.reward_model_refit_after_vote"
        )
        vote_flags_changed.connect(
            reward_model_refit_after_vote, dispatch_uid="ratings.reward_model_refit_after_flags"
        )
        env_submission_created.connect(
            reward_model_after_submission, dispatch_uid="ratings.reward_model_after_submission"
        )
        # Whether a run may ask for model rewards: the setting on and the extra importable.
        model_rewards_register(_reward_model_unavailable)
        vote_flags_changed.connect(
            snapshot_refresh_after_flags, dispatch_uid="ratings.snapshot_refresh_after_flags"
        )
