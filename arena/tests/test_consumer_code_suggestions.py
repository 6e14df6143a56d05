"""Code mode's suggestions: a programming task from the pool's code prompts, else a built-in one."""

import pytest

from arena.code_tasks import CODE_TASKS
from arena.tests.factories import PromptFactory
from arena.tests.test_consumer_live import frames_until, open_socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("upstream_clients")]


async def suggestion(comm, frame):
    await comm.send_json_to(frame)
    return (await frames_until(comm, "suggestion"))[-1]["prompt"]


async def test_code_suggestions_come_from_the_pools_code_prompts(db):
    from channels.db import database_sync_to_async

    await database_sync_to_async(PromptFactory)(turns=["Write a haiku."], category="writing")
    await database_sync_to_async(PromptFactory)(turns=["Sort a list in Python."], category="Coding")
    comm = await open_socket()
    for _ in range(3):
        assert await suggestion(comm, {"type": "suggest", "category": "code"}) == (
            "Sort a list in Python."
        )
    await comm.disconnect()


async def test_with_no_code_prompt_in_the_pool_a_built_in_task_is_suggested(db):
    from channels.db import database_sync_to_async

    await database_sync_to_async(PromptFactory)(turns=["Write a haiku."], category="writing")
    comm = await open_socket()
    assert await suggestion(comm, {"type": "suggest", "category": "code"}) in CODE_TASKS
    assert await suggestion(comm, {"type": "suggest"}) == "Write a haiku."
    await comm.disconnect()


@pytest.mark.parametrize("category", ["poetry", 3, ["code"]])
async def test_an_unknown_suggestion_category_is_an_error_naming_the_field(db, category):
    comm = await open_socket()
    await comm.send_json_to({"type": "suggest", "category": category})
    error = (await frames_until(comm, "error"))[-1]
    assert (error["code"], error["field"]) == ("invalid", "category")
    await comm.disconnect()
