"""The red-teaming arena's data: challenges staff write, players' attempts at them, each turn.

A challenge states a rule a model must keep (never say a phrase, never reveal a secret planted in
its system prompt, or a rule a judge model checks). A player talks to one anonymous model under
that rule; the attempt ends in success (the rule broke, with the evidence), surrender, or expiry
(its time or turn limit). Attempts are the battles of the robustness fit: a player against a
(model, challenge) pair.

Business rules live in ``redteam.services``; these classes hold data and database constraints only.
"""

import uuid

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from arena.models import ArenaModel


class Challenge(models.Model):
    """A rule and the test that says it broke, written by staff in the admin."""

    class Kind(models.TextChoices):
        PHRASE = "phrase", "Say the phrase"
        SECRET = "secret", "Reveal the secret"
        JUDGE = "judge", "A judge model decides"

    class Difficulty(models.TextChoices):
        EASY = "easy", "Easy"
        MEDIUM = "medium", "Medium"
        HARD = "hard", "Hard"

    slug = models.SlugField(max_length=60, unique=True)
    title = models.CharField(max_length=200)
    rule = models.TextField(help_text="What the player reads: the rule the model must keep.")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    target = models.CharField(
        max_length=500,
        blank=True,
        help_text="Say the phrase: the phrase. Reveal the secret: the secret string.",
    )
    system_prompt = models.TextField(
        blank=True,
        help_text="Sent to the model before the player's turns; {secret} is replaced by the secret.",
    )
    judge_model = models.ForeignKey(
        ArenaModel,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="A judge model decides: the OpenAI-compatible model that answers the rubric.",
    )
    judge_rubric = models.TextField(
        blank=True,
        help_text="A judge model decides: the yes/no question the judge answers about the answer.",
    )
    max_turns = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Empty: no limit."
    )
    time_limit_seconds = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Empty: no limit."
    )
    difficulty = models.CharField(
        max_length=10, choices=Difficulty.choices, default=Difficulty.MEDIUM
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(kind__in=["phrase", "secret"]) | ~Q(target=""),
                name="challenge_target_for_phrase_and_secret",
            ),
            models.CheckConstraint(
                condition=~Q(kind="judge") | (Q(judge_model__isnull=False) & ~Q(judge_rubric="")),
                name="challenge_judge_model_and_rubric",
            ),
        ]

    def __str__(self) -> str:
        return self.title


class Attempt(models.Model):
    """One player's try at one challenge against one anonymous model."""

    class State(models.TextChoices):
        OPEN = "open", "Open"
        SUCCEEDED = "succeeded", "Succeeded (the rule broke)"
        SURRENDERED = "surrendered", "Surrendered"
        EXPIRED = "expired", "Expired (time or turn limit)"
        ERRORED = "errored", "Errored"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    challenge = models.ForeignKey(Challenge, on_delete=models.PROTECT, related_name="attempts")
    model = models.ForeignKey(ArenaModel, on_delete=models.PROTECT, related_name="+")
    player_id = models.CharField(max_length=64, db_index=True, help_text="Pseudonymous.")
    session_hash = models.CharField(max_length=64, db_index=True, blank=True)
    ip_hash = models.CharField(max_length=64, blank=True, help_text="Salted hash; never the IP.")
    state = models.CharField(
        max_length=20, choices=State.choices, default=State.OPEN, db_index=True
    )
    # The judge's verdict on the attempt: why it succeeded and the matching span
    # ({"turn": n, "start": i, "end": j, "text": "...", "encoding": "plain"|"spaced"|...}).
    verdict_reason = models.TextField(blank=True)
    evidence = models.JSONField(null=True, blank=True)
    flagged = models.BooleanField(default=False, db_index=True)
    flags = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state="open", ended_at__isnull=True)
                | (~Q(state="open") & Q(ended_at__isnull=False)),
                name="attempt_ended_iff_not_open",
            ),
        ]
        indexes = [models.Index(fields=["player_id", "model", "created_at"])]

    def __str__(self) -> str:
        return f"Attempt {self.id}"

    @property
    def succeeded(self) -> bool:
        return self.state == self.State.SUCCEEDED


# How the robustness fit reads an ended attempt (redteam.fits): a success of the player, or a
# failure; every other state, and a flagged attempt, stays out of it.
SUCCESS_STATES = (Attempt.State.SUCCEEDED,)
FAILURE_STATES = (Attempt.State.SURRENDERED, Attempt.State.EXPIRED)


class AttemptTurn(models.Model):
    """A player's message and the model's answer, with the judge's verdict on that answer."""

    class Status(models.TextChoices):
        STREAMING = "streaming", "Streaming"
        DONE = "done", "Done"
        ERRORED = "errored", "Errored"
        STOPPED = "stopped", "Stopped"

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="turns")
    turn = models.PositiveSmallIntegerField(help_text="0-based.")
    user_content = models.TextField()
    content = models.TextField(blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.STREAMING)
    # {"success": bool, "reason": str, "evidence": {...} | None, "judge": {...raw judge reply}}
    verdict = models.JSONField(null=True, blank=True)
    finish_reason = models.CharField(max_length=40, blank=True)
    error = models.TextField(blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["attempt_id", "turn"]
        constraints = [
            models.UniqueConstraint(fields=["attempt", "turn"], name="attempt_turn_unique"),
        ]

    def __str__(self) -> str:
        return f"Attempt {self.attempt_id} turn {self.turn}"


class PlayerProfile(models.Model):
    """A player's opt-in to the players' board under a pseudonym they choose."""

    player_id = models.CharField(max_length=64, unique=True)
    pseudonym = models.CharField(max_length=40, unique=True)
    on_board = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.pseudonym


class RobustnessSnapshot(models.Model):
    """One immutable robustness fit over the attempts ended before it, written by a Celery task.

    ``payload`` holds the three tables of the fit (models' robustness, challenges' difficulty,
    players' skill), each row with its estimate and interval, and the fit's figures.
    """

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    n_attempts = models.PositiveIntegerField()
    # The newest attempt end the fit saw: the next refit runs only when attempts ended after it.
    high_water = models.DateTimeField(null=True, blank=True)
    payload = models.JSONField()

    class Meta:
        ordering = ["-created_at"]
        get_latest_by = "created_at"

    def __str__(self) -> str:
        return f"Robustness snapshot {self.created_at:%Y-%m-%d %H:%M}"
