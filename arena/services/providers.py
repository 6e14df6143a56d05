"""Checks of a provider's configuration that staff run from the admin.

``provider_key_problem`` is the rule the provider form applies (a named API-key variable must be
set in this server's environment, or live battles fail with "The model is not configured
correctly"); ``provider_connection_test`` calls the endpoint through the real ``openai`` client,
as live battles do, and says what happened in words for an admin message.
"""

import os
from dataclasses import dataclass

from arena.models import Provider

# Short: staff wait for the answer on the admin page.
CONNECTION_TEST_TIMEOUT_SECONDS = 5.0


def provider_key_problem(*, api_key_env: str) -> str | None:
    """Why the key variable ``api_key_env`` names cannot serve, or None (also for no variable:
    an endpoint without a key, such as a local vLLM)."""
    if not api_key_env:
        return None
    if not os.environ.get(api_key_env):
        return (
            f"The environment variable {api_key_env} is not set on this server, so live "
            "battles cannot call this provider. Set it in the environment of the web and "
            "worker processes and restart them, or leave the field blank for an endpoint "
            "without a key."
        )
    return None


@dataclass(frozen=True)
class ConnectionCheck:
    """What ``provider_connection_test`` found: ``ok`` and a sentence for staff."""

    ok: bool
    message: str


def _failure(provider: Provider, exc: Exception) -> ConnectionCheck:
    import openai

    where = f"{provider.name} ({provider.base_url})"
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        variable = provider.api_key_env or "(no key variable)"
        return ConnectionCheck(
            False, f"{where} refused the API key in {variable}: {exc.status_code} {exc.message}"
        )
    if isinstance(exc, openai.APITimeoutError):
        return ConnectionCheck(
            False, f"{where} did not answer within {CONNECTION_TEST_TIMEOUT_SECONDS:g} s."
        )
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return ConnectionCheck(False, f"{where} could not be reached: {cause}")
    if isinstance(exc, openai.APIStatusError):
        return ConnectionCheck(False, f"{where} answered {exc.status_code}: {exc.message}")
    return ConnectionCheck(False, f"{where} failed: {type(exc).__name__}: {exc}")


def provider_connection_test(*, provider: Provider) -> ConnectionCheck:
    """List the endpoint's models; where it has no such route (some OpenAI-compatible servers
    lack ``/models``), ask one of the provider's models for a one-token completion instead.
    One attempt, a short timeout, nothing stored."""
    import openai

    problem = provider_key_problem(api_key_env=provider.api_key_env)
    if problem:
        return ConnectionCheck(False, f"{provider.name}: {problem}")
    api_key = os.environ.get(provider.api_key_env, "") if provider.api_key_env else ""
    client = openai.OpenAI(
        base_url=provider.base_url,
        # The client insists on a key; an endpoint without one ignores it.
        api_key=api_key or "no-key",
        max_retries=0,
        timeout=CONNECTION_TEST_TIMEOUT_SECONDS,
    )
    where = f"{provider.name} ({provider.base_url})"
    try:
        with client:
            try:
                ids = [model.id for model in client.models.list()]
            except openai.NotFoundError:
                upstream = (
                    provider.models.exclude(upstream_model_id="")
                    .values_list("upstream_model_id", flat=True)
                    .first()
                )
                if upstream is None:
                    return ConnectionCheck(
                        False,
                        f"{where} has no model list (404), and no model of this provider "
                        "names an upstream model id to try a completion with.",
                    )
                client.chat.completions.create(
                    model=upstream,
                    messages=[{"role": "user", "content": "Say OK."}],
                    max_tokens=1,
                )
                return ConnectionCheck(
                    True, f"{where} answered a one-token completion of {upstream}."
                )
    except Exception as exc:  # noqa: BLE001 - every failure becomes the message staff read
        return _failure(provider, exc)
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    message = f"{where} answered: {len(ids)} model(s) listed ({shown or 'none'})."
    expected = provider.models.exclude(upstream_model_id="").values_list(
        "upstream_model_id", flat=True
    )
    unlisted = sorted(set(expected) - set(ids))
    if ids and unlisted:
        message += f" Not listed, though models here name them: {', '.join(unlisted)}."
    return ConnectionCheck(True, message)
