"""A small stateful stand-in for the arena's environment API on loopback, for the trainer
scripts' tests: runs, submissions (refusing what the arena refuses: a blank text, a NUL), their
cancelling, a reward feed with its cursor, and close, over a real socket (``http.server``).
Which members of each submission are judged, and how, is scripted."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PREFIX = "/api/env/v1"


class FakeArena:
    """Runs, submissions, their cancelling and a reward feed. ``judged(submission_index,
    member_index)`` is the score a member gets (at once), or ``None`` for one never judged."""

    def __init__(self, judged: Callable[[int, int], float | None]) -> None:
        self.judged = judged
        self.runs: dict[str, dict[str, Any]] = {}
        self.submissions: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.cancelled: list[str] = []  # submission ids
        self.answered: list[dict[str, Any]] = []  # the submissions' answers
        self.lock = threading.Lock()
        arena = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                with arena.lock:
                    status, answer = arena.handle(self.command, self.path, body)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        path, _, query = path.partition("?")
        parts = path.removeprefix(PREFIX).strip("/").split("/")
        if method == "POST" and parts == ["runs"]:
            run = {"id": str(uuid.uuid4()), "name": body["name"], "state": "open", **body}
            self.runs[run["id"]] = run
            return 201, run
        run = self.runs[parts[1]]
        if method == "POST" and parts[2:] == ["close"]:
            run["state"] = "closed"
            return 200, run
        if method == "POST" and parts[2:] == ["submissions"]:
            index = len(self.submissions)
            for member, item in enumerate(body["completions"]):
                # What the arena refuses: a blank text, or one it cannot store.
                if not item["text"].strip() or "\x00" in item["text"]:
                    field = f"completions.{member}.text"
                    return 400, {"error": {"code": "invalid", "message": field, "field": field}}
            submission = {"id": str(uuid.uuid4()), "completions": []}
            for member, item in enumerate(body["completions"]):
                cid = str(uuid.uuid4())
                submission["completions"].append({"id": cid})
                score = self.judged(index, member)
                self.records.append(
                    {
                        "completion_id": cid,
                        "submission_id": submission["id"],
                        "meta": item.get("meta"),
                        "votes": int(score is not None),
                        "score": score,
                        "status": "pending" if score is None else "complete",
                    }
                )
            self.submissions.append(body)
            self.answered.append(submission)
            return 201, submission
        if method == "POST" and parts[2] == "submissions" and parts[4:] == ["cancel"]:
            # The adapter cancels a group still waiting once it stops waiting for it.
            late = [
                r
                for r in self.records
                if r["submission_id"] == parts[3] and r["status"] == "pending"
            ]
            self.cancelled.append(parts[3])
            self.records.extend({**r, "status": "cancelled"} for r in late)
            return 200, {"submission_ids": [parts[3]] if late else []}
        if method == "GET" and parts[2:] == ["rewards"]:
            cursor = int(dict(p.split("=") for p in query.split("&"))["cursor"])
            page = self.records[cursor:]
            return 200, {"records": page, "next_cursor": cursor + len(page)}
        return 404, {"error": {"code": "not_found", "message": path}}

    def __enter__(self) -> FakeArena:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
