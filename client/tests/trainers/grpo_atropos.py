"""GRPO of the tiny local model through Atropos 0.4, rewarded by the arena's visitors.

    grpo_atropos.py --url URL --token TOKEN --name RUN --steps 3 --group-size 3 \
                    --timeout 60 --out result.json [--prompts 2] [--seed 0]

Atropos' pieces as its own trainers use them: a ``BaseEnv`` subclass (the adapter's
``atropos_env_class()`` around a ``HumanFeedbackEnv``) registered with Atropos' API server
(its FastAPI app, here on a loopback port in this process); each step its group is checked and
posted by ``BaseEnv.handle_send_to_api``, and the trainer pulls it back with ``/batch`` and
takes one policy-gradient step on the batch's tokens, masks and scores, with group-normalised
advantages. A partial group is padded (its unjudged members fully masked, at the judged
members' mean score), so the registered group size holds and the batch forms; a group with
fewer than two members judged is not posted and the step trains nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import tempfile
import time
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]  # this checkout's client, then tiny.py

from arena_env import ArenaEnv  # noqa: E402
from arena_env.adapters.atropos import HumanFeedbackEnv, atropos_env_class  # noqa: E402
from atropos_api import atropos_api, pull_batch, register_trainer  # noqa: E402
from tiny import tiny_model_and_tokenizer  # noqa: E402

PROMPTS = [
    "Explain why the sky is blue in two sentences.",
    "Write a short poem about the morning light over the hills.",
    "Why is the sea salty?",
    "Describe a fox in one line.",
]
MAX_NEW_TOKENS = 16
MAX_TOKEN_LEN = 512


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def generator(model: Any, tokenizer: Any) -> Any:
    import torch

    def generate(prompt: str, n: int) -> list[str]:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            return_tensors="pt",
        )
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                max_new_tokens=MAX_NEW_TOKENS,
                num_return_sequences=n,
                pad_token_id=tokenizer.pad_token_id,
            )
        texts = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
        # A random policy writes any byte, NUL too, which the arena refuses (400, the whole group).
        return [text.replace("\x00", "") for text in texts]

    return generate


def grpo_step(model: Any, optimizer: Any, batch: list[dict[str, Any]]) -> float:
    """One step of the unclipped GRPO objective (on-policy, one update per batch): each
    member's mean log-probability of its unmasked tokens, weighted by its advantage, the
    score's distance from its group's mean in units of the group's spread."""
    import torch

    model.train()
    losses = []
    for group in batch:
        scores = torch.tensor(group["scores"], dtype=torch.float32)
        advantages = (scores - scores.mean()) / (scores.std(unbiased=False) + 1e-4)
        for tokens, masks, advantage in zip(
            group["tokens"], group["masks"], advantages, strict=True
        ):
            labels = torch.tensor(masks[1:])
            keep = labels != -100
            if not keep.any():
                continue  # a padded member: nothing to learn from it
            logits = model(torch.tensor([tokens])).logits[0, :-1]
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            taken = logprobs[keep].gather(1, labels[keep].unsqueeze(1)).squeeze(1)
            losses.append(-advantage * taken.mean())
    if not losses:
        return 0.0
    loss = torch.stack(losses).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.detach())


async def train(args: argparse.Namespace, run_id: str, env: ArenaEnv, api: str) -> list[dict]:
    import torch
    from atroposlib.envs.base import BaseEnvConfig
    from atroposlib.envs.server_handling.server_manager import ServerBaseline

    torch.manual_seed(args.seed)
    model, tokenizer = tiny_model_and_tokenizer(seed=args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    feedback = HumanFeedbackEnv(
        env,
        run_id,
        itertools.cycle(PROMPTS[: max(1, args.prompts)]),
        generator(model, tokenizer),
        group_size=args.group_size,
        timeout=args.timeout,
        poll=min(2.0, max(0.2, args.timeout / 20)),
        tokenizer=tokenizer,
        partial="pad",
    )
    with tempfile.TemporaryDirectory() as tokenizer_dir:
        tokenizer.save_pretrained(tokenizer_dir)  # BaseEnv loads its tokenizer by name
        config = BaseEnvConfig(
            group_size=args.group_size,
            use_wandb=False,
            tokenizer_name=tokenizer_dir,
            rollout_server_url=api,
            max_token_length=MAX_TOKEN_LEN,
            total_steps=args.steps,
            wandb_name="arena",
        )
        atropos = atropos_env_class()(feedback, config, ServerBaseline(), testing=True)
    register_trainer(
        api, batch_size=args.group_size, num_steps=args.steps, max_token_len=MAX_TOKEN_LEN
    )
    await atropos.register_env()
    await atropos.get_server_info()

    steps = []
    for step in range(args.steps):
        started = time.monotonic()
        item = await atropos.get_next_item()
        model.eval()
        # Atropos' handle_env would log and drop an error of the arena's: here it ends the run.
        group, backlog = await atropos.collect_trajectories(item)
        atropos.backlog.extend(backlog)
        scores = [None] * args.group_size
        if group is not None:
            scores = group["group_overrides"]["arena_scores"]
            await atropos.handle_send_to_api(await atropos.postprocess_histories(group), item)
        batch = await asyncio.to_thread(pull_batch, api) if group is not None else None
        loss = grpo_step(model, optimizer, batch) if batch else None
        judged = sum(s is not None for s in scores)
        steps.append(
            {
                "step": step,
                "scores": scores,
                "judged": judged,
                "group_size": args.group_size,
                "trained": batch is not None,
                "loss": loss,
            }
        )
        trained = f"trained, loss {loss:.4f}" if loss is not None else "no batch, skipped"
        print(
            f"step {step}: judged {judged}/{args.group_size}, {trained} "
            f"({time.monotonic() - started:.1f} s)",
            flush=True,
        )
    return steps


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import atroposlib

    result: dict[str, Any] = {
        "library": "atropos",
        "version": getattr(atroposlib, "__version__", None) or version("atroposlib"),
        "run_id": None,
        "steps": [],
        "closed": False,
    }
    env = ArenaEnv(args.url, args.token)
    try:
        with atropos_api() as api:
            with env.start_run(args.name, votes_per_completion=1, share=1.0) as run:
                result["run_id"] = run.id
                result["steps"] = asyncio.run(train(args, run.id, env, api))
            result["closed"] = True
    except Exception as error:  # noqa: BLE001 (the contract: the error on stderr, non-zero)
        traceback.print_exc()
        print(f"grpo_atropos: {type(error).__name__}: {error}", file=sys.stderr)
        Path(args.out).write_text(json.dumps(result, indent=2))
        raise SystemExit(1) from error
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
