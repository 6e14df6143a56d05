"""The admin's sign-in is throttled: django-axes locks a username from one
address after ARENA_LOGIN_FAILURE_LIMIT wrong passwords, for ARENA_LOGIN_LOCKOUT_MINUTES."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"  # noqa: S105
ATTACKER = "203.0.113.9"
LOGIN_URL = f"/{settings.ADMIN_URL}login/"


@pytest.fixture
def staff(django_user_model):
    django_user_model.objects.create_superuser("root", password=PASSWORD)
    django_user_model.objects.create_superuser("other", password=PASSWORD)


def sign_in(username: str, password: str, ip: str = ATTACKER):
    client = Client(REMOTE_ADDR=ip)
    response = client.post(
        LOGIN_URL,
        {"username": username, "password": password, "next": f"/{settings.ADMIN_URL}"},
    )
    return response, "_auth_user_id" in client.session


def fail(times: int, username: str = "root", ip: str = ATTACKER) -> list[int]:
    return [sign_in(username, "wrong password", ip)[0].status_code for _ in range(times)]


def test_wrong_passwords_lock_the_username_from_that_address_even_for_the_right_one(staff):
    assert settings.AXES_FAILURE_LIMIT == 5
    statuses = fail(30)
    assert statuses[:4] == [200] * 4  # the form again, "enter a correct username and password"
    assert set(statuses[4:]) == {429}
    response, signed_in = sign_in("root", PASSWORD)
    assert response.status_code == 429 and not signed_in
    assert "Too many failed sign-ins" in response.content.decode()
    assert "15 minutes" in response.content.decode()


def test_other_users_and_other_addresses_are_not_locked(staff):
    fail(5)
    assert sign_in("root", PASSWORD)[0].status_code == 429
    response, signed_in = sign_in("root", PASSWORD, ip="198.51.100.20")
    assert response.status_code == 302 and signed_in
    response, signed_in = sign_in("other", PASSWORD)
    assert response.status_code == 302 and signed_in


def test_the_lock_ends_after_the_cool_off(staff):
    fail(5)
    assert sign_in("root", PASSWORD)[0].status_code == 429
    # The cool-off passes: the attempts are now older than ARENA_LOGIN_LOCKOUT_MINUTES.
    for attempt in AccessAttempt.objects.all():
        attempt.attempt_time -= settings.AXES_COOLOFF_TIME + timedelta(seconds=1)
        attempt.save(update_fields=["attempt_time"])
    response, signed_in = sign_in("root", PASSWORD)
    assert response.status_code == 302 and signed_in


def test_a_successful_sign_in_clears_the_count(staff):
    assert fail(4) == [200] * 4
    assert sign_in("root", PASSWORD)[1]
    assert fail(4) == [200] * 4  # counted from zero again: not locked at the fifth failure
    assert sign_in("root", PASSWORD)[1]


def test_attempts_are_listed_in_the_admin(staff, admin_client):
    fail(2)
    page = admin_client.get(f"/{settings.ADMIN_URL}axes/accessattempt/")
    assert page.status_code == 200
    assert ATTACKER in page.content.decode()
