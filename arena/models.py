"""The battle side's data: providers and models, the prompt pool, battles, their messages, votes.

Why one module: the tables hang off each other (a battle's messages, its vote, the reactions and
shares on it, the models and providers it names), their constraints refer across them, and
Django looks for an app's models here; a package would spread the foreign keys, not the concepts.

Business rules live in ``arena.services``; these classes hold data and database constraints only.
"""

import hashlib
import json
import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import pgettext_lazy

ENV_VAR_NAME = RegexValidator(
    r"^[A-Za-z_][A-Za-z0-9_]*$", "An environment variable name: letters, digits and _."
)
# A model's slug: letters (any script), digits, "-", "_" and ".", as the pool import keeps a
# model's name (``vicuna-13b-v1.3``); Django's slug rule would refuse the dot.
MODEL_SLUG_MAX = 100
INTERFACE_LANGUAGE_MAX = 15  # a BCP 47 tag as Django's LANGUAGES name them (``pt-br``)
MODEL_SLUG = RegexValidator(
    r"^[-\w.]+\Z", "A model slug: letters, digits, hyphens, underscores and dots."
)


def aliases_valid(value: object) -> None:
    """``ArenaModel.aliases``: a JSON list of non-empty names."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValidationError('A list of names, e.g. ["ChatGPT", "GPT-4"].')


class Provider(models.Model):
    """An OpenAI-compatible endpoint. Its API key is read from the environment variable it names;
    keys are never stored in the database."""

    name = models.CharField(max_length=100, unique=True)
    base_url = models.URLField(max_length=500, help_text="e.g. https://api.openai.com/v1")
    api_key_env = models.CharField(
        "API key environment variable",
        max_length=100,
        blank=True,
        validators=[ENV_VAR_NAME],
        help_text="Name of the environment variable holding the key (not the key itself).",
    )
    connect_timeout = models.FloatField(default=10.0, validators=[MinValueValidator(0.1)])
    read_timeout = models.FloatField(default=60.0, validators=[MinValueValidator(0.1)])
    max_retries = models.PositiveSmallIntegerField(
        default=2, help_text="Retries for connection failures before the first token only."
    )
    # Circuit breaker: consecutive failed answers; while open, the provider's models sit out.
    breaker_failures = models.PositiveIntegerField(
        default=0, help_text="Consecutive failed answers (reset by a successful one)."
    )
    breaker_open_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="While in the future, live battles skip this provider's models.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class OutputsReuse(models.TextChoices):
    """Whether a model's licence lets others reuse its outputs (to train other models, say)."""

    NOT_STATED = "", pgettext_lazy("outputs reuse", "Not stated")
    ALLOWED = "allowed", pgettext_lazy("outputs reuse", "Allowed")
    RESTRICTED = "restricted", pgettext_lazy("outputs reuse", "Allowed with restrictions")
    FORBIDDEN = "forbidden", pgettext_lazy("outputs reuse", "Not allowed")


