import json
from datetime import UTC, datetime
from io import StringIO

import pyarrow.parquet as pq
import pytest
import yaml
from django.conf import settings
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from arena.exports import (
    ExportStats,
    arrow_schema,
    export_rows,
    to_arena,
    voted_battles,
    write_parquet,
)
from arena.models import BattleMessage, Reaction, Vote
from arena.tests.factories import ArenaModelFactory

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

    monkeypatch.setattr("arena.management.commands.export_votes.write_jsonl_bytes", explode)
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
    for fmt in ("arena", "trl", "openai", "hh-rlhf", "kto"):
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


# --- KTO, filters, folders with a dataset card, streaming ------------------------------------


def test_kto_rows_label_the_chosen_answer_true_and_both_bad_answers_false(make_vote, pair):
    make_vote(*pair, "model_b", turns=2, answers=("loser", "winner"))
    make_vote(*pair, "tie (bothbad)", answers=("bad a", "bad b"))
    make_vote(*pair, "tie")
    written, stats = rows("kto")
    assert [(r["completion"][0]["content"], r["label"]) for r in written] == [
        ("winner", True),
        ("loser", False),
        ("bad a", False),
        ("bad b", False),
    ]
    # Multi-turn: the prompt is the first user turn, follow-ups sit inside the completion.
    assert written[0]["prompt"] == [{"role": "user", "content": "Question 1?"}]
    assert written[0]["completion"] == [
        {"role": "assistant", "content": "winner"},
        {"role": "user", "content": "Follow-up 1"},
        {"role": "assistant", "content": "winner"},
    ]
    assert written[2]["completion"] == [{"role": "assistant", "content": "bad a"}]
    assert (stats.written, stats.votes) == (4, 2)
    assert stats.skipped == {"ties (no verdict on either answer)": 1}
    assert (
        stats.summary() == "4 written from 2 votes; skipped: 1 ties (no verdict on either answer)"
    )


def test_a_kto_vote_for_an_empty_answer_gives_no_rows(make_vote, pair):
    make_vote(*pair, "model_a", answers=(" ", "something"))
    written, stats = rows("kto")
    assert written == [] and stats.skipped == {"votes for an empty answer": 1}


@pytest.fixture
def models3(db):
    return (
        ArenaModelFactory(slug="owl-7b"),
        ArenaModelFactory(slug="lark-70b"),
        ArenaModelFactory(slug="wren-1b"),
    )


def test_filters_keep_battles_of_a_model_on_either_side_a_category_and_a_language(
    make_vote, models3
):
    owl, lark, wren = models3
    make_vote(owl, lark, category="writing", language="en", prompt="owl-lark")
    make_vote(lark, wren, category="coding", language="de", prompt="lark-wren")
    make_vote(wren, owl, category="coding", language="en", prompt="wren-owl")

    def prompts(*args):
        return [r["conversation_a"][0]["content"] for r in export("arena", *args)[0]]

    assert prompts("--model=owl-7b") == ["owl-lark", "wren-owl"]  # model_a or model_b
    assert prompts("--model=owl-7b", "--model=wren-1b") == ["owl-lark", "lark-wren", "wren-owl"]
    assert prompts("--category=coding") == ["lark-wren", "wren-owl"]
    assert prompts("--language=en") == ["owl-lark", "wren-owl"]
    assert prompts("--language=en", "--category=coding", "--model=wren-1b") == ["wren-owl"]
    assert prompts("--language=fr") == []


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
def test_the_http_export_filters_like_the_command(admin_client, make_vote, models3):
    owl, lark, wren = models3
    make_vote(owl, lark, "model_a", category="writing", language="en", prompt="owl-lark")
    make_vote(lark, wren, "model_b", category="coding", language="de", prompt="lark-wren")
    make_vote(wren, owl, "tie (bothbad)", category="coding", language="en", prompt="wren-owl")

    def prompts(query):
        response = admin_client.get(f"{URL}?{query}")
        assert response.status_code == 200
        lines = b"".join(response).decode().splitlines()
        return [(r["prompt"][0]["content"], r["label"]) for r in map(json.loads, lines)]

    assert prompts("format=kto&model=owl-7b") == [
        ("owl-lark", True),
        ("owl-lark", False),
        ("wren-owl", False),
        ("wren-owl", False),
    ]
    assert prompts("format=kto&model=lark-70b&model=wren-1b&category=coding&language=de") == [
        ("lark-wren", True),
        ("lark-wren", False),
    ]


