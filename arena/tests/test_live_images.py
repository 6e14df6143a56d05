"""Live battles with images: the images go to two vision-capable models as OpenAI content parts,
through moderation first, and the battle remembers them for its later turns."""

import base64

import pytest
from channels.db import database_sync_to_async

from arena.errors import ArenaError
from arena.live.images import image_upload
from arena.live.turns import battle_start_live
from arena.models import ArenaModel, Battle, PromptImage, Provider, RefusedPrompt
from arena.tests.fake_openai import FakeModel
from arena.tests.images import png_bytes
from arena.tests.test_consumer_live import frames_until, open_socket

pytestmark = pytest.mark.usefixtures("upstream_clients", "media_root")


def vision(models) -> None:
    ArenaModel.objects.filter(pk__in=[m.pk for m in models]).update(supports_images=True)


def uploaded(session_key: str, **size) -> PromptImage:
    import io

    return image_upload(session_key=session_key, upload=io.BytesIO(png_bytes(**size)))


def chat_requests(fake_upstream) -> list:
    return [r for r in fake_upstream.requests if r.body.get("messages")]


@pytest.mark.django_db(transaction=True)
async def test_both_models_receive_the_image_as_a_content_part(fake_upstream, live_models):
    await database_sync_to_async(vision)(live_models)
    for model in live_models:
        fake_upstream.models[model.upstream_model_id] = FakeModel(tokens=["I ", "see ", "red"])
    comm = await open_socket()
    image = await database_sync_to_async(uploaded)(comm.session_key, width=30, height=20)

    await comm.send_json_to(
        {"type": "start", "prompt": "What colour is this?", "images": [str(image.pk)]}
    )
    frames = await frames_until(comm, "turn_end")

    assert frames[-1]["battle"]["state"] == "ready"
    requests = chat_requests(fake_upstream)
    assert len(requests) == 2
    for request in requests:
        user = request.messages[-1]
        assert user["role"] == "user"
        assert user["content"][0] == {"type": "text", "text": "What colour is this?"}
        assert request.image_urls and len(request.image_urls) == 1
        url = request.image_urls[0]
        assert url.startswith("data:image/png;base64,")
        stored = await database_sync_to_async(lambda: image.file.open("rb").read())()
        assert base64.b64decode(url.split(",", 1)[1]) == stored
    battle_id = frames[0]["battle"]["id"]
    saved = await database_sync_to_async(
        lambda: (
            Battle.objects.select_related("prompt").get(pk=battle_id).prompt.image_count,
            PromptImage.objects.get(pk=image.pk).battle_id,
        )
    )()
    assert saved[0] == 1 and str(saved[1]) == battle_id

    # A follow-up sends the first turn with its image again, the new turn as plain text.
    fake_upstream.requests.clear()
    await comm.send_json_to({"type": "turn", "battle_id": battle_id, "prompt": "And now?"})
    await frames_until(comm, "turn_end")
    for request in chat_requests(fake_upstream):
        first, _, last = request.messages[-3:]
        assert first["content"][1]["type"] == "image_url"
        assert last == {"role": "user", "content": "And now?"}
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_fewer_than_two_vision_models_is_an_error_frame_naming_images(
    fake_upstream, live_models
):
    await database_sync_to_async(vision)(live_models[:1])
    comm = await open_socket()
    image = await database_sync_to_async(uploaded)(comm.session_key)

    await comm.send_json_to({"type": "start", "prompt": "Look", "images": [str(image.pk)]})
    frame = await comm.receive_json_from(10)

    assert frame["type"] == "error" and frame["field"] == "images"
    assert "vision-capable" in frame["message"]
    assert chat_requests(fake_upstream) == []
    await comm.disconnect()


@pytest.mark.django_db
def test_a_battle_without_images_still_draws_models_that_take_no_images(live_models):
    plan = battle_start_live(session_key="s" * 32, prompt="Hello")

    assert {s.target.upstream_model for s in plan.sides.values()} == {
        m.upstream_model_id for m in live_models
    }


@pytest.mark.django_db
def test_another_sessions_image_is_unknown(live_models):
    vision(live_models)
    image = uploaded("a" * 32)

    with pytest.raises(ArenaError) as caught:
        battle_start_live(session_key="b" * 32, prompt="Mine?", image_ids=[str(image.pk)])

    assert caught.value.field == "images"
    assert PromptImage.objects.get(pk=image.pk).battle_id is None


@pytest.mark.django_db
def test_an_image_goes_with_one_battle_only(live_models):
    vision(live_models)
    image = uploaded("a" * 32)
    battle_start_live(session_key="a" * 32, prompt="First", image_ids=[str(image.pk)])

    with pytest.raises(ArenaError) as caught:
        battle_start_live(session_key="a" * 32, prompt="Again", image_ids=[str(image.pk)])

    assert caught.value.field == "images"


@pytest.mark.django_db
@pytest.mark.parametrize("ids", ["nope", [1], ["not-a-uuid"]])
def test_bad_image_ids_are_refused_naming_images(live_models, ids):
    with pytest.raises(ArenaError) as caught:
        battle_start_live(session_key="a" * 32, prompt="x", image_ids=ids)

    assert caught.value.field == "images"


@pytest.mark.django_db
def test_the_refuse_policy_refuses_images_without_a_moderation_provider(settings, live_models):
    settings.ARENA_IMAGE_POLICY = "refuse"
    vision(live_models)
    image = uploaded("a" * 32)

    with pytest.raises(ArenaError) as caught:
        battle_start_live(session_key="a" * 32, prompt="See", image_ids=[str(image.pk)])

    assert caught.value.code == "prompt_refused" and caught.value.field == "images"
    assert RefusedPrompt.objects.get().checker == RefusedPrompt.Checker.IMAGE_POLICY
    assert Battle.objects.count() == 0


@pytest.mark.django_db
def test_the_moderation_endpoint_receives_the_image_parts(settings, fake_upstream, live_models):
    Provider.objects.create(name="moderator", base_url=fake_upstream.url, max_retries=0)
    settings.ARENA_MODERATION_PROVIDER = "moderator"
    settings.ARENA_MODERATION_MODEL = "fake-moderation"
    fake_upstream.flag_images = True
    vision(live_models)
    image = uploaded("a" * 32)

    with pytest.raises(ArenaError) as caught:
        battle_start_live(session_key="a" * 32, prompt="Fine text", image_ids=[str(image.pk)])

    assert caught.value.code == "prompt_refused"
    moderation = [r for r in fake_upstream.requests if r.model == "fake-moderation"]
    assert len(moderation) == 1
    assert moderation[0].content_parts[0] == {"type": "text", "text": "Fine text"}
    assert moderation[0].image_urls[0].startswith("data:image/png;base64,")
    assert chat_requests(fake_upstream) == []


@pytest.mark.django_db
def test_an_image_a_battle_took_no_longer_counts_against_the_daily_quota(
    settings, live_models, django_capture_on_commit_callbacks
):
    vision(live_models)
    taken = uploaded("a" * 32)
    settings.ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION = taken.size + 10
    with django_capture_on_commit_callbacks(execute=True):
        battle_start_live(session_key="a" * 32, prompt="See", image_ids=[str(taken.pk)])

    uploaded("a" * 32)  # within the quota: the battle's image is given back
    with pytest.raises(ArenaError) as caught:
        uploaded("a" * 32)  # two unattached are over it

    assert caught.value.code == "image_quota" and caught.value.status == 429
