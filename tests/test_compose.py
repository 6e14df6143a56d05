"""docker-compose.yml describes the production stack: postgres, redis, web, worker, beat."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[1] / "docker-compose.yml"


def test_compose_defines_the_five_services_on_production_settings():
    spec = yaml.safe_load(COMPOSE.read_text())
    assert set(spec["services"]) == {"postgres", "redis", "web", "worker", "beat"}
    for name in ("web", "worker", "beat"):
        service = spec["services"][name]
        env = service["environment"]
        assert env["DJANGO_SETTINGS_MODULE"] == "config.settings.production"
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://")
    assert "uvicorn config.asgi:application" in spec["services"]["web"]["command"]
    assert "-Q default,ratings" in spec["services"]["worker"]["command"]
    assert "beat" in spec["services"]["beat"]["command"]


def compose_cli() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


@pytest.mark.skipif(compose_cli() is None, reason="no docker compose CLI (CI installs one)")
def test_docker_compose_config_accepts_the_file():
    cli = compose_cli()
    result = subprocess.run(
        [*cli, "-f", str(COMPOSE), "config", "-q"],
        env={**os.environ, "DJANGO_SECRET_KEY": "check-only"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
