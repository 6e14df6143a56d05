"""Arena's production shape on several hosts: Linux network namespaces on this one machine.

``Cluster`` builds a private network and starts, each on a host of its own, the processes of
docker-compose.yml in production settings:

- ``db``: a PostgreSQL server of its own (``initdb`` into a temporary directory, run as the
  ``postgres`` user, trust for the private subnet only) and a Redis server of its own (the cache,
  the channel layer and Celery's broker), both listening on the host's address alone;
- ``worker``: the one-off jobs (``migrate``, ``collectstatic``, ``load_demo``, ``rate_snapshot``,
  as an operator or a release Job runs them, once), then the Celery workers (default + ratings
  queues, and webhooks);
- ``beat``: Celery beat, the one scheduler;
- ``web1``, ``web2``: uvicorn through ``bin/serve`` each;
- ``proxy``: tests/tcp_proxy.py, round robin per connection over the web nodes, failing over
  when one refuses.

Each host is a network namespace (``arena-<pid>-<role>``) with loopback up and one end of a veth
pair; the other ends are on a bridge in this (the root) namespace, which holds the subnet's first
address (``gateway``): the test, its browser and the loopback OpenAI fake live there and reach
every host over the bridge. The subnet is ``10.213.<n>.0/24``, ``n`` picked from this process's
pid among the ones no interface uses. The machine's own PostgreSQL and Redis (on 127.0.0.1) are
never touched: 127.0.0.1 inside a namespace is that namespace's own loopback.

Every host runs the same checkout from the same file system (the image, in a real deployment);
what the hosts share besides the network is what a real deployment shares: the media folder
(``DJANGO_MEDIA_ROOT``, a shared volume) and the collected static files (baked into the image).
Every process gets the same ``DJANGO_SECRET_KEY`` and ``ARENA_IP_HASH_SALT``: those must be equal
on every host (a session's keyed hash, the challenge's HMAC and the IP hashes derive from them).

``close`` (also on a failure halfway) stops every process, kills what is left in each namespace,
deletes the namespaces (their veth pairs go with them) and the bridge, and removes the
temporary directories. Leftovers of a run that was killed (its pid gone) are removed by the next.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # bench/multihost.py imports this module as a script's helper
    sys.path.insert(0, str(ROOT))

from bench.shape import BIN, Shape  # noqa: E402

# The hosts and the last byte of each one's address.
HOSTS = {"db": 2, "web1": 11, "web2": 12, "worker": 21, "beat": 22, "proxy": 31}
WEB_PORT = 8000
PROXY_PORT = 8000
POSTGRES_PORT = 5432
REDIS_PORT = 6379
WAIT_SECONDS = 90


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


def unavailable() -> str | None:
    """Why namespaces and the servers cannot be had here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces (ip netns)"
    for tool in ("ip", "setpriv", "redis-server"):
        if shutil.which(tool) is None:
            return f"needs {tool} (iproute2, util-linux, redis-server)"
    if _postgres_bin() is None:
        return "needs PostgreSQL's server binaries under /usr/lib/postgresql/*/bin"
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return "needs a postgres OS user to run initdb and the server"
    probe = f"arena-{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def remove_leftovers() -> None:
    """Namespaces, bridges and temporary folders of earlier runs whose process is gone (killed
    before ``close``)."""
    for line in _ip("netns", "list").stdout.splitlines():
        match = re.match(r"arena-(\d+)-\w+", line)
        if match and not _pid_alive(int(match[1])):
            _kill_namespace(match[0])
    for line in _ip("-o", "link", "show", "type", "bridge").stdout.splitlines():
        match = re.search(r": (arb(\d+)):", line)
        if match and not _pid_alive(int(match[2])):
            _ip("link", "del", match[1], check=False)
    for folder in Path(tempfile.gettempdir()).glob("arena-mh-*-*"):
        match = re.match(r"arena-mh-(\d+)-", folder.name)
        if match and not _pid_alive(int(match[1])):
            shutil.rmtree(folder, ignore_errors=True)


def _kill_namespace(name: str) -> None:
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _ip("netns", "del", name, check=False)