class ArenaModel(models.Model):
    """A model that takes part in battles. A pool-only model has no provider."""

    slug = models.CharField(max_length=MODEL_SLUG_MAX, unique=True, validators=[MODEL_SLUG])
    display_name = models.CharField(max_length=200)
    organization = models.CharField(max_length=200, blank=True)
    license = models.CharField(max_length=100, blank=True)
    provider = models.ForeignKey(
        Provider, null=True, blank=True, on_delete=models.PROTECT, related_name="models"
    )
    upstream_model_id = models.CharField(
        max_length=200, blank=True, help_text="The model name the provider's API expects."
    )
    generation_params = models.JSONField(
        default=dict,
        blank=True,
        help_text='e.g. {"temperature": 0.7, "max_tokens": 1024, "top_p": 1.0}',
    )
    system_prompt = models.TextField(blank=True)
    sampling_weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.0)])
    is_active = models.BooleanField(default=True)
    is_public = models.BooleanField(
        default=True, help_text="Shown on the leaderboard and in named mode."
    )
    # Besides slug, display name and organisation: names by which an answer gives away which
    # model wrote it (arena.leaks), e.g. ["ChatGPT", "GPT-4"].
    aliases = models.JSONField(
        default=list,
        blank=True,
        validators=[aliases_valid],
        help_text='Other names that identify the model in its answers, e.g. ["ChatGPT"].',
    )
    # The catalogue a model page shows (LMArena's and ComparIA's model cards); all optional.
    outputs_reuse = models.CharField(
        max_length=20,
        choices=OutputsReuse.choices,
        blank=True,
        default=OutputsReuse.NOT_STATED,
        help_text="Whether the licence lets anyone reuse the model's outputs (e.g. to train).",
    )
    parameter_size = models.CharField(
        max_length=40, blank=True, help_text='Parameter count as published, e.g. "7B", "8x22B".'
    )
    release_date = models.DateField(null=True, blank=True)
    context_length = models.PositiveIntegerField(
        null=True, blank=True, help_text="Context window in tokens."
    )
    supports_images = models.BooleanField(
        default=False,
        help_text="Vision-capable: takes images in the prompt (OpenAI image_url content parts). "
        "Only such models are drawn for a battle whose prompt has images.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["display_name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(sampling_weight__gte=0), name="arenamodel_weight_nonnegative"
            ),
        ]

    def __str__(self) -> str:
        return self.display_name

    @property
    def is_live(self) -> bool:
        return self.provider_id is not None and bool(self.upstream_model_id)


#: Longest reason kept for a change of a model's standing (``ModelStatusChange.reason``).
STATUS_REASON_MAX = 500


class ModelStatusChange(models.Model):
    """One change of a model's standing, kept for good: retired (taken out of new battles) or
    reactivated, made public or made private.

    Written only by ``arena.services.models`` (the admin, ``add_model --activate``), never
    edited or deleted; the fairness ledger on /transparency publishes it, and reads from it
    when a model was private, so that a variant tested privately and then withdrawn shows
    with its private battles. A retirement always has a reason (the check below).
    """

    class Change(models.TextChoices):
        RETIRED = "retired", "Retired"
        REACTIVATED = "reactivated", "Reactivated"
        PUBLISHED = "published", "Made public"
        UNPUBLISHED = "unpublished", "Made private"

    model = models.ForeignKey(ArenaModel, on_delete=models.PROTECT, related_name="status_changes")
    change = models.CharField(max_length=20, choices=Change.choices)
    reason = models.CharField(max_length=STATUS_REASON_MAX, blank=True)
    # Who made it: a staff user's name, or the command (``add_model``).
    by = models.CharField(max_length=150, blank=True)
    at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(change="retired", reason=""),
                name="modelstatuschange_retired_has_reason",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.change} at {self.at:%Y-%m-%d}"


# ``Prompt.source`` of the prompts visitors type in live battles (pool prompts name their pool).
USER_PROMPT_SOURCE = "user"


class Prompt(models.Model):
    """A conversation's user turns, from the pool or typed by a visitor."""

    turns = models.JSONField(help_text="List of user turns (strings).")
    category = models.CharField(max_length=100, blank=True, db_index=True)
    language = models.CharField(max_length=20, blank=True, default="en")
    source = models.CharField(max_length=100, help_text="e.g. mt_bench, user, import:<file>")
    external_id = models.CharField(max_length=200, blank=True)
    # A visitor's prompt (source "user"): SHA-256 of its first turn as arena.prompt_text
    # normalises it, so the refit finds repeated prompts by grouping on it. Blank for pool
    # prompts, which are curated and never down-sampled.
    text_hash = models.CharField(
        max_length=64,
        blank=True,
        db_index=True,
        help_text="SHA-256 of the normalised first turn (visitors' prompts only).",
    )
    # Images sent with the first turn (PromptImage rows of the battle); the leaderboard's
    # vision category and the turns' content parts read it without a join.
    image_count = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "external_id"],
                condition=~Q(external_id=""),
                name="prompt_unique_external_id",
            ),
        ]

    def __str__(self) -> str:
        first = self.turns[0] if self.turns else ""
        return first[:80]


