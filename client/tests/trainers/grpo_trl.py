"""A GRPO run of the tiny local model with TRL's own ``GRPOTrainer``, rewarded by the arena.

    grpo_trl.py --url http://127.0.0.1:PORT --token TOKEN --name RUN_NAME --steps 3 \
                --group-size 3 --timeout 60 --out result.json [--prompts 2] [--seed 0]

One run is opened with the client as a context manager (closed when the script ends, also when
training raises); the reward function is ``arena_env.adapters.trl.human_reward``: each step's
group of ``--group-size`` completions of one prompt is submitted, and the visitors' votes give
the rewards, waited for up to ``--timeout`` seconds. The script never votes.

A member not judged in time is ``None``, which TRL 1.16 turns into NaN: the group's baseline
and scale are taken over the judged members only (``nanmean``/``nanstd``) and an unjudged
member's advantage is set to 0, so a partial group trains on the judged ones and a group with
none judged contributes nothing (a zero loss) instead of failing the step. ``record_rewards``
keeps what each step got, written to ``--out`` as the trainer-script contract says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tiny.py, beside this script

PROMPTS = (
    "Why is the sea salty?",
    "Write a short poem about the morning light over the hills.",
    "Explain why the sky is blue in two sentences.",
    "What makes a good answer?",
)


def record_rewards(
    reward: Callable[..., list[float | None]],
    steps: list[dict[str, Any]],
    *,
    group_size: int,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> Callable[..., list[float | None]]:
    """``reward`` (a TRL reward function) that also appends to ``steps`` one entry per call:
    the trainer's step, the scores it returned (``None`` for a member not judged in time) and
    how many were judged. A call holds one group per step here (the batch is one group);
    a larger batch is recorded group by group, each under the same step."""

    def recorded(
        prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        scores = reward(prompts, completions, **kwargs)
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", len(steps))
        for start in range(0, len(scores), group_size):
            group = [None if s is None else float(s) for s in scores[start : start + group_size]]
            entry = {
                "step": int(step),
                "scores": group,
                "judged": sum(s is not None for s in group),
                "group_size": len(group),
            }
            steps.append(entry)
            if on_step is not None:
                on_step(entry)
        return scores

    recorded.__name__ = recorded.__qualname__ = getattr(reward, "__name__", "human_reward")
    return recorded


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    if not 1 <= args.prompts <= len(PROMPTS):
        raise SystemExit(f"--prompts is 1 to {len(PROMPTS)}")

    import trl
    from arena_env import ArenaEnv
    from arena_env.adapters.trl import human_reward
    from datasets import Dataset
    from tiny import tiny_model_and_tokenizer
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class Progress(TrainerCallback):  # type: ignore[misc]
        """One line per finished step, with what the optimiser step logged."""

        def __init__(self) -> None:
            self.logs: dict[int, dict[str, float]] = {}

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                self.logs[state.global_step] = {
                    k: float(v) for k, v in logs.items() if isinstance(v, int | float)
                }

    result: dict[str, Any] = {
        "library": "trl",
        "version": trl.__version__,
        "run_id": None,
        "steps": [],
        "closed": False,
    }
    out = Path(args.out)
    group = args.group_size
    model, tokenizer = tiny_model_and_tokenizer(seed=args.seed)
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS[: args.prompts]]
    )

    def printed(entry: dict[str, Any]) -> None:
        print(
            f"step {entry['step']}: judged {entry['judged']}/{entry['group_size']} "
            f"scores {entry['scores']}",
            flush=True,
        )

    with tempfile.TemporaryDirectory(prefix="grpo-trl-") as output_dir:
        config = GRPOConfig(
            output_dir=output_dir,
            max_steps=args.steps,
            # One group per step: the batch is one prompt's num_generations completions.
            per_device_train_batch_size=group,
            gradient_accumulation_steps=1,
            steps_per_generation=1,
            num_generations=group,
            max_completion_length=16,
            learning_rate=1e-4,
            use_vllm=False,
            use_cpu=True,
            report_to="none",
            logging_steps=1,
            save_strategy="no",
            seed=args.seed,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        progress = Progress()
        with ArenaEnv(args.url, args.token) as env:
            with env.start_run(args.name, votes_per_completion=1, share=1.0) as run:
                result["run_id"] = run.id
                print(f"run {run.id} opened", flush=True)
                reward = record_rewards(
                    human_reward(env, run.id, timeout=args.timeout, group_size=group),
                    result["steps"],
                    group_size=group,
                    on_step=printed,
                )
                trainer = GRPOTrainer(
                    model=model,
                    processing_class=tokenizer,
                    reward_funcs=[reward],
                    args=config,
                    train_dataset=dataset,
                    callbacks=[progress],
                )
                trainer.train()
            result["closed"] = run.run.state == "closed"
        for entry in result["steps"]:
            logged = progress.logs.get(entry["step"] + 1)
            if logged is not None:  # what the optimiser step after this group logged
                entry["loss"] = logged.get("loss")
                entry["grad_norm"] = logged.get("grad_norm")
    out.write_text(json.dumps(result, indent=2))
    done = sorted({e["step"] for e in result["steps"]})
    if done != list(range(args.steps)) or not result["closed"]:
        print(f"steps {done} of {args.steps}, closed={result['closed']}", file=sys.stderr)
        return 1
    print(f"done: {args.steps} steps, run {result['run_id']} closed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
