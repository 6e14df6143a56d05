"""The production shape, started natively for a benchmark (as tests/test_production_shape.py does).

``config.settings.production`` in every process: ``migrate``, the demo data (``load_demo``),
``bin/serve`` (uvicorn, two workers), a Celery worker on the default and ratings queues and,
where the tree's docker-compose.yml has one, the webhooks worker. A PostgreSQL database of
its own on the server ``DATABASE_URL`` names (created here, dropped at the end) and an empty
Redis db claimed with a key (never another run's broker). Each process's output goes to a file
under the run's temporary directory; a process that exits early fails the run with its log.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
USER_AGENT = (  # a browser's: the site flags votes from scripts' user agents
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0 Safari/537.36"
)
REDIS_DBS = (10, 11, 12, 13, 14, 15)
REDIS_CLAIM_KEY = "arena:bench-shape:claim"
WAIT_SECONDS = 90


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_url(dbname: str) -> str:
    """The PostgreSQL server of ``DATABASE_URL`` (default local), with database ``dbname``."""
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        sys.exit(f"DATABASE_URL must name a PostgreSQL server, not {parts.scheme}")
    return urlunsplit(parts._replace(path=f"/{dbname}"))


class Database:
    """A PostgreSQL database of the run's own, dropped by ``drop``."""

    def __init__(self, prefix: str) -> None:
        import psycopg

        self.name = f"{prefix}_{secrets.token_hex(4)}"
        self.admin_url = server_url("postgres")
        self.url = server_url(self.name)
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class RedisDb:
    """An empty Redis db number claimed with a key; flushed and released by ``release``."""

    def __init__(self) -> None:
        import redis

        base = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        token = secrets.token_hex(8)
        for number in REDIS_DBS:
            url = urlsplit(base)._replace(path=f"/{number}").geturl()
            client = redis.Redis.from_url(url)
            if client.set(REDIS_CLAIM_KEY, token, nx=True, ex=3600) and client.dbsize() == 1:
                self.url, self.client = url, client
                return
            if client.get(REDIS_CLAIM_KEY) == token.encode():
                client.delete(REDIS_CLAIM_KEY)
            client.close()
        sys.exit(f"no empty Redis db among {list(REDIS_DBS)}")

    def release(self) -> None:
        self.client.flushdb()
        self.client.close()