def completion_turns_hash(turns: list[str] | tuple[str, ...]) -> str:
    """The SHA-256 of a completion's turns (their JSON list), stored as ``turns_hash``."""
    return hashlib.sha256(json.dumps(list(turns)).encode()).hexdigest()


class Completion(models.Model):
    """A model's answers to every turn of a prompt: one of its pool variants, or a reference."""

    class Source(models.TextChoices):
        POOL = "pool", "Pool"
        # A reference model's answer to an environment submission's prompt (environment), generated
        # once from the model's provider when the pool has none.
        REFERENCE = "reference", "Reference answer"

    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="completions")
    model = models.ForeignKey(ArenaModel, on_delete=models.PROTECT, related_name="completions")
    turns = models.JSONField(help_text="List of assistant turns (strings).")
    # SHA-256 of the turns (``completion_turns_hash``): a model may have several pool answers
    # (variants) to one prompt, rotated per battle, but never the same text twice. Set by
    # whatever writes the turns: the pool import and generation, the admin's form, the
    # reference answers.
    turns_hash = models.CharField(
        max_length=64, blank=True, editable=False, help_text="SHA-256 of the turns."
    )
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.POOL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["prompt", "model", "turns_hash"],
                condition=Q(source="pool"),
                name="completion_pool_variants_differ",
            ),
            models.UniqueConstraint(
                fields=["prompt", "model"],
                condition=Q(source="reference"),
                name="completion_one_reference_answer_per_model",
            ),
        ]
        indexes = [models.Index(fields=["model", "source"])]

    def __str__(self) -> str:
        return f"{self.model} on prompt {self.prompt_id}"


class Battle(models.Model):
    """Two models answering the same prompt, shown side by side."""

    class Mode(models.TextChoices):
        ANONYMOUS = "anonymous", "Anonymous"
        NAMED = "named", "Named (side by side)"

    class Source(models.TextChoices):
        POOL = "pool", "Pool"
        LIVE = "live", "Live"
        # A pool prompt answered live by a live model against an established model's stored
        # pool answer: how a new live model meets the pool's models (arena.services.bridge).
        MIXED = "mixed", "Mixed (pool prompt, one live answer)"
        IMPORT = "import", "Imported"
        # A trainer's completions judged for rewards (environment); never on the public leaderboard.
        ENV = "env", "Environment"

    class State(models.TextChoices):
        STREAMING = "streaming", "Streaming"
        READY = "ready", "Ready to vote"
        VOTED = "voted", "Voted"
        ABORTED = "aborted", "Aborted"
        ERRORED = "errored", "Errored"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    mode = models.CharField(max_length=20, choices=Mode.choices, default=Mode.ANONYMOUS)
    source = models.CharField(max_length=20, choices=Source.choices)
    model_a = models.ForeignKey(ArenaModel, on_delete=models.PROTECT, related_name="+")
    model_b = models.ForeignKey(ArenaModel, on_delete=models.PROTECT, related_name="+")
    prompt = models.ForeignKey(
        Prompt, null=True, blank=True, on_delete=models.PROTECT, related_name="battles"
    )
    # The visitor's session as arena.identity.session_hash keys it: never the session
    # key itself, which would let a reader of this table act as the visitor.
    session_hash = models.CharField(
        max_length=64,
        db_index=True,
        blank=True,
        help_text="Keyed hash (HMAC-SHA256) of the visitor's session key; never the key.",
    )
    state = models.CharField(max_length=20, choices=State.choices, db_index=True)
    # A mixed battle's side ("a" or "b") whose model answers live; the other side shows that
    # model's stored pool answer. Blank for every other source.
    live_side = models.CharField(
        max_length=1,
        blank=True,
        choices=[("a", "A"), ("b", "B")],
        help_text="Mixed battles: the side answered live.",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(source="mixed", live_side__in=["a", "b"])
                | (~Q(source="mixed") & Q(live_side="")),
                name="battle_live_side_iff_mixed",
            ),
            # An environment battle may set two completions of one run against each other: both
            # sides then stand for the run's model, and ``EnvBattle`` says which completion is where.
            models.CheckConstraint(
                condition=~Q(model_a=models.F("model_b")) | Q(source="env"),
                name="battle_two_different_models",
            ),
        ]

    def __str__(self) -> str:
        return f"Battle {self.id}"


