"""docker-compose.yml describes the production stack: postgres, redis, web, the two workers
(default and ratings; webhooks), beat."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
SECURITY_SWITCHES = (
    "DJANGO_SECURE_SSL_REDIRECT",
    "DJANGO_SECURE_HSTS_SECONDS",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "DJANGO_SECURE_HSTS_PRELOAD",
    "DJANGO_SECURE_COOKIES",
    "DJANGO_CSRF_TRUSTED_ORIGINS",
    "ARENA_FORWARDED_ALLOW_IPS",
)


def test_compose_defines_the_six_services_on_production_settings():
    spec = yaml.safe_load(COMPOSE.read_text())
    assert set(spec["services"]) == {"postgres", "redis", "web", "worker", "webhooks", "beat"}
    for name in ("web", "worker", "webhooks", "beat"):
        service = spec["services"][name]
        env = service["environment"]
        assert env["DJANGO_SETTINGS_MODULE"] == "config.settings.production"
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://")
        for name in SECURITY_SWITCHES:
            assert name in env, name
    assert "bin/serve" in spec["services"]["web"]["command"]
    assert "-Q default,ratings" in spec["services"]["worker"]["command"]
    # Webhook deliveries on a worker of their own, with its own concurrency.
    assert "-Q webhooks" in spec["services"]["webhooks"]["command"]
    assert "--concurrency" in spec["services"]["webhooks"]["command"]
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


def test_web_command_is_bin_serve_with_proxy_headers_from_the_configured_proxies():
    serve = (ROOT / "bin" / "serve").read_text()
    assert "-m uvicorn config.asgi:application" in serve
    # Proxy headers only from the configured proxies; none by default (uvicorn alone would
    # trust 127.0.0.1): tests/test_forwarded.py runs it both ways.
    assert '--proxy-headers --forwarded-allow-ips "$ARENA_FORWARDED_ALLOW_IPS"' in serve
    assert "--no-proxy-headers" in serve
    assert '"${ARENA_WEB_WORKERS:-2}"' in serve
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'CMD ["bin/serve"]' in dockerfile
    # Each documented in the compose file's header.
    header = COMPOSE.read_text().split("x-app:")[0]
    for name in SECURITY_SWITCHES:
        assert name in header, name


def test_image_installs_runtime_requirements_builds_production_static_files_and_drops_root():
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs == ["RUN pip install --no-cache-dir -r requirements/runtime.txt"]
    build = dockerfile.split("manage.py collectstatic")[0].rsplit("RUN", 1)[1]
    assert "DJANGO_SETTINGS_MODULE=config.settings.production" in build
    user_line = next(line for line in dockerfile.splitlines() if line.startswith("USER "))
    assert user_line.split()[1] not in ("root", "0")
    assert dockerfile.index("USER ") < dockerfile.index("CMD ")