@dataclass
class Shape:
    """The web server and worker of docker-compose.yml on loopback, in production settings."""

    database_url: str
    redis_url: str
    extra_env: dict[str, str]
    web_workers: int = 2
    root: Path = ROOT  # the checkout whose code runs (bench/battles.py --baseline: another one)
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="arena-bench-")))
    port: int = field(default_factory=free_port)
    processes: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)
    # Where uvicorn listens, and the network namespace every process runs in (``ip netns
    # exec``): one host of tests/multihost.py's several. Loopback and this machine's own by default.
    host: str = "127.0.0.1"
    netns: str = ""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self, *args: str) -> list[str]:
        """``args``, run inside this shape's network namespace if it has one."""
        return ["ip", "netns", "exec", self.netns, *args] if self.netns else list(args)

    @property
    def env(self) -> dict[str, str]:
        keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PGPASSWORD")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings.production",
            DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
            DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            DJANGO_STATIC_ROOT=str(self.tmp / "staticfiles"),
            DJANGO_SECURE_SSL_REDIRECT="false",
            DJANGO_SECURE_COOKIES="false",
            DJANGO_SECURE_HSTS_SECONDS="0",
            ARENA_IP_HASH_SALT="bench-salt",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def manage(self, *args: str, timeout: float = 300) -> str:
        log = self.tmp / f"manage-{args[0]}.log"
        with log.open("wb") as out:
            done = subprocess.run(
                self.command(str(BIN / "python"), "manage.py", *args),
                cwd=self.root,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        text = log.read_text(errors="replace")
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} exited with {done.returncode}:\n{text}")
        return text

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> Path:
        log = self.tmp / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                self.command(*args),
                cwd=self.root,
                env=self.env | (env or {}),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append((name, popen, log))
        return log

    def wait_for(self, what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            self.check_alive(f"waiting for {what}")
            if ready():
                return
            time.sleep(0.25)
        raise RuntimeError(f"timed out waiting for {what}")

    def check_alive(self, when: str) -> None:
        for name, popen, log in self.processes:
            if popen.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {popen.returncode} while {when}:\n"
                    + log.read_text(errors="replace")[-4000:]
                )

    def get_status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def start_web(self) -> None:
        self.start(
            "uvicorn",
            str(self.root / "bin" / "serve"),
            env={
                "ARENA_PYTHON": str(BIN / "python"),
                "ARENA_HOST": self.host,
                "ARENA_PORT": str(self.port),
                "ARENA_WEB_WORKERS": str(self.web_workers),
            },
        )
        self.wait_for("the web server", lambda: self.get_status("/about") == 200)

    def start_worker(self) -> None:
        workers = [("celery-worker", "default,ratings", "2")]
        # Trees whose docker-compose.yml runs a worker of its own for trainers' webhooks (a
        # --baseline tree from before it delivers them from the worker above).
        if "-Q webhooks" in (self.root / "docker-compose.yml").read_text():
            workers.append(("celery-webhooks", "webhooks", "4"))
        for name, queues, concurrency in workers:
            log = self.start(
                name,
                str(BIN / "celery"),
                "-A",
                "config",
                "worker",
                "-Q",
                queues,
                "--loglevel",
                "INFO",
                "--concurrency",
                concurrency,
                "--hostname",
                f"bench-{name}-{self.port}@%h",
            )
            self.wait_for(name, lambda log=log: " ready." in log.read_text(errors="replace"))

    def start_beat(self) -> None:
        """Celery beat, as docker-compose.yml's beat service runs it (one in the whole site)."""
        log = self.start(
            "celery-beat",
            str(BIN / "celery"),
            "-A",
            "config",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(self.tmp / "celerybeat-schedule"),
            "--pidfile",
            str(self.tmp / "celerybeat.pid"),
        )
        self.wait_for("beat", lambda: "beat: Starting..." in log.read_text(errors="replace"))

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) so far of every live process in each started process's
        group (uvicorn's workers, the worker's pool), by the started process's name. Processes
        that exited are not counted; PostgreSQL's and Redis's are not ours."""
        tick = os.sysconf("SC_CLK_TCK")
        groups = {popen.pid: name for name, popen, _ in self.processes}
        totals = dict.fromkeys(groups.values(), 0.0)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pgid = int(fields[2])
            if pgid in groups:
                totals[groups[pgid]] += (int(fields[11]) + int(fields[12])) / tick
        return totals

    def stop(self) -> None:
        for _, popen, _ in self.processes:
            if popen.poll() is None:
                os.killpg(popen.pid, signal.SIGTERM)
        for _, popen, _ in self.processes:
            try:
                popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(timeout=10)
            try:
                os.killpg(popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass
class Tree:
    """One checkout's production shape: its own database (its own migrations), Redis database,
    processes and logs. ``checkout(REV)``: a git worktree of REV beside this checkout (the
    benchmarks' ``--baseline``, measured in the same run)."""

    label: str
    root: Path
    prefix: str
    settings: dict[str, str]
    web_workers: int = 2
    worktree: bool = False
    database: Database = field(init=False)
    redis_db: RedisDb = field(init=False)
    shape: Shape = field(init=False)

    def __post_init__(self) -> None:
        self.database = Database(self.prefix)
        try:
            self.redis_db = RedisDb()
        except BaseException:
            self.database.drop()
            raise
        self.shape = Shape(
            self.database.url,
            self.redis_db.url,
            self.settings,
            web_workers=self.web_workers,
            root=self.root,
        )

    @staticmethod
    def resolve(rev: str) -> str:
        """REV's commit, or SystemExit naming it (before anything is created or started)."""
        found = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
        )
        if found.returncode != 0:
            raise SystemExit(f"--baseline: {rev!r} is not a commit of this repository")
        return found.stdout.strip()

    @classmethod
    def checkout(
        cls, rev: str, prefix: str, settings: dict[str, str], web_workers: int = 2
    ) -> Tree:
        path = worktree_add(rev)
        try:
            return cls(f"baseline {rev}", path, prefix, settings, web_workers, worktree=True)
        except BaseException:
            remove_worktree(path)
            raise

    def prepare(self, live_models: tuple[str, ...] = (), upstream_url: str = "") -> None:
        """Migrate, collect static files, load the demo, rate it, and add ``live_models``
        against ``upstream_url``."""
        shape = self.shape
        shape.manage("migrate", "--noinput")
        shape.manage("collectstatic", "--noinput")
        shape.manage("load_demo")
        shape.manage("rate_snapshot")
        for slug in live_models:
            shape.manage(
                "add_model",
                f"--slug={slug}",
                f"--provider-url={upstream_url}",
                f"--upstream-model={slug}",
            )

    def close(self) -> None:
        self.shape.stop()
        self.database.drop()
        self.redis_db.release()
        if self.worktree:
            remove_worktree(self.root)


