import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.utils import timezone

from arena.exports import ExportStats, export_rows, voted_battles
from arena.models import BattleMessage, Vote
from arena.tests.factories import ArenaModelFactory
from ratings.engine.api import rate
from ratings.engine.data import flatten_conv_metadata
from ratings.engine.io import read_battles
from ratings.selectors import rating_battles

pytestmark = pytest.mark.django_db

URL = "/api/exports/votes"


@pytest.fixture
def pair(db):
    return ArenaModelFactory(slug="owl-7b"), ArenaModelFactory(slug="lark-70b")


def rows(fmt, **filters):
    stats = ExportStats()
    return list(export_rows(voted_battles(**filters), fmt, stats)), stats


def export(fmt, *args, tmp_path=None):
    out, err = StringIO(), StringIO()
    call_command("export_votes", f"--format={fmt}", *args, stdout=out, stderr=err)
    return [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_arena_export_rates_exactly_as_the_leaderboard_does(rated_models, tmp_path, suffix):
    path = tmp_path / f"votes{suffix}"
    call_command("export_votes", "--format=arena", f"--output={path}", stderr=StringIO())
    from_export = rate(read_battles(path), ci="sandwich", with_online_elo=False)
    site = rating_battles()
    site = flatten_conv_metadata(site[["model_a", "model_b", "winner", "conv_metadata"]])
    from_site = rate(site, ci="sandwich", with_online_elo=False)
    ratings = {m.model: m.rating for m in from_export.models}
    assert ratings == pytest.approx({m.model: m.rating for m in from_site.models})
    assert sorted(ratings, key=ratings.get, reverse=True) == ["alpha", "beta", "gamma"]
    assert from_export.style_coefficients == pytest.approx(from_site.style_coefficients)


def test_an_arena_row_carries_both_conversations_the_vote_and_a_hashed_judge(make_vote, pair):
    vote = make_vote(*pair, "tie (bothbad)", turns=2, answers=("A says", "B says"))
    (row,), _ = export("arena")
    assert row["question_id"] == vote.battle_id.hex
    assert (row["model_a"], row["model_b"], row["winner"]) == ("owl-7b", "lark-70b", vote.winner)
    assert row["turn"] == 2 and row["anony"] is True
    assert row["conversation_a"] == [
        {"role": "user", "content": "Question 1?"},
        {"role": "assistant", "content": "A says"},
        {"role": "user", "content": "Follow-up 1"},
        {"role": "assistant", "content": "A says"},
    ]
    assert [m["content"] for m in row["conversation_b"] if m["role"] == "assistant"] == [
        "B says",
        "B says",
    ]
    assert row["conv_metadata"] == vote.style
    assert row["judge"].startswith("judge-") and vote.voter_id not in json.dumps(row)


def test_trl_rows_put_the_winners_answers_in_chosen(make_vote, pair):
    make_vote(*pair, "model_b", turns=2, answers=("loser text", "winner text"))
    (row,), _ = rows("trl")
    assert row["prompt"] == [{"role": "user", "content": "Question 1?"}]
    assert row["chosen"] == [
        {"role": "assistant", "content": "winner text"},
        {"role": "user", "content": "Follow-up 1"},
        {"role": "assistant", "content": "winner text"},
    ]
    assert [m["content"] for m in row["rejected"] if m["role"] == "assistant"] == ["loser text"] * 2


def test_pairwise_formats_skip_ties_and_both_bad_and_say_so(make_vote, pair):
    make_vote(*pair, "model_a")
    make_vote(*pair, "tie")
    make_vote(*pair, "tie (bothbad)")
    for fmt in ("trl", "openai", "hh-rlhf"):
        written, stats = rows(fmt)
        assert len(written) == 1 and stats.written == 1
        assert sum(stats.skipped.values()) == 2
    written, stats = rows("arena")
    assert [r["winner"] for r in written] == ["model_a", "tie", "tie (bothbad)"]


def test_openai_rows_are_one_turn_preference_pairs_and_multi_turn_battles_are_skipped(
    make_vote, pair
):
    make_vote(*pair, "model_a", answers=("good", "bad"))
    make_vote(*pair, "model_a", turns=3)
    written, stats = rows("openai")
    assert written == [
        {
            "input": {"messages": [{"role": "user", "content": "Question 1?"}]},
            "preferred_output": [{"role": "assistant", "content": "good"}],
            "non_preferred_output": [{"role": "assistant", "content": "bad"}],
        }
    ]
    assert stats.skipped == {"multi-turn battles (OpenAI's outputs are one message)": 1}


def test_hh_rlhf_rows_are_human_assistant_transcripts(make_vote, pair):
    make_vote(*pair, "model_a", turns=2, answers=("yes", "no"))
    (row,), _ = rows("hh-rlhf")
    assert row == {
        "chosen": "\n\nHuman: Question 1?\n\nAssistant: yes\n\nHuman: Follow-up 1\n\nAssistant: yes",
        "rejected": "\n\nHuman: Question 1?\n\nAssistant: no\n\nHuman: Follow-up 1\n\nAssistant: no",
    }


def test_a_vote_for_an_empty_answer_is_not_a_training_pair(make_vote, pair):
    make_vote(*pair, "model_a", answers=("  ", "something"))
    make_vote(*pair, "model_b", answers=("  ", "something"))
    written, stats = rows("trl")
    assert len(written) == 1 and written[0]["rejected"][0]["content"] == "  "
    assert stats.skipped == {"votes for an empty answer": 1}


def test_a_regenerated_answer_is_exported_not_the_one_it_replaced(make_vote, pair):
    vote = make_vote(*pair, "model_a", answers=("replacement", "other"))
    BattleMessage.objects.create(
        battle=vote.battle,
        side="a",
        turn=0,
        user_content="Question 1?",
        content="superseded draft",
        superseded_at=timezone.now(),
    )
    (row,), _ = rows("hh-rlhf")
    assert "replacement" in row["chosen"] and "superseded" not in row["chosen"]


def test_named_and_flagged_votes_are_left_out_unless_asked_for(make_vote, pair):
    make_vote(*pair, "model_a")
    make_vote(*pair, "model_a", mode="named")
    make_vote(*pair, "model_a", flagged=True)
    assert len(export("arena")[0]) == 1
    named = export("arena", "--include-named")[0]
    assert len(named) == 2 and {r["anony"] for r in named} == {True, False}
    assert len(export("arena", "--include-named", "--include-flagged")[0]) == 3


def test_since_and_until_select_by_the_time_of_the_vote(make_vote, pair):
    old, new = make_vote(*pair, "model_a"), make_vote(*pair, "model_b")
    Vote.objects.filter(pk=old.pk).update(created_at=datetime(2026, 1, 5, tzinfo=UTC))
    Vote.objects.filter(pk=new.pk).update(created_at=datetime(2026, 3, 1, tzinfo=UTC))
    assert [r["winner"] for r in export("arena", "--since=2026-02-01")[0]] == ["model_b"]
    assert [r["winner"] for r in export("arena", "--until=2026-02-01")[0]] == ["model_a"]
    both = export("arena", "--since=2026-01-05", "--until=2026-03-01T00:00:01")[0]
    assert [r["winner"] for r in both] == ["model_a", "model_b"]  # oldest first


def test_the_command_reports_what_it_skipped_and_refuses_a_bad_date(make_vote, pair):
    make_vote(*pair, "tie")
    written, summary = export("trl")
    assert written == [] and "1 ties and both-bad votes" in summary
    with pytest.raises(CommandError, match="--since"):
        call_command("export_votes", "--format=trl", "--since=2026-02-30", stderr=StringIO())


def test_a_failed_export_leaves_no_file_behind(make_vote, pair, tmp_path, monkeypatch):
    make_vote(*pair, "model_a")
    target = tmp_path / "votes.jsonl"

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("arena.management.commands.export_votes.write_jsonl", explode)
    with pytest.raises(RuntimeError):
        call_command("export_votes", "--format=trl", f"--output={target}", stderr=StringIO())
    assert list(tmp_path.iterdir()) == []


def test_the_http_export_is_for_staff_only(client, django_user_model, make_vote, pair):
    make_vote(*pair, "model_a")
    response = client.get(URL, {"format": "trl"})
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    client.force_login(django_user_model.objects.create_user("visitor", password="x"))
    assert client.get(URL, {"format": "trl"}).status_code == 403
    staff = django_user_model.objects.create_user("helper", password="x", is_staff=True)
    client.force_login(staff)  # staff, but not allowed to see votes
    assert client.get(URL, {"format": "trl"}).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_vote"))
    client.force_login(django_user_model.objects.get(pk=staff.pk))
    assert client.get(URL, {"format": "trl"}).status_code == 200


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
def test_the_http_export_streams_jsonl_and_names_a_bad_parameter(admin_client, make_vote, pair):
    make_vote(*pair, "model_b", answers=("a", "b"))
    response = admin_client.get(URL, {"format": "hh-rlhf"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert 'filename="arena-votes-hh-rlhf.jsonl"' in response["Content-Disposition"]
    assert response.is_async  # sent as it is read under ASGI, not collected first
    body = b"".join(response).decode()
    assert [json.loads(line)["chosen"] for line in body.splitlines()] == [
        "\n\nHuman: Question 1?\n\nAssistant: b"
    ]
    for params, field in (
        ({}, "format"),
        ({"format": "csv"}, "format"),
        ({"format": "trl", "since": "yesterday"}, "since"),
        ({"format": "trl", "include_named": "maybe"}, "include_named"),
    ):
        bad = admin_client.get(URL, params)
        assert bad.status_code == 400 and bad.json()["error"]["field"] == field


def test_the_votes_admin_links_every_export_format(admin_client, make_vote, pair):
    make_vote(*pair, "model_a")
    page = admin_client.get(f"/{settings.ADMIN_URL}arena/vote/").content.decode()
    for fmt in ("arena", "trl", "openai", "hh-rlhf"):
        assert f"/api/exports/votes?format={fmt}" in page


@pytest.mark.django_db(transaction=True)
def test_the_http_export_streams_under_the_asgi_server(asgi_server, make_vote, pair):
    import urllib.request

    from django.contrib.auth import get_user_model
    from django.test import Client

    for winner in ("model_a", "model_b", "tie"):
        make_vote(*pair, winner)
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="x"))
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    request = urllib.request.Request(
        f"{asgi_server.url}{URL}?format=arena", headers={"Cookie": cookie}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Transfer-Encoding"] == "chunked"  # streamed, no length known
        lines = response.read().decode().splitlines()
    assert [json.loads(line)["winner"] for line in lines] == ["model_a", "model_b", "tie"]
