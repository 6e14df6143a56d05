"""Held-out accuracy and calibration of the reward model on MT-bench's human votes.

    .venv311/bin/python -m bench.reward_model [--folds 5] [--seed 0]

(the ``reward-model`` extra installed: a Python 3.11 virtualenv with requirements/dev.txt and
requirements/reward-model.txt). Data: ``arena/demo_data/mt_bench_human_votes`` (1,751 expert
and author votes on 80 questions, both turns; the answers each judge saw). Each vote compares
two models' answers to one turn of one question: the prompt is that turn's user message and
the answer that model's answer to it.

Split: ``--folds`` folds BY QUESTION (every vote on a question is in one fold, so no question
is both trained and tested on); each method is fitted on the other folds and scored on the
held-out one, and the figures pool the held-out predictions. Penalties are chosen inside each
training fold (3 inner folds, again by question), never on the held-out fold.

Methods:
  (a) longer answer: the answer with more tokens (o200k, as the style counts) wins; its
      probability is the training folds' rate at which the longer answer won (ties half);
  (b) style-only BT: the head on the four style features alone (log(1 + tokens, headers,
      list items, bold spans));
  (c) embedding BT: the head on all-MiniLM-L6-v2's answer embedding and its cosine to the
      prompt; (c+s) the same plus the style features (what the arena's refit fits).

Ties: a tie and a "both bad" vote count half a win in every fit (as the arena's ratings count
them) and as y = 0.5 in the log-loss and the Brier score; accuracy and the calibration table
are over the decisive votes only (ties excluded), and a prediction of exactly 0.5 counts as
half right. Calibration is the symmetric reliability: over decisive votes, the probability
given to the side predicted to win (the confidence, in bins) against how often that side won;
ECE is the bins' share-weighted |confidence - accuracy|. The subset's sides are skewed (1,040
"model_b" wins to 294 "model_a": only votes whose side order matched GPT-4's file were kept
upstream, see the data's SOURCE.txt), which a symmetric model neither can nor should fit, so
P(model_a) itself is not tabulated. Each figure is printed with its ratio to the longer-answer anchor of the same run.

Embeddings are cached in ``var/bench_reward_model_embeddings.npz`` (keyed by the texts' hash).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "arena" / "demo_data" / "mt_bench_human_votes"
ANSWERS_FALLBACK = ROOT / "arena" / "demo_data" / "mt_bench" / "model_answer"
CACHE = ROOT / "var" / "bench_reward_model_embeddings.npz"
OUTCOME = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5}


@dataclass
class Data:
    votes: pd.DataFrame  # question_id, turn, a (answer index), b, y
    prompts: list[str]  # per answer
    answers: list[str]
    styles: np.ndarray  # (answers, 4)


def load() -> Data:
    sys.path.insert(0, str(ROOT))
    from answer_style import style_counts
    from ratings.reward_model.features import style_matrix

    votes = pd.read_csv(DATA / "human_votes_subset.csv")
    conversations: dict[tuple[str, int], tuple[list[str], list[str]]] = {}
    for line in (DATA / "answers_from_human_file.jsonl").read_text().splitlines():
        row = json.loads(line)
        conversations[(row["model"], int(row["question_id"]))] = (row["prompts"], row["answers"])
    questions = {
        int(q["question_id"]): q["turns"]
        for q in map(json.loads, (DATA / "question.jsonl").read_text().splitlines())
    }
    for path in sorted(ANSWERS_FALLBACK.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            key = (row["model_id"], int(row["question_id"]))
            if key not in conversations and int(row["question_id"]) in questions:
                conversations[key] = (questions[key[1]], row["choices"][0]["turns"])
    index: dict[tuple[str, int, int], int] = {}
    prompts: list[str] = []
    answers: list[str] = []

    def answer(model: str, question: int, turn: int) -> int:
        key = (model, question, turn)
        if key not in index:
            user, said = conversations[(model, question)]
            index[key] = len(answers)
            prompts.append(user[turn - 1])
            answers.append(said[turn - 1])
        return index[key]

    rows = [
        (
            int(v.question_id),
            int(v.turn),
            answer(v.model_a, int(v.question_id), int(v.turn)),
            answer(v.model_b, int(v.question_id), int(v.turn)),
            OUTCOME[v.winner],
        )
        for v in votes.itertuples()
    ]
    table = pd.DataFrame(rows, columns=["question_id", "turn", "a", "b", "y"])
    styles = style_matrix([style_counts(text) for text in answers])
    return Data(votes=table, prompts=prompts, answers=answers, styles=styles)


def embeddings(texts: list[str]) -> np.ndarray:
    from ratings.reward_model.embedding import embed

    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
    if CACHE.exists():
        cached = np.load(CACHE)
        if str(cached["digest"]) == digest:
            return np.asarray(cached["vectors"])
    vectors = embed(texts)
    CACHE.parent.mkdir(exist_ok=True)
    np.savez(CACHE, digest=digest, vectors=vectors)
    return vectors


def bt_predictions(
    features: np.ndarray, votes: pd.DataFrame, folds: np.ndarray, seed: int
) -> tuple[np.ndarray, list[float]]:
    from ratings.reward_model.estimator import fit_bt_head, select_l2, win_probability
    from ratings.reward_model.features import FeatureSpec, fitted_spec, standardised

    a, b, y = votes["a"].to_numpy(), votes["b"].to_numpy(), votes["y"].to_numpy()
    out = np.empty(len(votes))
    chosen = []
    for fold in np.unique(folds):
        train, test = folds != fold, folds == fold
        used = np.unique(np.concatenate([a[train], b[train]]))
        spec = fitted_spec(FeatureSpec(None, 0, True), features[used])
        phi = standardised(spec, features)
        diffs = phi[a] - phi[b]
        l2 = select_l2(diffs[train], y[train], list(votes["question_id"][train]), seed=seed)
        chosen.append(l2 / int(train.sum()))
        head = fit_bt_head(diffs[train], y[train], l2=l2)
        out[test] = win_probability(head, diffs[test])
    return out, chosen


def longer_predictions(data: Data, folds: np.ndarray) -> np.ndarray:
    votes = data.votes
    tokens = np.expm1(data.styles[:, 0])
    sign = np.sign(tokens[votes["a"]] - tokens[votes["b"]])
    y = votes["y"].to_numpy()
    out = np.empty(len(votes))
    for fold in np.unique(folds):
        train, test = folds != fold, folds == fold
        decided = train & (sign != 0)
        # The rate at which the longer answer won in the training folds (ties half).
        rate = float(np.mean(np.where(sign[decided] > 0, y[decided], 1 - y[decided])))
        out[test] = np.where(sign[test] > 0, rate, np.where(sign[test] < 0, 1 - rate, 0.5))
    return out


def _confidence(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Over decisive votes: the probability given to the side predicted to win, and whether it
    won (a symmetric model's reliability: which side is "a" does not matter)."""
    decisive = y != 0.5
    q, t = p[decisive], y[decisive]
    confidence = np.maximum(q, 1 - q)
    right = np.where(q == 0.5, 0.5, (q > 0.5) == (t == 1.0)).astype(np.float64)
    return confidence, right