class BattleMessage(models.Model):
    """One side's answer to one user turn of a battle."""

    class Side(models.TextChoices):
        A = "a", "A"
        B = "b", "B"

    class Status(models.TextChoices):
        STREAMING = "streaming", "Streaming"
        DONE = "done", "Done"
        ABORTED = "aborted", "Aborted"
        ERROR = "error", "Error"

    battle = models.ForeignKey(Battle, on_delete=models.CASCADE, related_name="messages")
    side = models.CharField(max_length=1, choices=Side.choices)
    turn = models.PositiveSmallIntegerField(help_text="0-based user turn this answers.")
    user_content = models.TextField()
    content = models.TextField(blank=True)
    # Counted when the answer is saved, so that a vote only sums them; null for an answer saved
    # before they were kept, or still streaming.
    style = models.JSONField(
        null=True,
        blank=True,
        help_text="Style counts of the answer (answer_style.style_counts): tokens, headers, lists, bold.",
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DONE)
    # Whether the answer names its own model or organisation where the user's turns did not
    # (arena.leaks), checked when the answer is saved; a vote on the battle is then flagged.
    names_model = models.BooleanField(default=False)
    token_count = models.PositiveIntegerField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    time_to_first_token_ms = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True, help_text="Total time.")
    finish_reason = models.CharField(max_length=40, blank=True)
    error = models.TextField(blank=True)
    # A regenerated answer supersedes the earlier one, which stays on record.
    superseded_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["turn", "side", "created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["battle", "side", "turn"],
                condition=Q(superseded_at__isnull=True),
                name="battlemessage_one_current_per_side_turn",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.battle_id} turn {self.turn} side {self.side}"


class Vote(models.Model):
    """A visitor's verdict on a battle. One per battle; votes are never deleted (a deleted
    account's votes stay, their ``account`` emptied)."""

    class Winner(models.TextChoices):
        MODEL_A = "model_a", "A is better"
        MODEL_B = "model_b", "B is better"
        TIE = "tie", "Tie"
        BOTH_BAD = "tie (bothbad)", "Both are bad"

    battle = models.OneToOneField(Battle, on_delete=models.PROTECT, related_name="vote")
    winner = models.CharField(max_length=20, choices=Winner.choices)
    voter_id = models.CharField(max_length=64, db_index=True, help_text="Pseudonymous.")
    ip_hash = models.CharField(max_length=64, blank=True, help_text="Salted hash; never the IP.")
    user_agent_class = models.CharField(max_length=20, blank=True)
    flagged = models.BooleanField(default=False, db_index=True)
    flags = models.JSONField(default=list, blank=True)
    # Reasons staff cleared (arena.services.flags): a later run never sets them again.
    flags_cleared = models.JSONField(default=list, blank=True)
    style = models.JSONField(
        default=dict,
        blank=True,
        help_text="Style counts of both sides at vote time, as public-arena conv_metadata.",
    )
    # The language the visitor's page was in (``fr``, ``en``...), not the prompt's language.
    interface_language = models.CharField(max_length=INTERFACE_LANGUAGE_MAX, blank=True)
    # The visitor ran at least one code block of each answer in the browser before voting.
    code_ran = models.BooleanField(default=False)
    # The account the visitor was signed in to when voting (docs/accounts.md); None for a vote
    # cast without one, and again once that account is deleted: the vote itself stays.
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        db_index=True,
        related_name="arena_votes",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(winner__in=["model_a", "model_b", "tie", "tie (bothbad)"]),
                name="vote_winner_in_vocabulary",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.winner} on {self.battle_id}"


