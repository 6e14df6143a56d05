"""The arena as a human environment, end to end, against PostgreSQL.

A simulated trainer creates a run and submits groups through the HTTP API (/api/env/v1/);
simulated visitors (browser-like sessions) accept the terms, ask for battles and vote through the
site's HTTP battle and vote flow, judging the trainer's answers mixed with ordinary pool battles
of a small real pool (MT-bench first turns); every task runs in-process as it would on a worker.
The trainer reads the rewards back through the cursor and a loopback webhook receiver checks every
delivery's signature. Env votes never reach the leaderboard snapshot or the exports.
"""

import re
from collections import defaultdict

import pytest
from django.test import Client

from arena.models import Battle, Vote
from arena.selectors import votes_for_export
from arena.services.demo import DEMO_DATA_DIR, _pool_lines
from arena.services.pool import PoolLine, pool_write
from arena.tokens import token_create
from environment.models import EnvBattle, EnvCompletion, EnvRun
from environment.tests.env_helpers import eager_tasks
from environment.tests.outbound_helpers import LOOPBACK_ALLOWED
from environment.tests.webhook_receiver import WebhookReceiver
from ratings.services import snapshot_refresh

__all__ = ["eager_tasks"]  # a fixture, used by name

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

POOL_MODELS = ("gpt-4", "claude-v1", "vicuna-13b-v1.3", "llama-13b")
REFERENCE = "gpt-4"
SHARE = 0.4
VOTES_PER_COMPLETION = 4
QUALITY = re.compile(r"\[quality (\d)\]")


def load_small_real_pool(n_prompts: int = 8) -> list[str]:
    """The first turn of ``n_prompts`` MT-bench questions, answered by four of the demo's
    models (the demo's real answers); returns the questions."""
    lines = [line for line in _pool_lines(DEMO_DATA_DIR) if line.model in POOL_MODELS]
    prompt_ids = sorted({line.prompt_id for line in lines}, key=int)[:n_prompts]
    first_turns = [
        PoolLine(
            line_no=0,
            prompt=line.prompt[:1],
            model=line.model,
            completion=line.completion[:1],
            category=line.category,
            language="en",
            prompt_id=f"{line.prompt_id}-t1",
        )
        for line in lines
        if line.prompt_id in prompt_ids
    ]
    pool_write(lines=first_turns, source="mt_bench_first_turns")
    return sorted({line.prompt[0] for line in first_turns})


class Trainer:
    def __init__(self) -> None:
        _, raw = token_create(name="trainer", scopes=["env"])
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")

    def post(self, path: str, body: object) -> dict:
        response = self.client.post(
            f"/api/env/v1{path}", data=body, content_type="application/json"
        )
        assert response.status_code in (200, 201), response.content
        return response.json()

    def rewards(self, run_id: str, cursor: int, limit: int = 7) -> list[dict]:
        """Every record changed after ``cursor``, following the cursor page by page."""
        records: list[dict] = []
        while True:
            response = self.client.get(
                f"/api/env/v1/runs/{run_id}/rewards", {"cursor": cursor, "limit": limit}
            )
            assert response.status_code == 200, response.content
            page = response.json()
            records += page["records"]
            if not page["records"]:
                return records
            cursor = page["next_cursor"]
            self.cursor = cursor


class Visitor:
    """A browser-like session: it opens the page, accepts the terms, asks for battles and votes
    for the answer it prefers (a submitted answer is labelled with its quality; any other
    answer ranks between the second and third quality)."""

    def __init__(self, n: int) -> None:
        self.client = Client(HTTP_USER_AGENT=f"Mozilla/5.0 (X11; Linux x86_64) Visitor {n}")
        assert self.client.get("/").status_code == 200
        accepted = self.client.post(
            "/api/terms", data={"accept": True}, content_type="application/json"
        )
        assert accepted.status_code == 200, accepted.content

    @staticmethod
    def rank(text: str) -> float:
        found = QUALITY.search(text)
        return float(found.group(1)) if found else 2.5

    def battle_and_vote(self) -> dict:
        response = self.client.post("/api/battles", data="{}", content_type="application/json")
        assert response.status_code == 201, response.content
        battle = response.json()
        assert battle["source"] == "pool" and battle["models"] is None
        turn = battle["turns"][0]
        a, b = self.rank(turn["a"]["content"]), self.rank(turn["b"]["content"])
        winner = "model_a" if a > b else "model_b" if b > a else "tie"
        voted = self.client.post(
            f"/api/battles/{battle['id']}/vote",
            data={"winner": winner},
            content_type="application/json",
        )
        assert voted.status_code == 201, voted.content
        return voted.json()