@dataclass
class Network:
    """A bridge in the root namespace, and one namespace per host on it."""

    pid: int = field(default_factory=os.getpid)
    prefix: str = ""
    created: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"arb{self.pid}"

    @property
    def gateway(self) -> str:
        return f"{self.prefix}.1"

    def address(self, role: str) -> str:
        return f"{self.prefix}.{HOSTS[role]}"

    def namespace(self, role: str) -> str:
        return f"arena-{self.pid}-{role}"

    def _free_prefix(self) -> str:
        used = _ip("-o", "addr").stdout + _ip("route").stdout
        for step in range(254):
            n = (self.pid + step) % 254 + 1
            if f"10.213.{n}." not in used:
                return f"10.213.{n}"
        raise RuntimeError("every 10.213.n.0/24 is in use")

    def create(self) -> None:
        remove_leftovers()
        self.prefix = self._free_prefix()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for role in HOSTS:
            ns = self.namespace(role)
            _ip("netns", "add", ns)
            self.created.append(ns)
            outside = f"a{self.pid}-{role[:3]}{role[-1]}"[:15]
            _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", outside, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(role)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def destroy(self) -> None:
        for ns in reversed(self.created):
            _kill_namespace(ns)
        self.created.clear()
        _ip("link", "del", self.bridge, check=False)

    def processes(self, role: str) -> list[int]:
        """Pids of the processes in a host's namespace."""
        return [int(p) for p in _ip("netns", "pids", self.namespace(role)).stdout.split()]


def _in_namespace(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *args]


def _wait(what: str, ready: Any, popen: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(
                f"{what} exited with {popen.returncode}:\n{log.read_text(errors='replace')}"
            )
        if ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}:\n{log.read_text(errors='replace')}")