def worktree_add(rev: str) -> Path:
    """A detached git worktree of REV in a temporary folder (``remove_worktree`` removes it)."""
    path = Path(tempfile.mkdtemp(prefix="arena-bench-baseline-")) / "tree"
    try:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), rev],
            check=True,
        )
    except BaseException:
        remove_worktree(path)
        raise
    return path


def remove_worktree(path: Path) -> None:
    """Remove a ``worktree_add`` worktree (if git added it) and its temporary parent."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
        check=False,
        capture_output=True,
    )
    shutil.rmtree(path.parent, ignore_errors=True)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)


def add_tree_arguments(parser: argparse.ArgumentParser, env_help: str = "") -> None:
    """``--baseline REV`` and ``--env NAME=VALUE``, as bench/battles.py and bench/votes.py take."""
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run a git worktree of REV (e.g. 33913fd, the tree the throughput pass was measured on) "
        "at every level, alternating with this checkout, and print both tables",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra setting for the server processes (repeatable)" + env_help,
    )


def open_trees(
    into: list[Tree],
    args: argparse.Namespace,
    prefix: str,
    settings: dict[str, str],
    web_workers: int = 2,
) -> Tree:
    """Append ``--baseline``'s tree (if asked) and this checkout's to ``into`` (the caller's
    ``finally`` closes what is there, so a failure halfway leaves nothing behind), print where
    each lives, and return this checkout's."""
    if args.baseline:
        commit = Tree.resolve(args.baseline)
        into.append(Tree.checkout(commit[:12], prefix, settings, web_workers))
    current = Tree("this checkout", ROOT, prefix, settings, web_workers)
    into.append(current)
    for tree in into:
        print(
            f"{tree.label}: database {tree.database.name}, redis {tree.redis_db.url}, "
            f"logs {tree.shape.tmp}",
            flush=True,
        )
    return current


def close_trees(trees: list[Tree], keep_logs: bool) -> None:
    for tree in trees:
        tree.close()
    if keep_logs:
        print(f"process logs kept in {[str(t.shape.tmp) for t in trees]}")


def stored_votes(database: Database, battle_ids: list[str]) -> int:
    """Rows of arena_vote for these battles (what an acknowledged vote must have written)."""
    if not battle_ids:
        return 0
    rows = database.query(
        "SELECT count(*) FROM arena_vote WHERE battle_id = ANY(%s::uuid[])", battle_ids
    )
    return int(rows[0][0])
