"""Leaderboard snapshots: the immutable output of one rating run.

Business rules live in ``ratings.services``; this module holds data and its constraints only.
"""

from typing import Any

from django.db import models


class SnapshotImmutableError(RuntimeError):
    """A snapshot is a record of one run; a new run writes a new row instead."""


class LeaderboardSnapshot(models.Model):
    """Everything the leaderboard page and its downloads show, computed once by the task.

    ``payload`` (schema version 3)::

        {"schema": 3,
         "models": {slug: {"name", "organization", "license", "active"}},
         "categories": [{"key", "label", "description", "n_votes", "status": "ok"|"insufficient",
                         "reason": <reason>|"", "results": {"on": <engine result>|null,
                                                             "off": <engine result>|null},
                         "reasons": {"on"|"off": <reason>} (only if a fit is missing),
                         "provisional": {"on"|"off": [<provisional>]} (for a missing fit)}],
         "excluded": {"named", "flagged", "by_reason": {reason: n},
                      "duplicate_prompts": {"votes", "prompts", "cap"}} (votes left out),
         "sampling": {"se": {slug: se}, "counts": [[slug, slug, n]]} (active pair sampling)}

    ``<engine result>`` is ``ratings.engine.rate``'s dictionary, restricted to public models;
    its ``provisional`` list, and the category's for a view without a fit, hold
    ``{"model", "battles", "wins", "losses", "ties", "reason"}`` (``ratings.services``).
    ``<reason>`` is ``ratings.payload.ViewReason``, a code and its figures (from schema 6; an
    English sentence before), worded by ``ratings.category_text.view_reason_text``.
    Rows are never updated: ``save`` refuses an existing row and a database trigger (migration
    0002) refuses ``UPDATE`` statements from anywhere else.
    """

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    vote_high_water = models.BigIntegerField(
        help_text="Largest vote id included (0 when there were none)."
    )
    n_votes = models.PositiveIntegerField(help_text="Votes read (anonymous, unflagged).")
    params = models.JSONField(help_text="Fit parameters and category definitions.")
    params_digest = models.CharField(max_length=64, help_text="SHA-256 of the params, as JSON.")
    duration_seconds = models.FloatField(help_text="Wall time of the run that wrote this row.")
    payload = models.JSONField()

    class Meta:
        ordering = ["-created_at", "-id"]
        get_latest_by = ["created_at", "id"]
        indexes = [models.Index(fields=["vote_high_water", "params_digest"])]

    def __str__(self) -> str:
        return f"Snapshot {self.pk} (votes up to #{self.vote_high_water})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Integrity of the record, not a business rule: a snapshot is written once.
        if self.pk is not None and not self._state.adding:
            raise SnapshotImmutableError("Leaderboard snapshots are immutable; write a new one.")
        super().save(*args, **kwargs)


class RewardModelSnapshot(models.Model):
    """One fit of the reward model (``ratings.reward_model``) on the arena's votes.

    ``weights`` holds the head's weights and Laplace covariance as float64 bytes
    (``numpy.save`` of a dict-free ``(d + 1, d)`` array: the first row the weights, then the
    covariance); ``spec`` the feature spec (``FeatureSpec.as_json``); ``heldout`` the figures
    of a split by prompt (``{"folds", "pairs", "accuracy", "log_loss", "brier"}``; null
    figures with too few prompts to split). Rows are never updated (``save`` refuses an
    existing row): a refit writes a new one, and a run's model rewards name the row they came
    from.
    """

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    vote_high_water = models.BigIntegerField(
        help_text="Largest vote id read (0 when there were none)."
    )
    n_votes = models.PositiveIntegerField(help_text="Votes fitted (unflagged, with both answers).")
    spec = models.JSONField(help_text="Feature spec: parts, embedding model, standardisation.")
    l2 = models.FloatField(help_text="The penalty the fit used (per pair times the pairs).")
    weights = models.BinaryField(help_text="Weights and covariance, float64 (see the class).")
    heldout = models.JSONField(default=dict, help_text="Figures of a split by prompt.")
    duration_seconds = models.FloatField()

    class Meta:
        ordering = ["-created_at", "-id"]
        get_latest_by = ["created_at", "id"]

    def __str__(self) -> str:
        return f"Reward model {self.pk} ({self.n_votes} votes)"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise SnapshotImmutableError("Reward model snapshots are immutable; write a new one.")
        super().save(*args, **kwargs)