class BattleShare(models.Model):
    """A public page for one voted battle's outcome, made by the visitor who voted.

    Opened by anyone holding its token; it names the two models and the verdict, and shows the
    prompt only when the voter chose to (``include_prompt``). Model answers are never shown.
    """

    token = models.CharField(max_length=32, unique=True)
    battle = models.ForeignKey(Battle, on_delete=models.CASCADE, related_name="shares")
    include_prompt = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["battle", "include_prompt"], name="one_share_per_battle_and_choice"
            ),
        ]

    def __str__(self) -> str:
        return f"share {self.token} of {self.battle_id}"


class ReactionTag(models.Model):
    """A reason a visitor may give with a thumbs up or down on an answer; staff edit the list.

    A tag belongs to one polarity: an "up" tag (useful, complete...) goes with a liked answer,
    a "down" tag (incorrect, superficial...) with a disliked one. A retired tag is made
    inactive, not deleted: reactions that carry it keep their meaning in exports.
    """

    class Polarity(models.TextChoices):
        UP = "up", "With a thumbs up"
        DOWN = "down", "With a thumbs down"

    slug = models.SlugField(max_length=40, unique=True, help_text="Stored with reactions.")
    label = models.CharField(max_length=80, help_text="What visitors read.")
    polarity = models.CharField(max_length=4, choices=Polarity.choices)
    position = models.PositiveSmallIntegerField(default=0, help_text="Order on the page.")
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["polarity", "position", "slug"]

    def __str__(self) -> str:
        return f"{self.label} ({self.polarity})"


class Reaction(models.Model):
    """A visitor's thumbs up or down on one side's answers in a battle, with reason tags.

    One per battle and side, changed in place while the visitor changes their mind.
    ``after_reveal`` says the visitor already knew the names (the reaction came after the
    vote), so that whatever ranks by reactions can leave those out.
    """

    battle = models.ForeignKey(Battle, on_delete=models.CASCADE, related_name="reactions")
    side = models.CharField(max_length=1, choices=BattleMessage.Side.choices)
    liked = models.BooleanField()
    tags = models.JSONField(default=list, blank=True, help_text="ReactionTag slugs.")
    after_reveal = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["battle", "side"], name="one_reaction_per_side"),
            models.CheckConstraint(condition=Q(side__in=["a", "b"]), name="reaction_side_a_or_b"),
        ]

    def __str__(self) -> str:
        return f"{'up' if self.liked else 'down'} on {self.side} of {self.battle_id}"


class TermsAcceptance(models.Model):
    """A visitor's acceptance of the terms (votes and prompts may be published)."""

    voter_id = models.CharField(max_length=64, db_index=True)
    terms_version = models.CharField(max_length=40)
    ip_hash = models.CharField(max_length=64, blank=True)
    accepted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["voter_id", "terms_version"], name="terms_once_per_voter_and_version"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.voter_id} accepted {self.terms_version}"


class LiveLimits(models.Model):
    """Admin-editable limits of live battles; a blank field falls back to the setting.

    One row at most (pk 1), read through ``arena.selectors.live_limits``.
    """

    max_prompt_chars = models.PositiveIntegerField(
        null=True, blank=True, help_text="Characters per prompt (ARENA_LIVE_MAX_PROMPT_CHARS)."
    )
    max_turns = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="User turns per battle (ARENA_LIVE_MAX_TURNS)."
    )
    max_output_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Output tokens per model and turn (ARENA_LIVE_MAX_OUTPUT_TOKENS).",
    )
    max_concurrent_battles = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Battles streaming at once per session (ARENA_LIVE_MAX_CONCURRENT_BATTLES).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "live battle limits"
        verbose_name_plural = "live battle limits"
        constraints = [models.CheckConstraint(condition=Q(pk=1), name="livelimits_singleton")]

    def __str__(self) -> str:
        return "Live battle limits"


