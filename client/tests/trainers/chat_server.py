"""An OpenAI-compatible chat-completions server on loopback (``http.server``, a real socket),
the model behind verifiers 0.4's rollouts in these tests.

``ChatServer(reply)`` answers ``POST /v1/chat/completions`` with ``reply(messages, body,
headers)``'s text and records each request. ``TinyPolicy`` is a ``reply`` that samples from
the tiny local model (``tiny.py``) and keeps, per rollout, the token ids it generated: verifiers
sends each rollout's trace id upstream as ``X-Session-ID``, so a trainer can find the exact
tokens of a trace's completion instead of re-tokenizing its text.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[list[dict[str, Any]], dict[str, Any], Mapping[str, str]], str]


class ChatServer:
    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": self.path}})
                    return
                headers = {k.lower(): v for k, v in self.headers.items()}
                with outer.lock:
                    outer.requests.append({"body": body, "headers": headers})
                try:
                    text = outer.reply(body["messages"], body, headers)
                except Exception as error:  # the model failing is a 500 the test sees
                    self._send(500, {"error": {"message": repr(error)}})
                    return
                with outer.lock:
                    number = len(outer.requests)
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{number}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "tiny"),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass
class Generation:
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str


@dataclass
class TinyPolicy:
    """Samples from ``model`` (under a lock: one generation at a time, the model is shared
    with the training step) and records each generation under the rollout's trace id."""

    model: Any
    tokenizer: Any
    max_tokens: int = 16
    temperature: float = 1.0
    generations: dict[str, Generation] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # The arena refuses a text holding NUL (a byte-level vocabulary can spell one), and
        # a blank one: the policy never samples the first, nor an end before two tokens.
        self.suppressed = [
            i for i in range(len(self.tokenizer)) if "\x00" in self.tokenizer.decode([i])
        ]

    def __call__(
        self, messages: list[dict[str, Any]], body: dict[str, Any], headers: Mapping[str, str]
    ) -> str:
        import torch

        chat = [{"role": m["role"], "content": _text(m.get("content"))} for m in messages]
        prompt_ids = self.tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(prompt_ids, Mapping):  # transformers may answer a BatchEncoding
            prompt_ids = prompt_ids["input_ids"]
        with self.lock, torch.no_grad():
            was_training = self.model.training
            self.model.eval()
            output = self.model.generate(
                torch.tensor([prompt_ids]),
                attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                max_new_tokens=int(body.get("max_tokens") or self.max_tokens),
                min_new_tokens=2,
                suppress_tokens=self.suppressed or None,
                do_sample=True,
                temperature=self.temperature,
                top_k=0,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
            self.model.train(was_training)
        completion_ids = output[0, len(prompt_ids) :].tolist()
        text = self.tokenizer.decode(completion_ids, skip_special_tokens=True)
        session = headers.get("x-session-id")
        if session:
            with self.lock:
                self.generations[session] = Generation(list(prompt_ids), completion_ids, text)
        return text


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
