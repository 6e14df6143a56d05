"""Judge ids in exports have their own key, ARENA_JUDGE_HASH_KEY."""

import hashlib
import hmac
import os
import subprocess
import sys
from pathlib import Path

from arena.exports import judge_hash

BASE_DIR = Path(__file__).resolve().parents[2]


def _hmac_id(key: bytes, voter_id: str) -> str:
    return "judge-" + hmac.new(key, voter_id.encode(), hashlib.sha256).hexdigest()[:16]


def test_unset_the_judge_id_is_keyed_by_the_secret_key_as_before(settings):
    settings.ARENA_JUDGE_HASH_KEY = ""
    settings.SECRET_KEY = "the-old-secret"
    assert judge_hash("voter-1") == _hmac_id(b"the-old-secret", "voter-1")


def test_set_the_judge_id_survives_a_secret_key_rotation(settings):
    settings.ARENA_JUDGE_HASH_KEY = "judge-key"
    settings.SECRET_KEY = "the-old-secret"
    before = judge_hash("voter-1")
    settings.SECRET_KEY = "the-new-secret"
    assert judge_hash("voter-1") == before == _hmac_id(b"judge-key", "voter-1")
    assert judge_hash("voter-2") != before


def test_the_setting_is_read_from_the_environment():
    env = {k: v for k, v in os.environ.items() if k != "ARENA_JUDGE_HASH_KEY"}
    code = "from django.conf import settings; print(repr(settings.ARENA_JUDGE_HASH_KEY))"
    run = [sys.executable, "-c", f"import django; django.setup(); {code}"]
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    unset = subprocess.run(run, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60)
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout.strip() == "''"
    env["ARENA_JUDGE_HASH_KEY"] = "from-the-environment"
    set_ = subprocess.run(run, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60)
    assert set_.returncode == 0, set_.stderr
    assert set_.stdout.strip() == "'from-the-environment'"