# The machine APIs' bearer tokens (arena.tokens): the environment API's (its runs, submissions and
# rewards are the ``environment`` app's models) and the exports'.


class ApiToken(models.Model):
    """A bearer token for the machine APIs. Only its SHA-256 is stored; it is shown once."""

    class Scope(models.TextChoices):
        ENV = "env", "Environment: runs, submissions, rewards"
        EXPORT = "export", "Exports"

    name = models.CharField(max_length=100)
    prefix = models.CharField(
        max_length=16, db_index=True, help_text="The token's first characters, to recognise it."
    )
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the token.")
    scopes = models.JSONField(default=list, help_text='e.g. ["env", "export"]')
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class RefusedPrompt(models.Model):
    """A live prompt the moderation hook refused (``arena.live.moderation``) before any model
    saw it. Kept as its SHA-256, not its text: a refused prompt is in no battle and is never
    published; the hash still shows one text sent again and again."""

    class Checker(models.TextChoices):
        BLOCKLIST = "blocklist", "Local blocklist"
        OPENAI = "openai", "OpenAI moderation endpoint"
        IMAGE_POLICY = "image_policy", "Image policy (ARENA_IMAGE_POLICY)"

    session_hash = models.CharField(max_length=64, blank=True, db_index=True)
    ip_hash = models.CharField(max_length=64, blank=True, db_index=True)
    prompt_sha256 = models.CharField(max_length=64)
    prompt_chars = models.PositiveIntegerField()
    checker = models.CharField(max_length=20, choices=Checker.choices)
    reason = models.CharField(
        max_length=300, help_text="The blocklist entry, or the moderation categories flagged."
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Refused prompt {self.prompt_sha256[:12]} ({self.get_checker_display()})"


def prompt_image_name(instance: "PromptImage", filename: str) -> str:
    """The stored name: the row's random id and the re-encoded format's extension, never the
    visitor's file name."""
    return f"prompt-images/{instance.id.hex}{filename[filename.rfind('.') :]}"


class PromptImage(models.Model):
    """An image a visitor attached to a live prompt, validated and re-encoded before it is
    stored (``arena.live.images.image_upload``); the stored file holds no metadata.

    Uploaded first, owned by the uploading session (its hash), then attached to the battle whose
    first turn it was sent with (``battle``, and that battle's ``prompt``; null until then). A
    pool prompt's image (``import_pool``) has a prompt and no battle. The id is random (a UUID4), and
    the file is served by it to whoever holds it (``arena.views.prompt_image``).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session_hash = models.CharField(max_length=64, db_index=True)
    battle = models.ForeignKey(
        Battle, null=True, blank=True, on_delete=models.CASCADE, related_name="images"
    )
    # The prompt the image belongs to: a live battle's own prompt once the battle takes it, or
    # a pool prompt's image (``import_pool``), which has no battle. Exports read images by it.
    prompt = models.ForeignKey(
        Prompt,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="images",
        db_index=False,  # the (prompt, position) index below serves it
    )
    position = models.PositiveSmallIntegerField(default=0, help_text="Order within its prompt.")
    file = models.FileField(upload_to=prompt_image_name, max_length=200)
    sha256 = models.CharField(max_length=64, help_text="Of the stored (re-encoded) bytes.")
    mime = models.CharField(max_length=40)
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    size = models.PositiveIntegerField(help_text="Stored bytes.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["battle_id", "position", "created_at"]
        indexes = [models.Index(fields=["prompt", "position"])]

    def __str__(self) -> str:
        return f"Image {self.id.hex[:12]} ({self.width}x{self.height} {self.mime})"
