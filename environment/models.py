"""The environment API's records: a trainer's runs, their submissions and completions, and the
battles that show them. Their tables keep the names they had as arena models (``arena_envrun``
and so on): the models moved to this app without their rows moving."""

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from arena.models import ApiToken, ArenaModel, Battle, Prompt


class EnvRun(models.Model):
    """A trainer's run: its submissions are judged by visitors in ordinary anonymous battles."""

    class State(models.TextChoices):
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    class ClosedReason(models.TextChoices):
        NONE = "", "Not closed"
        TRAINER = "trainer", "Closed by its trainer"
        IDLE = "idle", "Closed: its trainer stopped calling"
        STAFF = "staff", "Closed by staff"

    class WebhookStatus(models.TextChoices):
        NONE = "", "Not attempted"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"
        REFUSED = "refused", "Refused"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    token = models.ForeignKey(ApiToken, on_delete=models.PROTECT, related_name="runs")
    name = models.CharField(max_length=200)
    # The hidden model that stands for the run's completions in battles (shown after the vote
    # as "Submitted answer"); never active, never public, never rated.
    model = models.OneToOneField(ArenaModel, on_delete=models.PROTECT, related_name="env_run")
    references = models.ManyToManyField(ArenaModel, blank=True, related_name="+")
    votes_per_completion = models.PositiveSmallIntegerField(default=3)
    ttl_hours = models.PositiveIntegerField(default=72)
    share = models.FloatField(
        default=0.2, help_text="Highest fraction of the battles served that may come from this run."
    )
    webhook_url = models.URLField(max_length=500, blank=True)
    webhook_secret = models.CharField(max_length=64, help_text="HMAC-SHA256 key of the webhook.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    # The last sequence number given to a reward record of this run. Taken under the run's row
    # lock, so numbers commit in order and a cursor over them never skips one.
    reward_seq = models.PositiveBigIntegerField(default=0)
    # The last sequence number the webhook has delivered (everything up to it was acknowledged).
    webhook_seq = models.PositiveBigIntegerField(default=0)
    # The outcome of the latest delivery attempt, shown to the trainer (GET /runs/{id}) and to
    # staff: delivered, failed (the receiver's status, a timeout, a connection) or refused (the
    # guard of environment.outbound: the host now resolves to an address it does not send to).
    webhook_status = models.CharField(
        max_length=10, choices=WebhookStatus.choices, blank=True, default=WebhookStatus.NONE
    )
    webhook_error = models.CharField(max_length=500, blank=True)
    webhook_attempted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_reason = models.CharField(
        max_length=10, choices=ClosedReason.choices, blank=True, default=ClosedReason.NONE
    )
    # The trainer's lease: the last authenticated call on the run. A run untouched for
    # ARENA_ENV_RUN_IDLE_SECONDS is no longer served and the sweep closes it.
    touched_at = models.DateTimeField(default=timezone.now, db_index=True)
    # Model rewards at once (the rating side's reward model, when the arena runs one): each
    # completion gets a record of source "model" right after its submission, superseded by the
    # humans' when they come; its pending completions are served widest interval first.
    reward_model = models.BooleanField(default=False)

    class Meta:
        db_table = "arena_envrun"
        ordering = ["-created_at"]
        verbose_name = "environment run"
        constraints = [
            models.CheckConstraint(
                condition=Q(share__gt=0) & Q(share__lte=1), name="envrun_share_in_0_1"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class EnvSubmission(models.Model):
    """A group of 1-16 completions of one prompt, submitted by a run."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(EnvRun, on_delete=models.PROTECT, related_name="submissions")
    idempotency_key = models.CharField(max_length=200)
    # SHA-256 of the request's canonical JSON: a replayed key with another body is refused.
    request_hash = models.CharField(max_length=64)
    prompt = models.ForeignKey(Prompt, on_delete=models.PROTECT, related_name="+")
    messages = models.JSONField(help_text="The prompt as role/content messages, as submitted.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "arena_envsubmission"
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "idempotency_key"], name="envsubmission_idempotency_key_per_run"
            ),
        ]

    def __str__(self) -> str:
        return f"Submission {self.id}"


class EnvCompletion(models.Model):
    """One submitted completion and its reward record (written by the rating side after votes)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        COMPLETE = "complete", "Complete"
        EXPIRED = "expired", "Expired"
        # Withdrawn by the trainer while pending: no longer served, kept in the feed.
        CANCELLED = "cancelled", "Cancelled"

    class Source(models.TextChoices):
        NONE = "", "No score yet"
        HUMAN = "human", "Visitors' votes"
        MODEL = "model", "The reward model"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(EnvRun, on_delete=models.PROTECT, related_name="completions")
    submission = models.ForeignKey(
        EnvSubmission, on_delete=models.PROTECT, related_name="completions"
    )
    index = models.PositiveSmallIntegerField(help_text="0-based position in the group.")
    text = models.TextField()
    meta = models.JSONField(default=dict, blank=True, help_text="The trainer's, returned as is.")
    style = models.JSONField(null=True, blank=True)
    votes = models.PositiveIntegerField(default=0)
    wins = models.PositiveIntegerField(default=0)
    losses = models.PositiveIntegerField(default=0)
    ties = models.PositiveIntegerField(default=0)
    both_bad = models.PositiveIntegerField(default=0)
    score = models.FloatField(null=True, blank=True)
    score_low = models.FloatField(null=True, blank=True)
    score_high = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # Whose score ``score`` is: the humans' fit once a counted vote gives one, else the reward
    # model's (runs with ``reward_model``), else none yet.
    source = models.CharField(
        max_length=10, choices=Source.choices, blank=True, default=Source.NONE
    )
    # The reward model's own reward and 95% interval (kept when the humans' supersede it: the
    # interval's width orders the run's pending completions for visitors), and the snapshot
    # (``ratings.RewardModelSnapshot`` id) that computed it.
    model_score = models.FloatField(null=True, blank=True)
    model_score_low = models.FloatField(null=True, blank=True)
    model_score_high = models.FloatField(null=True, blank=True)
    model_snapshot_id = models.PositiveBigIntegerField(null=True, blank=True)
    # Position in the run's reward feed: set from ``EnvRun.reward_seq`` whenever the record
    # changes (and at creation), so ``seq > cursor`` is exactly what a reader has not seen.
    seq = models.PositiveBigIntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "arena_envcompletion"
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["submission", "index"], name="envcompletion_one_per_group_position"
            ),
            models.UniqueConstraint(fields=["run", "seq"], name="envcompletion_seq_unique_in_run"),
        ]

    def __str__(self) -> str:
        return f"Completion {self.index} of {self.submission_id}"


class EnvBattle(models.Model):
    """Which submitted completions an environment battle shows; a null side is the reference
    model's answer (``Completion`` with source ``reference`` or ``pool``)."""

    battle = models.OneToOneField(
        Battle, on_delete=models.PROTECT, primary_key=True, related_name="env"
    )
    run = models.ForeignKey(EnvRun, on_delete=models.PROTECT, related_name="battles")
    submission = models.ForeignKey(EnvSubmission, on_delete=models.PROTECT, related_name="battles")
    completion_a = models.ForeignKey(
        EnvCompletion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    completion_b = models.ForeignKey(
        EnvCompletion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # False while the source bound leaves this battle's vote out of its group's fit (set by
    # each refit): the serve then does not count the vote as judging its completions, which
    # would otherwise wait for their expiry with no battle served.
    counted = models.BooleanField(default=True)

    class Meta:
        db_table = "arena_envbattle"
        constraints = [
            models.CheckConstraint(
                condition=Q(completion_a__isnull=False) | Q(completion_b__isnull=False),
                name="envbattle_at_least_one_submitted_side",
            ),
        ]

    def __str__(self) -> str:
        return f"Environment battle {self.battle_id}"
