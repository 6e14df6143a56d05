"""A GRPO run of the tiny local model through a verifiers 0.4 environment, rewarded by the arena.

    grpo_verifiers.py --url http://127.0.0.1:PORT --token TOKEN --name RUN_NAME --steps 3 \
                      --group-size 3 --timeout 60 --out result.json [--prompts 2] [--seed 0]

verifiers 0.4 ships no trainer (it hands rollouts to prime-rl), so this script does both halves
in one process. Rollouts: the environment is ``arena_env.adapters.verifiers.human_group_env``
over the ``vf_arena_tasks`` taskset, run the way verifiers' own eval runs one (in-process,
inside ``env.serving()``, its interception server and subprocess runtime); an episode is
``--group-size`` attempts at one prompt, which the environment's ``finalize`` submits to the
arena as one group and scores with the visitors' votes, waited for up to ``--timeout``
seconds. The model behind the rollouts is the policy itself, served by an OpenAI-compatible
loopback server on a thread of this process (``chat_server.py``), which keeps the token ids it
sampled for each rollout (verifiers sends the rollout's trace id upstream).

Update: one optimizer step per step, on that step's group. Advantages are the judged members'
scores normalised within the group (mean 0, divided by their standard deviation); a member not
judged in time gets advantage 0, so it moves nothing. The loss is ``-mean_i(A_i * mean_t log
p(token_t))`` over the completion tokens actually sampled: one update per generation is on
policy, so the clipped ratio of PPO/GRPO is 1 and this is its gradient; no KL term (no
reference model, as TRL's default ``beta=0``). One run is opened with the client as a context
manager (closed when the script ends, also when it raises). The script never votes.

``--out`` gets ``{"library", "version", "run_id", "closed", "parameters_changed", "steps":
[{"step", "completions", "scores", "judged", "group_size", "loss", "grad_norm"}]}``, a member
not judged having score ``None``; the exit status is 0 when every step ran and the run closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tiny.py and the taskset, beside it


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    return parser.parse_args(argv)


def advantages(scores: Sequence[float | None]) -> list[float]:
    """Group-normalised advantages over the judged members; 0 for an unjudged one."""
    judged = [s for s in scores if s is not None]
    if len(judged) < 2:
        return [0.0] * len(scores)
    mean = sum(judged) / len(judged)
    std = (sum((s - mean) ** 2 for s in judged) / (len(judged) - 1)) ** 0.5
    return [0.0 if s is None else (s - mean) / (std + 1e-4) for s in scores]


def grpo_step(
    model: Any, optimizer: Any, samples: Sequence[tuple[list[int], list[int]]], adv: list[float]
) -> tuple[float, float]:
    """One optimizer step; ``samples`` are (prompt ids, completion ids). Returns the loss and
    the gradient norm before clipping."""
    import torch

    model.train()
    optimizer.zero_grad()
    terms = []
    for (prompt_ids, completion_ids), a in zip(samples, adv, strict=True):
        if not completion_ids:
            continue
        ids = torch.tensor([prompt_ids + completion_ids])
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1]
        logp = torch.log_softmax(logits.float(), dim=-1)
        token_logp = logp.gather(1, torch.tensor(completion_ids)[:, None])[:, 0]
        terms.append(-a * token_logp.mean())
    loss = torch.stack(terms).sum() / len(samples)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach()), float(grad_norm)


async def train(args: argparse.Namespace, result: dict[str, Any]) -> None:
    import torch
    import verifiers.v1 as vf
    from arena_env import ArenaEnv
    from arena_env.adapters.verifiers import human_group_env, trace_completion, trace_rewards
    from chat_server import ChatServer, TinyPolicy
    from tiny import tiny_model_and_tokenizer

    torch.manual_seed(args.seed)
    model, tokenizer = tiny_model_and_tokenizer(seed=args.seed)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    policy = TinyPolicy(model, tokenizer, max_tokens=16)
    with ChatServer(policy) as server, ArenaEnv(args.url, args.token) as arena:
        with arena.start_run(args.name, votes_per_completion=1, share=1.0) as run:
            result["run_id"] = run.id
            print(f"run {run.id} opened", flush=True)
            env_class = human_group_env(arena, run.id, timeout=args.timeout, n=args.group_size)
            env = env_class(
                env_class.Config(
                    agent={"runtime": {"type": "subprocess"}},
                    taskset={"id": "vf_arena_tasks"},
                    interception={"type": "server"},
                )
            )
            tasks = list(env.taskset)[: args.prompts]
            ctx = vf.ModelContext(
                model="tiny",
                client=vf.EvalClientConfig(
                    base_url=server.base_url, api_key_var="ARENA_TINY_MODEL_KEY"
                ),
                sampling=vf.SamplingConfig(max_tokens=16, temperature=1.0),
            )
            async with env.serving():
                for step in range(args.steps):
                    [slot] = env.slots(tasks[step % len(tasks)])
                    episode = await env.run_slot(slot, ctx)
                    trace_rewards([episode])  # a failed episode raises here, not a 0.0
                    traces = list(episode.traces)
                    scores = [
                        (t.info.get("arena_reward") or {}).get("score")
                        if t.metrics.get("human_reward_judged")
                        else None
                        for t in traces
                    ]
                    samples = []
                    for trace in traces:
                        generation = policy.generations[trace.id]
                        if generation.text != trace_completion(trace):
                            raise RuntimeError(f"trace {trace.id}: not the text generated")
                        samples.append((generation.prompt_ids, generation.completion_ids))
                    loss, grad_norm = grpo_step(model, optimizer, samples, advantages(scores))
                    entry = {
                        "step": step,
                        "completions": [trace_completion(t) for t in traces],
                        "scores": scores,
                        "judged": sum(s is not None for s in scores),
                        "group_size": len(traces),
                        "loss": loss,
                        "grad_norm": grad_norm,
                    }
                    result["steps"].append(entry)
                    print(
                        f"step {step}: judged {entry['judged']}/{entry['group_size']} "
                        f"scores {scores} loss {loss:.4f} grad_norm {grad_norm:.4f}",
                        flush=True,
                    )
        result["closed"] = run.run.state == "closed"
    result["parameters_changed"] = any(
        not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters(), strict=True)
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    import verifiers
    from vf_arena_tasks import PROMPTS

    if not 1 <= args.prompts <= len(PROMPTS):
        raise SystemExit(f"--prompts is 1 to {len(PROMPTS)}")
    result: dict[str, Any] = {
        "library": "verifiers",
        "version": verifiers.__version__,
        "run_id": None,
        "steps": [],
        "closed": False,
        "parameters_changed": False,
    }
    try:
        asyncio.run(train(args, result))
    finally:
        Path(args.out).write_text(json.dumps(result, indent=2))
    done = [e["step"] for e in result["steps"]]
    if done != list(range(args.steps)) or not result["closed"]:
        print(f"steps {done} of {args.steps}, closed={result['closed']}", file=sys.stderr)
        return 1
    print(f"done: {args.steps} steps, run {result['run_id']} closed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