def test_an_unknown_model_a_category_no_prompt_has_or_a_bad_language_is_refused_by_name(
    admin_client, make_vote, models3
):
    make_vote(*models3[:2], category="writing")
    for params, field, words in (
        ({"model": ["owl-7b", "nope-9b"]}, "model", "nope-9b"),
        ({"category": "astrology"}, "category", "writing"),  # names the categories there are
        ({"language": "english please"}, "language", "language tag"),
    ):
        bad = admin_client.get(URL, {"format": "kto", **params})
        error = bad.json()["error"]
        assert bad.status_code == 400 and error["field"] == field and error["code"] == "invalid"
        assert words in error["message"]
    for option, words in (
        ("--model=nope-9b", "--model: .*nope-9b"),
        ("--category=astrology", "--category: .*astrology"),
        ("--language=!!", "--language"),
    ):
        with pytest.raises(CommandError, match=words):
            call_command("export_votes", "--format=kto", option, stderr=StringIO())
    with pytest.raises(CommandError, match="--parquet"):
        call_command("export_votes", "--format=kto", "--parquet", stderr=StringIO())


@pytest.fixture
def hf_datasets(monkeypatch, tmp_path):
    """``datasets``, offline: nothing may be fetched from the hub while an export is loaded."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return datasets


def trl_features(datasets, fmt, *, parquet=False):
    """The columns and types TRL's docs give for each trainer's conversational dataset (and
    the public arena schema for ``arena``); images are ``Image`` features in Parquet."""
    string, message = datasets.Value("string"), {"role": datasets.Value("string")}
    int64 = datasets.Value("int64")
    image = {"url": string, "sha256": string, "mime": string, "width": int64, "height": int64}
    images = datasets.List(datasets.Image() if parquet else image)
    message["content"] = string
    messages = datasets.List(message)
    reaction = {
        "liked": datasets.Value("bool"),
        "tags": datasets.List(string),
        "after_reveal": datasets.Value("bool"),
    }
    counts = lambda *parts: {p: datasets.Value("int64") for p in parts}  # noqa: E731
    side_counts = {}
    for side in ("a", "b"):
        side_counts[f"sum_assistant_{side}_tokens"] = datasets.Value("int64")
        side_counts[f"header_count_{side}"] = counts("h1", "h2", "h3", "h4", "h5", "h6")
        side_counts[f"list_count_{side}"] = counts("ordered", "unordered")
        side_counts[f"bold_count_{side}"] = counts("**", "__")
    return datasets.Features(
        {
            "arena": {
                **dict.fromkeys(("question_id", "model_a", "model_b", "winner", "judge"), string),
                "conversation_a": messages,
                "conversation_b": messages,
                "turn": datasets.Value("int64"),
                "anony": datasets.Value("bool"),
                "language": string,
                "category": string,
                "tstamp": datasets.Value("float64"),
                "conv_metadata": side_counts,
                "source": string,
                "reactions": {"a": reaction, "b": reaction},
                "images": images,
            },
            "trl": {"prompt": messages, "chosen": messages, "rejected": messages},
            "openai": {
                "input": {"messages": messages},
                "preferred_output": messages,
                "non_preferred_output": messages,
            },
            "hh-rlhf": {"chosen": string, "rejected": string},
            "kto": {"prompt": messages, "completion": messages, "label": datasets.Value("bool")},
            "kto-reactions": {
                "prompt": messages,
                "completion": messages,
                "label": datasets.Value("bool"),
                "model": string,
                "tags": datasets.List(string),
                "after_reveal": datasets.Value("bool"),
            },
        }[fmt]
    )


@pytest.mark.parametrize("parquet", [False, True], ids=["jsonl", "parquet"])
@pytest.mark.parametrize("fmt", ["arena", "trl", "openai", "hh-rlhf", "kto", "kto-reactions"])
def test_every_format_written_to_a_folder_loads_with_datasets_in_trls_layout(
    hf_datasets, make_vote, pair, tmp_path, fmt, parquet
):
    first = make_vote(*pair, "model_a", answers=("good", "bad"))
    make_vote(*pair, "tie (bothbad)", answers=("meh a", "meh b"))
    make_vote(*pair, "model_b", answers=("worse", "better"))
    Reaction.objects.create(battle=first.battle, side="a", liked=True, tags=["useful"])
    Reaction.objects.create(battle=first.battle, side="b", liked=False, after_reveal=True)
    Vote.objects.filter(winner="model_a").update(style={})  # an arena row with no style counts
    folder = tmp_path / "export"
    err = StringIO()
    args = ["--parquet"] if parquet else []
    call_command("export_votes", f"--format={fmt}", f"-o={folder}/", *args, stderr=err)
    suffix = "parquet" if parquet else "jsonl"
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", f"arena-votes-{fmt}.{suffix}"]
    train = hf_datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "c"))
    assert train.features == trl_features(hf_datasets, fmt, parquet=parquet)
    expected = {
        "arena": (3, "winner", ["model_a", "tie (bothbad)", "model_b"]),
        "trl": (2, "chosen", [[{"role": "assistant", "content": t}] for t in ("good", "better")]),
        "openai": (
            2,
            "preferred_output",
            [[{"role": "assistant", "content": t}] for t in ("good", "better")],
        ),
        "hh-rlhf": (2, "rejected", ["\n\nHuman: Question 1?\n\nAssistant: bad"]),
        "kto": (6, "label", [True, False, False, False, True, False]),
        "kto-reactions": (2, "label", [True, False]),
    }[fmt]
    rows_, column, values = expected
    assert train.num_rows == rows_
    assert train[column][: len(values)] == values
    if fmt == "arena":
        assert train["conv_metadata"][0] is None and train["conv_metadata"][1]["bold_count_a"]
        assert train["reactions"][0] == {
            "a": {"liked": True, "tags": ["useful"], "after_reveal": False},
            "b": {"liked": False, "tags": [], "after_reveal": True},
        }
        assert train["reactions"][1] is None
    if fmt == "kto-reactions":
        assert train["tags"] == [["useful"], []] and train["after_reveal"] == [False, True]
        assert train["completion"][0] == [{"role": "assistant", "content": "good"}]
        assert train["model"] == [first.battle.model_a.slug, first.battle.model_b.slug]
    if fmt == "openai":
        assert train[0]["input"] == {"messages": [{"role": "user", "content": "Question 1?"}]}
    assert f"to {folder}" in err.getvalue()


def test_the_dataset_card_names_the_file_licence_task_filters_counts_and_what_was_skipped(
    make_vote, pair, tmp_path
):
    vote = make_vote(*pair, "model_a", category="coding", language="en")
    make_vote(*pair, "tie", category="coding")
    make_vote(*pair, "model_a", category="writing")
    Vote.objects.filter(pk=vote.pk).update(created_at=datetime(2026, 3, 1, 12, tzinfo=UTC))
    folder = tmp_path / "kto-votes"
    call_command(
        "export_votes",
        "--format=kto",
        "--category=coding",
        "--model=owl-7b",
        "--since=2026-01-01",
        "--parquet",
        "-o",
        f"{folder}/",
        stderr=StringIO(),
    )
    text = (folder / "README.md").read_text()
    _, header, body = text.split("---\n", 2)
    card = yaml.safe_load(header)
    assert card["license"] == "cc-by-4.0"
    assert "reinforcement-learning" in card["task_categories"] and "kto" in card["tags"]
    assert card["configs"] == [
        {
            "config_name": "default",
            "data_files": [{"split": "train", "path": "arena-votes-kto.parquet"}],
        }
    ]
    assert {"name": "label", "dtype": "bool"} in card["dataset_info"]["features"]
    assert "rows: 2, from 1 votes" in body
    assert "2026-03-01T12:00:00+00:00" in body  # the date range of the votes written
    assert "prompt category: coding" in body and "owl-7b" in body
    assert "votes at or after 2026-01-01T00:00:00+00:00" in body
    assert "1 ties (no verdict on either answer)" in body


def test_an_existing_folder_without_a_slash_is_a_folder_and_another_licence_can_be_named(
    make_vote, pair, tmp_path
):
    make_vote(*pair, "model_a")
    call_command(
        "export_votes", "--format=trl", f"-o={tmp_path}", "--license=cc0-1.0", stderr=StringIO()
    )
    assert (tmp_path / "arena-votes-trl.jsonl").read_text().count("\n") == 1
    assert "license: cc0-1.0" in (tmp_path / "README.md").read_text()


def test_a_failed_folder_export_leaves_neither_file_nor_card(
    make_vote, pair, tmp_path, monkeypatch
):
    make_vote(*pair, "model_a")

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("arena.exports.writers.write_jsonl_bytes", explode)
    with pytest.raises(RuntimeError):
        call_command("export_votes", "--format=trl", f"-o={tmp_path}/", stderr=StringIO())
    assert list(tmp_path.iterdir()) == []


def test_parquet_is_written_in_row_groups_under_the_formats_fixed_schema(make_vote, pair, tmp_path):
    for winner in ("model_a", "model_b", "tie") * 3:
        make_vote(*pair, winner)
    Vote.objects.update(style={})  # no style counts at all: the column is still the struct
    stats = ExportStats()
    path = tmp_path / "arena.parquet"
    write_parquet(export_rows(voted_battles(), "arena", stats), path, "arena", row_group_size=4)
    parquet = pq.ParquetFile(path)
    assert parquet.schema_arrow == arrow_schema("arena")
    assert [parquet.metadata.row_group(i).num_rows for i in range(3)] == [4, 4, 1]
    assert parquet.read().to_pylist()[0]["conv_metadata"] is None


@pytest.mark.postgres
def test_votes_are_read_a_chunk_at_a_time_each_with_its_own_messages(make_vote, pair):
    votes = [make_vote(*pair, "model_a", answers=(f"a{i}", f"b{i}")) for i in range(7)]
    with CaptureQueriesContext(connection) as queries:
        records = list(voted_battles(chunk_size=3))
    assert [r.answers["a"] for r in records] == [[f"a{i}"] for i in range(7)]
    assert [r.battle_id for r in records] == [v.battle_id.hex for v in votes]
    message_reads = [q for q in queries if "arena_battlemessage" in q["sql"]]
    assert len(message_reads) == 3  # one per chunk of 3, 3, 1 votes


def test_a_record_from_values_is_the_record_the_models_hold(make_vote, pair):
    vote = make_vote(*pair, "model_b", turns=2, category="coding", language="de")
    (record,) = voted_battles()
    row = to_arena(record)
    assert row["tstamp"] == vote.created_at.timestamp()
    assert (row["category"], row["language"], row["anony"]) == ("coding", "de", True)
    assert row["conv_metadata"] == vote.style and row["winner"] == "model_b"
    assert row["source"] == "pool"


def test_the_arena_format_tells_mixed_battles_apart(make_vote, pair):
    from arena.models import Battle

    pool_vote, mixed_vote = make_vote(*pair, "model_a"), make_vote(*pair, "model_b")
    Battle.objects.filter(pk=mixed_vote.battle_id).update(source=Battle.Source.MIXED, live_side="b")
    rows = {r["question_id"]: r for r in map(to_arena, voted_battles())}
    assert rows[pool_vote.battle_id.hex]["source"] == "pool"
    assert rows[mixed_vote.battle_id.hex]["source"] == "mixed"


def test_votes_read_without_details_have_no_judge_and_no_style_counts(make_vote, pair):
    make_vote(*pair, "model_a", answers=("one", "two"))
    (full,) = voted_battles()
    (bare,) = voted_battles(details=False)
    assert full.judge.startswith("judge-") and full.style
    assert (bare.judge, bare.style) == ("", {})
    assert to_trl_row(bare) == to_trl_row(full)


def to_trl_row(record):
    from arena.exports import to_trl

    return to_trl(record)