def figures(p: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from ratings.reward_model.estimator import log_loss

    confidence, right = _confidence(p, y)
    edges = np.array([0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0001])
    ece = 0.0
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        inside = (confidence >= low) & (confidence < high)
        if inside.any():
            ece += inside.mean() * abs(confidence[inside].mean() - right[inside].mean())
    return {
        "accuracy": float(right.mean()),
        "log_loss": log_loss(p, y),
        "brier": float(np.mean((p - y) ** 2)),
        "ece": float(ece),
    }


def calibration_table(p: np.ndarray, y: np.ndarray) -> list[str]:
    confidence, right = _confidence(p, y)
    edges = np.array([0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0001])
    lines = []
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        inside = (confidence >= low) & (confidence < high)
        if inside.any():
            lines.append(
                f"    confidence [{low:.2f}, {min(high, 1):.2f}): n={int(inside.sum()):4d}  "
                f"mean confidence {confidence[inside].mean():.3f}  "
                f"accuracy {right[inside].mean():.3f}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from ratings.reward_model.embedding import unavailable_reason
    from ratings.reward_model.estimator import fold_of_groups

    reason = unavailable_reason()
    if reason:
        print(f"The embedding BT needs the extra: {reason}.", file=sys.stderr)
        return 2
    started = time.perf_counter()
    data = load()
    votes, y = data.votes, data.votes["y"].to_numpy()
    folds = fold_of_groups(list(votes["question_id"]), args.folds, seed=args.seed)
    t0 = time.perf_counter()
    vectors = embeddings(data.prompts + data.answers)
    embed_seconds = time.perf_counter() - t0
    prompt_vec, answer_vec = vectors[: len(data.prompts)], vectors[len(data.prompts) :]
    cos = np.einsum("ij,ij->i", prompt_vec, answer_vec)[:, None]
    embedded = np.hstack([answer_vec, cos])

    methods: dict[str, np.ndarray] = {"(a) longer answer": longer_predictions(data, folds)}
    penalties: dict[str, list[float]] = {}
    for name, features in (
        ("(b) style-only BT", data.styles),
        ("(c) embedding BT", embedded),
        ("(c+s) embedding + style BT", np.hstack([embedded, data.styles])),
    ):
        methods[name], penalties[name] = bt_predictions(features, votes, folds, args.seed)

    n_decisive = int((y != 0.5).sum())
    print(
        f"MT-bench human votes: {len(votes)} votes ({n_decisive} decisive, "
        f"{len(votes) - n_decisive} ties excluded from accuracy), {votes['question_id'].nunique()} "
        f"questions, {len(data.answers)} answers; {args.folds} folds by question, seed {args.seed}"
    )
    print(f"embeddings of {len(vectors)} texts: {embed_seconds:.1f} s (cached after the first run)")
    anchor = figures(methods["(a) longer answer"], y)
    print(
        f"\n{'method':30s} {'accuracy':>9s} {'x anchor':>9s} {'log-loss':>9s} {'x anchor':>9s} "
        f"{'Brier':>7s} {'x anchor':>9s} {'ECE':>6s}"
    )
    for name, p in methods.items():
        f = figures(p, y)
        print(
            f"{name:30s} {f['accuracy']:9.3f} {f['accuracy'] / anchor['accuracy']:9.3f} "
            f"{f['log_loss']:9.3f} {f['log_loss'] / anchor['log_loss']:9.3f} "
            f"{f['brier']:7.3f} {f['brier'] / anchor['brier']:9.3f} {f['ece']:6.3f}"
        )
    print(
        "\naccuracy minus the anchor's, 95% interval from 2,000 resamples of the questions "
        "(paired):"
    )
    anchor_right = _confidence(methods["(a) longer answer"], y)[1]
    questions = votes["question_id"].to_numpy()[y != 0.5]
    unique = np.unique(questions)
    members = [np.flatnonzero(questions == q) for q in unique]
    rng = np.random.default_rng(args.seed)
    for name, p in list(methods.items())[1:]:
        delta = _confidence(p, y)[1] - anchor_right
        draws = []
        for _ in range(2000):
            rows = np.concatenate([members[i] for i in rng.integers(0, len(unique), len(unique))])
            draws.append(delta[rows].mean())
        low, high = np.percentile(draws, [2.5, 97.5])
        print(f"    {name:30s} {delta.mean():+.3f}  [{low:+.3f}, {high:+.3f}]")
    for name, p in methods.items():
        print(f"\ncalibration, {name} (decisive votes):")
        print("\n".join(calibration_table(p, y)))
        if name in penalties:
            print(
                "    l2 per pair chosen in the folds: "
                + ", ".join(f"{x:g}" for x in penalties[name])
            )
    print(f"\nwall time {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