def _stop(popen: subprocess.Popen[bytes] | None, signum: int = signal.SIGTERM) -> None:
    if popen is None:
        return
    if popen.poll() is None:
        os.killpg(popen.pid, signum)
        try:
            popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(timeout=10)
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass
class Postgres:
    """A PostgreSQL server of its own in the db namespace, its cluster in a temporary folder."""

    network: Network
    database: str = "arena"
    folder: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix=f"arena-mh-{os.getpid()}-pg-"))
    )
    popen: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return self.network.address("db")

    @property
    def url(self) -> str:
        return f"postgres://postgres@{self.host}:{POSTGRES_PORT}/{self.database}"

    @property
    def log(self) -> Path:
        return self.folder / "postgres.log"

    def _as_postgres(self, *args: str) -> list[str]:
        # initdb and the server refuse to run as root.
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *args]

    def start(self, max_connections: int = 200) -> None:
        pg = _postgres_bin()
        assert pg is not None
        self.folder.chmod(0o755)
        shutil.chown(self.folder, "postgres", "postgres")
        data = self.folder / "data"
        subprocess.run(
            self._as_postgres(
                str(pg / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                "-E", "UTF8", "--no-locale", "--no-sync",
            ),
            check=True,
            capture_output=True,
        )  # fmt: skip
        # Local socket connections trusted (initdb's), TCP ones from the private subnet only.
        with (data / "pg_hba.conf").open("w") as hba:
            hba.write(f"local all all trust\nhost all all {self.network.prefix}.0/24 trust\n")
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(
                _in_namespace(
                    self.network.namespace("db"),
                    *self._as_postgres(
                        str(pg / "postgres"), "-D", str(data),
                        "-c", f"listen_addresses={self.host}", "-c", f"port={POSTGRES_PORT}",
                        # Its own socket folder: the file system is the machine's, shared.
                        "-c", f"unix_socket_directories={self.folder}",
                        "-c", f"max_connections={max_connections}",
                        # A throwaway cluster: no durability paid for.
                        "-c", "fsync=off", "-c", "synchronous_commit=off",
                        "-c", "full_page_writes=off",
                    ),
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        _wait("PostgreSQL", self._accepts, self.popen, self.log)
        self.query_as_admin(f'CREATE DATABASE "{self.database}"')

    def _accepts(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def query_as_admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def stop(self) -> None:
        _stop(self.popen, signal.SIGINT)  # fast shutdown
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class Redis:
    """A Redis server of its own in the db namespace (no persistence)."""

    network: Network
    folder: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix=f"arena-mh-{os.getpid()}-redis-"))
    )
    popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.network.address('db')}:{REDIS_PORT}/0"

    def start(self) -> None:
        log = self.folder / "redis.log"
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                _in_namespace(
                    self.network.namespace("db"),
                    "redis-server", "--bind", self.network.address("db"),
                    "--port", str(REDIS_PORT), "--save", "", "--appendonly", "no",
                    "--protected-mode", "no", "--dir", str(self.folder),
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        _wait("Redis", lambda: "Ready to accept connections" in log.read_text(), self.popen, log)

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)

    def stop(self) -> None:
        _stop(self.popen)
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class Cluster:
    """The production shape on the hosts of a ``Network``: see the module's docstring.

    ``settings`` are extra environment variables for every process; ``web_workers`` is each
    web node's ``ARENA_WEB_WORKERS``.
    """

    settings: dict[str, str] = field(default_factory=dict)
    web_workers: int = 1
    web_nodes: tuple[str, ...] = ("web1", "web2")
    network: Network = field(default_factory=Network)
    tmp: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix=f"arena-mh-{os.getpid()}-"))
    )
    postgres: Postgres = field(init=False)
    redis: Redis = field(init=False)
    nodes: dict[str, Shape] = field(default_factory=dict)
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(50))

    def __post_init__(self) -> None:
        self.postgres = Postgres(self.network)
        self.redis = Redis(self.network)

    @property
    def proxy_url(self) -> str:
        return f"http://{self.network.address('proxy')}:{PROXY_PORT}"

    def url(self, role: str) -> str:
        return self.nodes[role].url

    @property
    def worker(self) -> Shape:
        return self.nodes["worker"]

    def _env(self) -> dict[str, str]:
        hosts = [self.network.address(role) for role in (*self.web_nodes, "proxy")]
        return {
            "DJANGO_SECRET_KEY": self.secret_key,
            "ARENA_IP_HASH_SALT": "multihost-salt",
            "DJANGO_ALLOWED_HOSTS": ",".join(hosts),
            # Visitors reach the site through the proxy: its links name the proxy.
            "ARENA_PUBLIC_ORIGIN": self.proxy_url,
            "DJANGO_STATIC_ROOT": str(self.tmp / "staticfiles"),
            "DJANGO_MEDIA_ROOT": str(self.tmp / "media"),
        } | self.settings

    def _node(self, role: str) -> Shape:
        folder = self.tmp / role
        folder.mkdir(exist_ok=True)
        shape = Shape(
            self.postgres.url,
            self.redis.url,
            self._env(),
            web_workers=self.web_workers,
            tmp=folder,
            port=WEB_PORT,
            host=self.network.address(role),
            netns=self.network.namespace(role),
        )
        self.nodes[role] = shape
        return shape

    def start(self, prepare: bool = True) -> None:
        """The network, the servers, the one-off jobs (from the worker host), the web nodes,
        the workers, beat and the proxy; ``close`` undoes whatever was done if this fails."""
        self.network.create()
        self.postgres.start()
        self.redis.start()
        worker = self._node("worker")
        if prepare:
            worker.manage("migrate", "--noinput")
            worker.manage("collectstatic", "--noinput")
            worker.manage("load_demo")
            worker.manage("rate_snapshot")
        for role in self.web_nodes:
            self._node(role).start_web()
        worker.start_worker()
        self._node("beat").start_beat()
        proxy = self._node("proxy")
        backends = [f"--backend={self.network.address(r)}:{WEB_PORT}" for r in self.web_nodes]
        log = proxy.start(
            "proxy",
            str(BIN / "python"),
            str(ROOT / "tests" / "tcp_proxy.py"),
            f"--listen={self.network.address('proxy')}:{PROXY_PORT}",
            *backends,
        )
        proxy.wait_for("the proxy", lambda: "proxy listening" in log.read_text())

    def kill(self, role: str) -> None:
        """A host lost at once: every process of it killed (SIGKILL), as a crashed node."""
        shape = self.nodes[role]
        for _, popen, _ in shape.processes:
            try:
                os.killpg(popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            popen.wait(timeout=10)
        shape.processes.clear()

    def log(self, role: str, name: str) -> str:
        path = self.nodes[role].tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> list[Path]:
        return sorted(self.tmp.glob("*/*.log")) + [self.postgres.log]

    def exited(self) -> list[str]:
        """``role/name`` of each started process that is no longer running."""
        return [
            f"{role}/{name}"
            for role, shape in self.nodes.items()
            for name, popen, _ in shape.processes
            if popen.poll() is not None
        ]

    def close(self) -> None:
        try:
            for shape in reversed(self.nodes.values()):
                shape.stop()
            self.redis.stop()
            self.postgres.stop()
        finally:
            self.network.destroy()
            shutil.rmtree(self.tmp, ignore_errors=True)