def test_a_trainer_gets_human_rewards_back_through_the_cursor_and_the_webhook(
    eager_tasks, settings
):
    settings.RATINGS_REFRESH_ON_VOTE = False  # the leaderboard is refreshed once, at the end
    # The six visitors are different people on one address (the test client's): one source,
    # whose votes on a completion would count once and whose rated pool votes on a model would
    # be capped (the count below is of every pool vote). The bound has its own tests: off here.
    settings.RATINGS_SOURCE_MAX_SHARE = 0
    # The receiver listens on loopback, which the webhook guard refuses unless allowed.
    for name, value in LOOPBACK_ALLOWED.items():
        setattr(settings, name, value)
    questions = load_small_real_pool()
    trainer = Trainer()
    with WebhookReceiver() as receiver:
        run = trainer.post(
            "/runs",
            {
                "name": "grpo-step-1",
                "references": [REFERENCE],
                "votes_per_completion": VOTES_PER_COMPLETION,
                "share": SHARE,
                "webhook_url": receiver.url,
            },
        )
        run_id, secret = run["id"], run["webhook_secret"]
        # Three groups of three: two prompts from the pool (the reference answers from the
        # pool), one conversation (no reference answer: the group meets itself).
        prompts: list[object] = [
            questions[0],
            questions[1],
            [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Say something kind."},
            ],
        ]
        quality: dict[str, int] = {}
        group_of: dict[str, str] = {}
        for g, prompt in enumerate(prompts):
            body = {
                "idempotency_key": f"step-1-group-{g}",
                "prompt": prompt,
                "completions": [
                    {"text": f"Answer {g}.{q} [quality {q}]", "meta": {"group": g, "q": q}}
                    for q in (1, 2, 3)
                ],
            }
            created = trainer.post(f"/runs/{run_id}/submissions", body)
            replayed = trainer.post(f"/runs/{run_id}/submissions", body)
            assert replayed == created  # the same idempotency key: the same ids, nothing new
            for q, completion in zip((1, 2, 3), created["completions"], strict=True):
                quality[completion["id"]] = q
                group_of[completion["id"]] = created["id"]
        assert EnvCompletion.objects.count() == 9

        # The trainer reads the feed as votes arrive: first the nine pending records.
        trainer.cursor = 0
        seen: dict[str, dict] = {}
        deliveries_per_record: dict[str, int] = defaultdict(int)

        def read_feed() -> None:
            for record in trainer.rewards(run_id, trainer.cursor):
                previous = seen.get(record["completion_id"])
                assert previous != record  # delivered again only when it changed
                seen[record["completion_id"]] = record
                deliveries_per_record[record["completion_id"]] += 1

        read_feed()
        assert len(seen) == 9 and {r["status"] for r in seen.values()} == {"pending"}

        visitors = [Visitor(n) for n in range(6)]
        run_model = EnvRun.objects.get(pk=run_id).model
        started = Battle.objects.filter(created_at__gte=EnvRun.objects.get(pk=run_id).created_at)
        for step in range(400):
            revealed = visitors[step % len(visitors)].battle_and_vote()
            env = EnvBattle.objects.filter(run_id=run_id).count()
            assert env <= SHARE * started.count()  # the share holds at every moment
            if revealed["models"]["a"]["slug"] == run_model.slug:
                assert revealed["models"]["a"]["name"] == "Submitted answer"
            if step % 10 == 9:
                read_feed()
            if not EnvCompletion.objects.filter(status="pending").exists():
                break
        read_feed()

        # Every completion got its votes; the run took its share, no more.
        env_battles = EnvBattle.objects.filter(run_id=run_id).count()
        total = started.count()
        assert env_battles <= SHARE * total and env_battles >= 0.8 * SHARE * total - 1
        assert Battle.objects.filter(source="pool").exists()
        assert len(seen) == 9
        for completion_id, record in seen.items():
            assert record["status"] == "complete", record
            assert record["votes"] >= VOTES_PER_COMPLETION
            assert record["votes"] == (
                record["wins"] + record["losses"] + record["ties"] + record["both_bad"]
            )
            assert record["meta"]["q"] == quality[completion_id]
            assert record["score_low"] <= record["score"] <= record["score_high"]
        # The counts are those of the votes cast.
        for completion_id, record in seen.items():
            votes = Vote.objects.filter(battle__env__completion_a_id=completion_id).count()
            votes += Vote.objects.filter(battle__env__completion_b_id=completion_id).count()
            assert record["votes"] == votes
        # Within each group: best quality, best score; worst quality, worst score; mean 0.
        groups: dict[str, list[dict]] = defaultdict(list)
        for completion_id, record in seen.items():
            groups[group_of[completion_id]].append(record)
        for records in groups.values():
            by_quality = sorted(records, key=lambda r: r["meta"]["q"])
            assert by_quality[0]["score"] == min(r["score"] for r in records)
            assert by_quality[-1]["score"] == max(r["score"] for r in records)
            assert abs(sum(r["score"] for r in records)) < 1e-3
        # The pool prompts' groups also met the reference model's pool answer.
        reference_battles = EnvBattle.objects.filter(run_id=run_id, completion_a__isnull=True)
        reference_battles |= EnvBattle.objects.filter(run_id=run_id, completion_b__isnull=True)
        assert reference_battles.exists()
        assert {b.submission.messages[-1]["content"] for b in reference_battles} <= set(
            questions[:2]
        )

        # The whole feed read again from 0: each record once, at its latest state.
        again = trainer.rewards(run_id, 0, limit=4)
        assert len(again) == 9 and {r["completion_id"]: r for r in again} == seen

        # The webhook: every delivery signed; the records, applied in order, end as the feed.
        assert receiver.deliveries
        from_webhook: dict[str, dict] = {}
        ids = []
        for delivery in receiver.deliveries:
            assert delivery.signed_by(secret)
            body = delivery.payload
            assert body["run_id"] == run_id
            assert delivery.headers["x-arena-delivery"] == body["id"]
            ids.append(body["id"])
            for record in body["records"]:
                from_webhook[record["completion_id"]] = record
        assert from_webhook == seen
        assert len(ids) == len(set(ids))
        assert EnvRun.objects.get(pk=run_id).webhook_seq == EnvRun.objects.get(pk=run_id).reward_seq

    # Env votes are the trainer's: neither the leaderboard nor the exports see them.
    env_votes = Vote.objects.filter(battle__source="env").count()
    pool_votes = Vote.objects.exclude(battle__source="env").count()
    assert env_votes > 0 and pool_votes > 0
    snapshot = snapshot_refresh(force=True).snapshot
    assert snapshot is not None and snapshot.n_votes == pool_votes
    assert set(snapshot.payload["models"]) <= set(POOL_MODELS)
    exported = list(votes_for_export())
    assert len(exported) == pool_votes
    assert all(v.battle.source != "env" for v in exported)
