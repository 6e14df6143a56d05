"""One table decides every task's queue (config/queues.py): each registered task has a row,
each row names a registered task and a queue a worker reads, and beat's entries and the code
that queues tasks leave the choice to it."""

import ast
from pathlib import Path

from celery import current_app
from django.conf import settings

from config.queues import QUEUES, TASK_QUEUES
from config.schedule import BEAT_SCHEDULE, REWARD_MODEL_SCHEDULE

ROOT = Path(__file__).resolve().parent.parent
SENDERS = {"apply_async", "send_task", "signature", "s", "si"}


def _registered() -> set[str]:
    current_app.loader.import_default_modules()
    return {
        name
        for name in current_app.tasks
        if name.startswith(("arena.", "ratings.", "redteam.")) and ".tests." not in name
    }


def test_every_task_of_the_apps_has_its_queue_in_the_table_and_nothing_else_does():
    assert _registered() == set(TASK_QUEUES)
    assert set(TASK_QUEUES.values()) <= set(QUEUES)
    assert settings.CELERY_TASK_ROUTES == {n: {"queue": q} for n, q in TASK_QUEUES.items()}


def test_routing_sends_each_task_to_its_tables_queue():
    router = current_app.amqp.router
    for name, queue in TASK_QUEUES.items():
        route = router.route({}, name)
        assert route["queue"].name == queue, name


def test_no_beat_entry_nor_caller_names_a_queue_of_its_own():
    for entry in {**BEAT_SCHEDULE, **REWARD_MODEL_SCHEDULE}.values():
        assert "queue" not in entry.get("options", {})
        assert entry["task"] in TASK_QUEUES
    for path in [*ROOT.glob("arena/**/*.py"), *ROOT.glob("ratings/**/*.py")]:
        if "/tests/" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in SENDERS:
                assert "queue" not in {k.arg for k in node.keywords}, f"{path}:{node.lineno}"
