"""``manage.py add_model``: an existing model changes only with --update, and says how."""

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from arena.models import ArenaModel, Provider
from arena.tests.cli import assert_one_line_error, manage

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:11434/v1"


def add_model(*args: str) -> str:
    out = StringIO()
    call_command("add_model", *args, stdout=out)
    return out.getvalue()


def register(slug: str = "llama-3-8b", *extra: str) -> str:
    return add_model(
        f"--slug={slug}", f"--provider-url={URL}", "--upstream-model=llama3:8b", *extra
    )


def test_a_new_slug_is_registered_as_a_live_model():
    assert register() == f"Registered llama-3-8b -> llama3:8b at {URL}\n"
    model = ArenaModel.objects.get(slug="llama-3-8b")
    assert model.is_live and model.is_active and model.sampling_weight == 1.0


def test_an_existing_slug_is_refused_without_update_and_nothing_is_written():
    register()
    before = list(ArenaModel.objects.values())
    with pytest.raises(CommandError) as refused:
        add_model(
            "--slug=llama-3-8b",
            "--provider-url=http://10.0.0.2:8000/v1",
            "--upstream-model=other",
            "--weight=3",
        )
    message = str(refused.value)
    assert "'llama-3-8b' already exists" in message and "--update" in message
    assert "\n" not in message
    assert list(ArenaModel.objects.values()) == before
    assert Provider.objects.count() == 1  # the other URL's provider was not created


def test_update_prints_each_change_and_then_no_change():
    register()
    out = register("llama-3-8b", "--update", "--weight=2.5", "--display-name=Llama 3 8B")
    assert out.splitlines() == [
        "Updated llama-3-8b:",
        "  sampling_weight: 1.0 -> 2.5",
        "  display_name: 'llama-3-8b' -> 'Llama 3 8B'",
    ]
    assert register("llama-3-8b", "--update", "--weight=2.5") == "llama-3-8b: no change\n"
    # Only the options given change: the weight survives an update of the upstream id.
    out = add_model("--slug=llama-3-8b", "--update", "--upstream-model=llama3:8b-q4")
    assert out.splitlines() == [
        "Updated llama-3-8b:",
        "  upstream_model_id: 'llama3:8b' -> 'llama3:8b-q4'",
    ]
    assert ArenaModel.objects.get(slug="llama-3-8b").sampling_weight == 2.5


def test_a_pool_only_model_with_votes_becomes_live_only_with_update_and_it_is_said(make_vote):
    gpt4 = ArenaModel.objects.create(slug="gpt-4", display_name="GPT-4")
    other = ArenaModel.objects.create(slug="claude-v1", display_name="Claude-v1")
    for winner in ("model_a", "model_b", "tie"):
        make_vote(gpt4, other, winner)
    with pytest.raises(CommandError, match=r"'gpt-4' already exists \(a pool-only model with 3 "):
        register("gpt-4")
    assert not ArenaModel.objects.get(slug="gpt-4").is_live

    out = register("gpt-4", "--update")
    assert out.splitlines() == [
        "Updated gpt-4:",
        f"  provider: (none: pool-only) -> {URL}",
        "  upstream_model_id: (none) -> 'llama3:8b'",
        "gpt-4 was a pool-only model (3 votes); it now also answers live battles.",
    ]
    assert ArenaModel.objects.get(slug="gpt-4").is_live


def test_a_deactivated_model_is_reactivated_only_with_activate():
    register()
    ArenaModel.objects.filter(slug="llama-3-8b").update(is_active=False)
    out = register("llama-3-8b", "--update", "--weight=2")
    assert out.splitlines() == [
        "Updated llama-3-8b:",
        "  sampling_weight: 1.0 -> 2.0",
        "llama-3-8b is deactivated and stays so; pass --activate to serve it again.",
    ]
    assert not ArenaModel.objects.get(slug="llama-3-8b").is_active

    out = register("llama-3-8b", "--update", "--activate")
    assert out.splitlines() == ["Updated llama-3-8b:", "  is_active: False -> True"]
    assert ArenaModel.objects.get(slug="llama-3-8b").is_active


def test_update_of_a_new_slug_registers_it_and_a_new_slug_needs_its_upstream():
    assert register("fresh", "--update").startswith("Registered fresh")
    with pytest.raises(CommandError, match="A new model needs --upstream-model"):
        add_model("--slug=other", f"--provider-url={URL}")


@pytest.mark.django_db(transaction=True)
def test_the_refusal_is_one_line_on_stderr_and_a_failure_exit_status():
    register()
    result = manage("add_model", "--slug=llama-3-8b", f"--provider-url={URL}", "--upstream-model=x")
    assert_one_line_error(result, "'llama-3-8b' already exists", "pass --update")
    assert ArenaModel.objects.get(slug="llama-3-8b").upstream_model_id == "llama3:8b"


DEMO_MODELS = Path(__file__).resolve().parent.parent / "demo_data" / "models.json"
DEMO_SLUGS = sorted(slug for slug in json.loads(DEMO_MODELS.read_text()) if slug != "_comment")


@pytest.mark.parametrize("slug", DEMO_SLUGS)
def test_update_turns_each_demo_model_live_whatever_its_slug(slug):
    ArenaModel.objects.create(slug=slug, display_name=slug)  # as the demo loads it: pool-only
    out = register(slug, "--update")
    assert out.startswith(f"Updated {slug}:")
    assert ArenaModel.objects.get(slug=slug).is_live


def test_a_new_dotted_slug_is_registered():
    assert register("vicuna-13b-v1.3").startswith("Registered vicuna-13b-v1.3 ")


@pytest.mark.parametrize("slug", ["two words", "slash/slug", "semi;colon"])
def test_a_slug_outside_the_slug_rule_is_refused(slug):
    with pytest.raises(CommandError) as refused:
        register(slug)
    assert "slug" in str(refused.value)
    assert not ArenaModel.objects.exists()


def test_supports_images_is_set_and_cleared_only_when_asked():
    register("llava", "--supports-images")
    assert ArenaModel.objects.get(slug="llava").supports_images is True

    assert add_model("--slug=llava", "--update", "--weight=2") != ""
    assert ArenaModel.objects.get(slug="llava").supports_images is True  # left as it was

    out = add_model("--slug=llava", "--update", "--no-supports-images")
    assert "supports_images: True -> False" in out
    assert ArenaModel.objects.get(slug="llava").supports_images is False
