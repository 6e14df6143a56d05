"""deploy/k8s: every manifest is valid against the Kubernetes schemas (kubernetes-validate ships
them; no cluster, no network), and the manifests run the processes docker-compose.yml runs with
the variables it sets."""

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
# The schemas' Kubernetes version the manifests are written for.
KUBERNETES_VERSION = "1.30.0"


def _documents() -> list[dict]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def _kind(kind: str, name: str) -> dict:
    (found,) = [d for d in _documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _container(name: str) -> dict:
    kind = "Job" if name == "arena-migrate" else "Deployment"
    (container,) = _kind(kind, name)["spec"]["template"]["spec"]["containers"]
    return container


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.mark.parametrize("doc", _documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_each_manifest_is_valid_against_the_kubernetes_schema(doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_an_invalid_manifest_is_refused():
    broken = {**_kind("Deployment", "arena-beat"), "spec": {"replicas": "one"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest():
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    files = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == files


def test_the_processes_are_compose_s():
    services = _compose()["services"]
    # Compose's web migrates then runs bin/serve; here the Job migrates and web serves.
    assert "&& exec bin/serve" in services["web"]["command"]
    assert "python manage.py migrate --noinput" in services["web"]["command"]
    assert _container("arena-web")["command"] == ["bin/serve"]
    assert _container("arena-migrate")["command"] == ["python", "manage.py", "migrate", "--noinput"]
    for service, deployment in (
        ("worker", "arena-worker"),
        ("webhooks", "arena-webhooks"),
        ("beat", "arena-beat"),
    ):
        assert _container(deployment)["command"] == services[service]["command"].split()


def test_web_runs_on_several_hosts_and_beat_runs_once():
    web = _kind("Deployment", "arena-web")["spec"]
    assert web["replicas"] >= 2
    assert web["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    beat = _kind("Deployment", "arena-beat")["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"
    service = _kind("Service", "arena-web")["spec"]
    assert service.get("sessionAffinity", "None") == "None"  # any pod serves any request
    assert _container("arena-web")["ports"][0]["containerPort"] == 8000
    assert "8000:8000" in _compose()["services"]["web"]["ports"]


def test_every_variable_compose_sets_is_in_the_config_or_the_secret():
    compose_env = _compose()["x-app"]["environment"]
    config = _kind("ConfigMap", "arena-config")["data"]
    secret = _kind("Secret", "arena-secrets")["stringData"]
    assert set(compose_env) == set(config) | set(secret)
    assert not set(config) & set(secret)
    assert config["DJANGO_SETTINGS_MODULE"] == compose_env["DJANGO_SETTINGS_MODULE"]
    for key in ("DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ARENA_IP_HASH_SALT"):
        assert key in secret
    assert all(isinstance(value, str) for value in config.values())


def test_every_process_reads_both_gets_resources_and_one_image():
    for name in ("arena-web", "arena-worker", "arena-webhooks", "arena-beat", "arena-migrate"):
        container = _container(name)
        sources = {next(iter(s.values()))["name"] for s in container["envFrom"]}
        assert sources == {"arena-config", "arena-secrets"}, name
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
        assert container["image"] == _compose()["x-app"]["image"], name


def test_web_and_worker_share_the_media_volume_compose_mounts():
    compose = _compose()["services"]
    assert "media:/app/var/media" in compose["web"]["volumes"]
    assert _kind("PersistentVolumeClaim", "arena-media")["spec"]["accessModes"] == ["ReadWriteMany"]
    for name in ("arena-web", "arena-worker"):
        (mount,) = _container(name)["volumeMounts"]
        assert mount["mountPath"] == "/app/var/media"
