"""The environment API's client: runs, submissions and the reward feed, over plain HTTP.

Why one module: the transport, the retry rule and the error mapping serve every call of
``ArenaEnv`` and ``RunSession``, and the value types are what those calls return; the package
re-exports them from here, and a trainer reads the whole client, standard library only, in one
file.

Standard library only. Every call sends ``Authorization: Bearer <token>`` and reads the API's
JSON; an error answer (``{"error": {"code", "message", "field"?}}``) becomes an
``ArenaEnvError`` carrying the same code, message and field.

Retries: a 429 is retried for every call (the server refused it before doing anything), with
the ``Retry-After`` the server sent when it sent one. A 5xx or a connection error is retried
only for a call that is safe to repeat: reads, closing a run, and submissions (their
idempotency key makes a repeat return the first answer's ids). Creating a run is not retried
after a 5xx or a lost connection, since the first attempt may have created it.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol, TypeAlias, TypedDict, TypeVar

__all__ = [
    "ArenaEnv",
    "ArenaEnvError",
    "Completion",
    "HttpResponse",
    "Message",
    "Prompt",
    "Reward",
    "RewardFeed",
    "Run",
    "RunSession",
    "Submission",
    "Transport",
    "urllib_transport",
]

USER_AGENT = "arena-env/0.1"
API_PREFIX = "/api/env/v1"
# The server's own bound on a group (the 1-16 completions per submission).
MAX_GROUP = 16

JsonObject: TypeAlias = dict[str, Any]
RewardStatus: TypeAlias = Literal["pending", "complete", "expired", "cancelled"]
RewardSource: TypeAlias = Literal["human", "model"]
T = TypeVar("T")


class Message(TypedDict):
    role: str
    content: str


Prompt: TypeAlias = str | Sequence[Mapping[str, Any]]


class Completion(TypedDict, total=False):
    text: str
    meta: Mapping[str, Any]


class ArenaEnvError(Exception):
    """A refused or failed call.

    ``status`` is the HTTP status (0 when no answer came: a connection error or a timeout),
    ``code`` the API's error code (``connection_error``, ``timeout`` or ``http_error`` when the
    answer carried none), ``message`` its text and ``field`` the request field it names.
    """

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes


class Transport(Protocol):
    """Sends one request and returns the answer, whatever its status; raises ``OSError``
    (``ConnectionError``, ``TimeoutError``...) when no answer came."""

    def __call__(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float,
    ) -> HttpResponse: ...


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect of an API call (a proxy's login page, http to https) is an error to show,
    # not something to follow with the token attached.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def urllib_transport(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    body: bytes | None,
    timeout: float,
) -> HttpResponse:
    """The default transport: ``urllib`` (which honours the usual proxy variables)."""
    request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)  # noqa: S310 (the caller's URL, http or https)
    try:
        with _opener.open(request, timeout=timeout) as response:
            return HttpResponse(response.status, dict(response.headers.items()), response.read())
    except urllib.error.HTTPError as error:
        with error:
            return HttpResponse(error.code, dict(error.headers.items()), error.read())
    except urllib.error.URLError as error:
        reason = error.reason
        if isinstance(reason, OSError):
            raise reason from error
        raise ConnectionError(str(reason)) from error


@dataclass(frozen=True)
class Run:
    """A run as the API returns it. ``counts`` holds its submissions', completions' (pending,
    complete, expired, cancelled), votes' and battles' numbers; ``webhook_secret`` is only in the answer
    to ``create_run`` (keep it to check the webhook's signatures); ``raw`` keeps every field,
    including ones added later."""

    id: str
    name: str
    state: str
    references: tuple[str, ...] = ()
    votes_per_completion: int | None = None
    ttl_hours: int | None = None
    share: float | None = None
    webhook_url: str = ""
    created_at: str | None = None
    closed_at: str | None = None
    closed_reason: str | None = None  # "trainer", or "idle" when its lease ran out
    last_activity_at: str | None = None  # the last call on the run: its lease's start
    counts: Mapping[str, int] = field(default_factory=dict)
    webhook_secret: str | None = field(default=None, repr=False)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        def optional(key: str, kind: Callable[[Any], T]) -> T | None:
            value = data.get(key)
            return None if value is None else kind(value)

        return cls(
            id=str(data["id"]),
            name=str(data.get("name", "")),
            state=str(data.get("state", "")),
            references=tuple(str(r) for r in data.get("references") or ()),
            votes_per_completion=optional("votes_per_completion", int),
            ttl_hours=optional("ttl_hours", int),
            share=optional("share", float),
            webhook_url=str(data.get("webhook_url") or ""),
            created_at=optional("created_at", str),
            closed_at=optional("closed_at", str),
            closed_reason=optional("closed_reason", str),
            last_activity_at=optional("last_activity_at", str),
            counts={str(k): int(v) for k, v in (data.get("counts") or {}).items()},
            webhook_secret=optional("webhook_secret", str),
            raw=dict(data),
        )


@dataclass(frozen=True)
class Submission:
    """A submitted group: its id and its completions' ids, in the order submitted.
    ``replayed`` is true when the idempotency key had been seen (nothing new was created)."""

    id: str
    completion_ids: tuple[str, ...]
    idempotency_key: str
    replayed: bool


@dataclass(frozen=True)
class Reward:
    """One completion's reward record. ``score`` is its Bradley-Terry rating within its group
    (and the references), on the Elo scale, 0 = the group's mean, with a 95% interval;
    ``None`` until votes allow one. ``source`` says whose score it is: ``"human"`` (visitors'
    votes), ``"model"`` (the arena's reward model, at once, in a run created with
    ``reward_model=True``; the humans' supersede it when their votes give one) or ``None``."""

    completion_id: str
    submission_id: str
    meta: Any
    votes: int
    wins: int
    losses: int
    ties: int
    both_bad: int
    win_rate: float | None
    score: float | None
    score_low: float | None
    score_high: float | None
    status: RewardStatus
    source: RewardSource | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reward:
        def number(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        status = data["status"]
        if status not in ("pending", "complete", "expired", "cancelled"):
            raise ArenaEnvError(0, "bad_response", f"Unknown reward status {status!r}.")
        source = data.get("source")
        if source not in (None, "human", "model"):
            raise ArenaEnvError(0, "bad_response", f"Unknown reward source {source!r}.")
        return cls(
            completion_id=str(data["completion_id"]),
            submission_id=str(data["submission_id"]),
            meta=data.get("meta"),
            votes=int(data.get("votes", 0)),
            wins=int(data.get("wins", 0)),
            losses=int(data.get("losses", 0)),
            ties=int(data.get("ties", 0)),
            both_bad=int(data.get("both_bad", 0)),
            win_rate=number("win_rate"),
            score=number("score"),
            score_low=number("score_low"),
            score_high=number("score_high"),
            status=status,
            source=source,
        )

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def done(self) -> bool:
        """No further vote will change it: complete, expired or cancelled."""
        return self.status != "pending"


class RewardFeed(Iterator[Reward]):
    """The run's reward records after a cursor, page by page, until a page comes back empty.

    ``cursor`` is where the next read starts: keep it and pass it to ``ArenaEnv.rewards`` to
    resume later without seeing a record twice (a record comes again only when it changed).
    """

    def __init__(self, env: ArenaEnv, run_id: str, cursor: int, limit: int) -> None:
        self._env = env
        self._run_id = run_id
        self._limit = limit
        self._page: list[Reward] = []
        self._exhausted = False
        self.cursor = cursor

    def __iter__(self) -> RewardFeed:
        return self

    def __next__(self) -> Reward:
        while not self._page:
            if self._exhausted:
                raise StopIteration
            records, next_cursor = self._env.rewards_page(
                self._run_id, cursor=self.cursor, limit=self._limit
            )
            # An empty page, or one that does not move the cursor, is the end of the feed
            # for now (the second guards against looping on a server that misbehaves).
            if not records or next_cursor <= self.cursor:
                self._exhausted = True
            self.cursor = max(self.cursor, next_cursor)
            self._page = records[::-1]
        return self._page.pop()


@dataclass
class _FeedState:
    """What ``wait`` has read of a run's feed: its cursor and the latest record per id."""

    cursor: int = 0
    latest: dict[str, Reward] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _completion_item(
    completion: str | Mapping[str, Any], meta: Mapping[str, Any] | None
) -> JsonObject:
    if isinstance(completion, str):
        item: JsonObject = {"text": completion}
    elif isinstance(completion, Mapping) and isinstance(completion.get("text"), str):
        item = {"text": completion["text"]}
        if completion.get("meta") is not None:
            item["meta"] = dict(completion["meta"])
    else:
        raise TypeError(
            f"A completion is a str or a {{'text', 'meta'}} mapping, not {completion!r}"
        )
    if meta is not None:
        item["meta"] = dict(meta)
    return item


def _prompt_json(prompt: Prompt) -> str | list[JsonObject]:
    if isinstance(prompt, str):
        return prompt
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def default_idempotency_key(run_id: str, body: Mapping[str, Any]) -> str:
    """A key derived from the request itself: the same group sent again (a retry, a restarted
    job) gets the same key, so the server answers with the ids it gave the first time."""
    canonical = json.dumps(
        {"run": run_id, "body": body}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return "sha256-" + hashlib.sha256(canonical.encode()).hexdigest()


class RunSession:
    """One run and the client that made it, usable with ``with``: the run is closed when the
    block ends, whether it ends normally or with an exception (which then propagates; a
    failure to close does not hide it). ``env.start_run(...)`` makes one; the calls below are
    the client's, with this run's id."""

    def __init__(self, env: ArenaEnv, run: Run) -> None:
        self.env = env
        self.run = run

    @property
    def id(self) -> str:
        return self.run.id

    def __repr__(self) -> str:
        return f"RunSession({self.run.id!r}, {self.env!r})"

    def __enter__(self) -> RunSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except ArenaEnvError:
            if exc is None:
                raise  # while an exception leaves the block, it says what went wrong

    def submit(
        self,
        prompt: Prompt,
        completions: Sequence[str | Mapping[str, Any]],
        meta: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        idempotency_key: str | None = None,
    ) -> Submission:
        return self.env.submit(self.id, prompt, completions, meta, idempotency_key)

    def rewards(self, cursor: int = 0, limit: int = 100) -> RewardFeed:
        return self.env.rewards(self.id, cursor, limit)

    def wait(
        self,
        completion_ids: Iterable[str],
        timeout: float,
        poll: float = 2.0,
        accept_model: bool = False,
    ) -> dict[str, Reward]:
        return self.env.wait(self.id, completion_ids, timeout, poll, accept_model)

    def cancel_submissions(self, older_than_seconds: int = 0) -> list[str]:
        return self.env.cancel_submissions(self.id, older_than_seconds)

    def refresh(self) -> Run:
        self.run = self.env.run(self.id)
        return self.run

    def close(self) -> Run:
        self.run = self.env.close_run(self.id)
        return self.run


def _close_on_exit(env: ArenaEnv, run_ids: Iterable[str], *, failing: bool) -> None:
    """Close each run; while an exception is leaving the block a close error is dropped (the
    exception says what went wrong), otherwise the first one is raised once all were tried."""
    first: ArenaEnvError | None = None
    for run_id in list(run_ids):
        try:
            env.close_run(run_id)
        except ArenaEnvError as error:
            first = first or error
    if first is not None and not failing:
        raise first


class ArenaEnv:
    """A client of one arena's environment API.

    ``url`` is the site's root (``http://127.0.0.1:8000``); ``token`` an API token with the
    ``env`` scope. ``retries`` and ``backoff`` (seconds, doubled each attempt, with jitter,
    at most ``max_backoff``) govern the retries described in the module's docstring: by
    default ten retries, a minute and more of waiting, so that an arena restarted during a
    training run (a deploy, a failover) costs the trainer a pause rather than its run.
    ``transport`` replaces the HTTP layer (see ``Transport``).

    Used with ``with``, the client closes on exit every run it created and did not close
    (also when the block raises), so a crashed loop leaves no run open.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 10,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        transport: Transport | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http:// or https://, not {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._token = token
        self._transport: Transport = transport or urllib_transport
        self._feeds: dict[str, _FeedState] = {}
        self._feeds_lock = threading.Lock()
        self._created: dict[str, None] = {}  # runs created and not closed, in order

    def __repr__(self) -> str:
        return f"ArenaEnv({self.url!r})"  # never the token

    def __enter__(self) -> ArenaEnv:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _close_on_exit(self, self._created, failing=exc is not None)

    # --- runs ------------------------------------------------------------------------------
    def create_run(
        self,
        name: str,
        references: Iterable[str] = (),
        votes_per_completion: int = 3,
        ttl_hours: int = 72,
        share: float = 0.2,
        webhook_url: str | None = None,
        reward_model: bool = False,
    ) -> Run:
        """A new run. ``reward_model=True`` asks for the arena's model rewards at once (each
        completion's record first comes with ``source == "model"``); an arena without a reward
        model refuses it (``ArenaEnvError`` 409, ``field == "reward_model"``)."""
        body: JsonObject = {
            "name": name,
            "references": list(references),
            "votes_per_completion": votes_per_completion,
            "ttl_hours": ttl_hours,
            "share": share,
        }
        if webhook_url is not None:
            body["webhook_url"] = webhook_url
        if reward_model:
            body["reward_model"] = True
        _, data = self._call("POST", "/runs", body, idempotent=False)
        run = Run.from_json(data)
        self._created[run.id] = None
        return run

    def start_run(
        self,
        name: str,
        references: Iterable[str] = (),
        votes_per_completion: int = 3,
        ttl_hours: int = 72,
        share: float = 0.2,
        webhook_url: str | None = None,
        reward_model: bool = False,
    ) -> RunSession:
        """``create_run``, as a ``RunSession``: ``with env.start_run("r") as run:`` closes the
        run when the block ends."""
        run = self.create_run(
            name, references, votes_per_completion, ttl_hours, share, webhook_url, reward_model
        )
        return RunSession(self, run)

    def run(self, run_id: str) -> Run:
        _, data = self._call("GET", f"/runs/{_segment(run_id)}")
        return Run.from_json(data)

    def close_run(self, run_id: str) -> Run:
        _, data = self._call("POST", f"/runs/{_segment(run_id)}/close", {})
        self._created.pop(str(run_id), None)
        return Run.from_json(data)

    def runs(self, *, limit: int = 100) -> Iterator[Run]:
        """This token's runs, newest first (state, counts, last activity), page by page."""
        offset: int | None = 0
        while offset is not None:
            query = urllib.parse.urlencode({"offset": offset, "limit": limit})
            _, data = self._call("GET", f"/runs?{query}")
            yield from (Run.from_json(r) for r in data["runs"])
            next_offset = data.get("next_offset")
            offset = int(next_offset) if next_offset is not None else None

    def cancel_submission(self, run_id: str, submission_id: str) -> list[str]:
        """Cancel the submission's pending completions (no longer served; ``cancelled`` in the
        feed); returns the ids of the submissions this call cancelled (none on a repeat)."""
        path = f"/runs/{_segment(run_id)}/submissions/{_segment(submission_id)}/cancel"
        _, data = self._call("POST", path, {})
        return [str(i) for i in data["submission_ids"]]

    def cancel_submissions(self, run_id: str, older_than_seconds: int = 0) -> list[str]:
        """Cancel the pending completions of every submission created at least
        ``older_than_seconds`` ago; returns the ids of the submissions it cancelled."""
        _, data = self._call(
            "POST",
            f"/runs/{_segment(run_id)}/submissions/cancel",
            {"older_than_seconds": older_than_seconds},
        )
        return [str(i) for i in data["submission_ids"]]

    # --- submissions -----------------------------------------------------------------------
    def submit(
        self,
        run_id: str,
        prompt: Prompt,
        completions: Sequence[str | Mapping[str, Any]],
        meta: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        idempotency_key: str | None = None,
    ) -> Submission:
        """Submit a group of completions of one prompt (1-16).

        ``prompt`` is a string or role/content messages. ``completions`` are strings or
        ``{"text", "meta"}`` mappings. ``meta`` is one mapping for every completion or a list
        with one per completion; it comes back untouched with each reward. Without an
        ``idempotency_key`` the key is a hash of the request, so a repeated call returns the
        same ids; pass one of your own to submit the same group twice on purpose.
        """
        if isinstance(completions, str | bytes) or not completions:
            raise ValueError("completions is a non-empty list of completions")
        if meta is None or isinstance(meta, Mapping):
            metas: list[Mapping[str, Any] | None] = [meta] * len(completions)
        else:
            metas = list(meta)
            if len(metas) != len(completions):
                raise ValueError(
                    f"meta has {len(metas)} entries for {len(completions)} completions"
                )
        body: JsonObject = {
            "prompt": _prompt_json(prompt),
            "completions": [
                _completion_item(c, m) for c, m in zip(completions, metas, strict=True)
            ],
        }
        key = idempotency_key or default_idempotency_key(run_id, body)
        status, data = self._call(
            "POST", f"/runs/{_segment(run_id)}/submissions", {"idempotency_key": key, **body}
        )
        return Submission(
            id=str(data["id"]),
            completion_ids=tuple(str(c["id"]) for c in data["completions"]),
            idempotency_key=key,
            replayed=status == 200,
        )

    # --- rewards ---------------------------------------------------------------------------
    def rewards_page(
        self, run_id: str, *, cursor: int = 0, limit: int = 100
    ) -> tuple[list[Reward], int]:
        """One page of the feed: the records after ``cursor`` and the cursor after them."""
        query = urllib.parse.urlencode({"cursor": cursor, "limit": limit})
        _, data = self._call("GET", f"/runs/{_segment(run_id)}/rewards?{query}")
        records = [Reward.from_json(r) for r in data["records"]]
        return records, int(data["next_cursor"])

    def rewards(self, run_id: str, cursor: int = 0, limit: int = 100) -> RewardFeed:
        """Iterate over the run's reward records after ``cursor``, following the cursor until
        a page is empty. The returned feed's ``.cursor`` is where to resume."""
        return RewardFeed(self, run_id, cursor, limit)

    def wait(
        self,
        run_id: str,
        completion_ids: Iterable[str],
        timeout: float,
        poll: float = 2.0,
        accept_model: bool = False,
    ) -> dict[str, Reward]:
        """Read the feed until every listed completion is done (complete or expired) or
        ``timeout`` seconds have passed; return the latest record of each listed completion
        that has one. With ``accept_model`` a completion is also done once its record has a
        score from the reward model or from humans (``source`` set): in a run created with
        ``reward_model=True`` that is at once. Safe to call from several threads at once: they
        share one read of the run's feed, kept by this client between calls."""
        wanted = list(dict.fromkeys(completion_ids))
        deadline = time.monotonic() + timeout

        def done(record: Reward) -> bool:
            return record.done or (accept_model and record.source is not None)

        while True:
            latest = self._drain(run_id)
            found = {cid: latest[cid] for cid in wanted if cid in latest}
            if len(found) == len(wanted) and all(done(r) for r in found.values()):
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return found
            time.sleep(min(poll, remaining))

    def _drain(self, run_id: str) -> dict[str, Reward]:
        with self._feeds_lock:
            state = self._feeds.setdefault(run_id, _FeedState())
        with state.lock:
            feed = self.rewards(
                run_id, cursor=state.cursor, limit=1000
            )  # the server's largest page
            for record in feed:
                state.latest[record.completion_id] = record
            state.cursor = feed.cursor
            return dict(state.latest)

    # --- HTTP ------------------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        idempotent: bool = True,
    ) -> tuple[int, JsonObject]:
        url = f"{self.url}{API_PREFIX}{path}"
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        payload = None
        if body is not None:
            payload = json.dumps(body, ensure_ascii=False).encode()
            headers["Content-Type"] = "application/json"
        attempt = 0
        while True:
            try:
                response = self._transport(
                    method, url, headers=headers, body=payload, timeout=self.timeout
                )
            except OSError as error:
                failure = ArenaEnvError(
                    0,
                    "timeout" if isinstance(error, TimeoutError) else "connection_error",
                    f"{method} {url}: {error or type(error).__name__}",
                )
                if not idempotent or attempt >= self.retries:
                    raise failure from error
                self._sleep(attempt, None)
                attempt += 1
                continue
            if 200 <= response.status < 300:
                return response.status, _json_object(response)
            retryable = response.status == 429 or (idempotent and response.status >= 500)
            if not retryable or attempt >= self.retries:
                raise _error_from(response)
            self._sleep(attempt, response.headers)
            attempt += 1

    def _sleep(self, attempt: int, headers: Mapping[str, str] | None) -> None:
        delay = min(self.max_backoff, self.backoff * 2**attempt) * (0.5 + random.random() / 2)
        retry_after = _retry_after(headers)
        if retry_after is not None:
            delay = min(self.max_backoff, retry_after)
        time.sleep(delay)


def _segment(value: str) -> str:
    return urllib.parse.quote(str(value), safe="")


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the exponential back-off applies instead


def _json_object(response: HttpResponse) -> JsonObject:
    try:
        data = json.loads(response.body)
    except ValueError:
        raise ArenaEnvError(response.status, "bad_response", "The answer is not JSON.") from None
    if not isinstance(data, dict):
        raise ArenaEnvError(response.status, "bad_response", "The answer is not a JSON object.")
    return data


def _error_from(response: HttpResponse) -> ArenaEnvError:
    try:
        detail = json.loads(response.body)["error"]
        return ArenaEnvError(
            response.status, str(detail["code"]), str(detail["message"]), detail.get("field")
        )
    except (ValueError, KeyError, TypeError):
        text = response.body[:200].decode("utf-8", "replace").strip()
        return ArenaEnvError(response.status, "http_error", text or f"HTTP {response.status}")


# A helper for adapters: the text of a completion in any of the shapes trainers pass.
def completion_text(completion: Any) -> str:
    """A string as is; a conversational completion (a list of role/content messages, or one
    message) as the content of its assistant messages, joined."""
    if isinstance(completion, str):
        return completion
    if _as_message(completion) is not None:
        completion = [completion]
    if isinstance(completion, Sequence):
        messages = [m for m in map(_as_message, completion) if m is not None]
        parts = [
            _content_text(m.get("content"))
            for m in messages
            if m.get("role", "assistant") == "assistant"
        ]
        return "\n\n".join(p for p in parts if p)
    raise TypeError(f"Cannot read a completion's text from {type(completion).__name__}")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # content parts: [{"type": "text", "text": ...}]
        parts = [p if isinstance(p, Mapping) else vars(p) for p in content if _is_part(p)]
        return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
    return ""


def _is_part(part: Any) -> bool:
    return isinstance(part, Mapping) or hasattr(part, "__dict__")


def _as_message(message: Any) -> Mapping[str, Any] | None:
    """A role/content mapping, or a message object (verifiers' and pydantic's messages carry
    ``role`` and ``content`` attributes) read as one; ``None`` for anything else."""
    if isinstance(message, Mapping):
        return message
    role = getattr(message, "role", None)
    if isinstance(role, str):
        return {"role": role, "content": getattr(message, "content", None)}
    return None


def prompt_messages(prompt: Any) -> Prompt:
    """A prompt as the API takes it: a string, or its role/content messages (text only)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        messages = [m for m in map(_as_message, prompt) if m is not None]
        return [
            {"role": str(m["role"]), "content": _content_text(m.get("content"))} for m in messages
        ]
    raise TypeError(f"Cannot read a prompt from {type(prompt).__name__}")
