"""How recognisable each model's pool answers are to a visitor who wants to find it.

A pool battle shows stored texts (``arena.services.pool``), and the demo's are MT-bench's
published answers, so an attacker can know them beforehand. Three ways to recognise a model on
a battle side, each measured over the model's battle-side appearances under the pool's uniform
rotation (a prompt drawn uniformly among the model's, then one of its variants uniformly; Huang
et al. 2025, "Exploring and mitigating adversarial manipulation of voting-based leaderboards"):

- **Exact text** (``exact_text``): the attacker knows ONE answer per (prompt, model), the first
  stored variant (the published one), and recognises a side when any turn of it is that answer's
  turn (whitespace-insensitive). With k variants of which one is known, 1/k of the model's
  appearances on that prompt are recognised (more when variants share a turn). Without
  rotation (one answer per prompt) it is 1.
- **Style** (``style``): a Gaussian naive-Bayes attribution from the answers' style counts and
  length (per turn: log(1 + tokens), headers, list items, bold spans; the same features as the
  rigging bench's attacker), cross-validated leave-one-prompt-out: the classifier is fitted on
  every other prompt's answers of every model and attributes each variant of the held-out
  prompt to the likeliest model (equal priors, a turn's log-likelihoods summed over the
  variant's turns). The share attributed to the right model; chance is 1 / ``n_models``.
- **Names** (``names_model``): the share whose text names the model (``arena.leaks``, computed
  by the caller and passed in as ``PoolAnswer.names_model``).

Django-free: plain data in, frozen dataclasses out. The arena computes the figures in a task
(``arena.transparency.pool_recognisability_refresh``) and keeps them in the shared cache per
pool generation, for the /transparency page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from answer_style import AnswerStyle, style_counts

if TYPE_CHECKING:
    import numpy as np

#: The smallest variance a feature's Gaussian gets (the features are logs of counts): a model
#: whose answers never have a header would otherwise rule out every answer with one.
MIN_VARIANCE = 1e-2
_CHUNK = 4096  # rows of turns scored at a time (bounded memory for a large pool)


@dataclass(frozen=True)
class PoolAnswer:
    """One pool variant: a model's answer (all turns) to a prompt. The first ``PoolAnswer`` of
    a (prompt, model) in the input is the one the attacker is taken to know."""

    prompt: Hashable
    model: str
    turns: tuple[str, ...]
    names_model: bool = False


@dataclass(frozen=True)
class ModelRecognisability:
    model: str
    prompts: int  # prompts the model answered
    variants: int  # its pool answers (variants included)
    exact_text: float  # share of appearances recognised by the one known answer's text
    style: float | None  # share attributed to it by style (None: fewer than two models)
    names_model: float  # share of appearances whose text names the model


def fold(text: str) -> str:
    """``text`` with every run of whitespace one space: copying a text changes no more."""
    return " ".join(text.split())


def style_features(style: AnswerStyle | dict[str, object]) -> list[float]:
    """An answer turn's style features: log(1 + count) of tokens, headers, list items, bold."""

    def total(key: str) -> float:
        value = style.get(key, 0)
        if isinstance(value, dict):
            return float(sum(value.values()))
        return float(value) if isinstance(value, int | float) else 0.0

    return [
        math.log1p(total("tokens")),
        math.log1p(total("header_count")),
        math.log1p(total("list_count")),
        math.log1p(total("bold_count")),
    ]


def _style_accuracy(
    answers: Sequence[PoolAnswer],
    models: list[str],
    prompts: list[Hashable],
    style_of: Callable[[str], AnswerStyle],
) -> np.ndarray:
    """Per answer: 1.0 when the leave-one-prompt-out classifier attributes it to its model."""
    # Imported here: a web worker unpickles the cached figures (this module's dataclasses)
    # without loading numpy, which only the task computing them needs.
    import numpy as np

    model_index = {m: i for i, m in enumerate(models)}
    prompt_index = {p: i for i, p in enumerate(prompts)}
    rows, row_answer = [], []
    for a, answer in enumerate(answers):
        for turn in answer.turns:
            rows.append(style_features(style_of(turn)))
            row_answer.append(a)
    x = np.asarray(rows, dtype=float).reshape(-1, 4)
    row_of = np.asarray(row_answer, dtype=np.intp)
    answer_model = np.asarray([model_index[a.model] for a in answers], dtype=np.intp)
    answer_prompt = np.asarray([prompt_index[a.prompt] for a in answers], dtype=np.intp)
    row_model, row_prompt = answer_model[row_of], answer_prompt[row_of]
    n_m, n_p = len(models), len(prompts)
    # Sums per (model, prompt) and per model: a fold's statistics are the model's less the
    # held-out prompt's, so every fold costs no refit.
    cell = row_model * n_p + row_prompt
    n = np.bincount(cell, minlength=n_m * n_p).reshape(n_m, n_p).astype(float)
    s1 = np.stack(
        [np.bincount(cell, weights=x[:, f], minlength=n_m * n_p) for f in range(4)], axis=-1
    ).reshape(n_m, n_p, 4)
    s2 = np.stack(
        [np.bincount(cell, weights=x[:, f] ** 2, minlength=n_m * n_p) for f in range(4)], axis=-1
    ).reshape(n_m, n_p, 4)
    rest_n = n.sum(axis=1, keepdims=True) - n  # (m, p): the model's turns on other prompts
    rest_s1 = s1.sum(axis=1, keepdims=True) - s1
    rest_s2 = s2.sum(axis=1, keepdims=True) - s2
    usable = rest_n >= 2
    safe_n = np.where(usable, rest_n, 1.0)[..., None]
    mean = rest_s1 / safe_n
    var = np.maximum(rest_s2 / safe_n - mean**2, MIN_VARIANCE)
    # log N(x; mean, var) per (row, model), summed over features, in chunks of rows.
    scores = np.zeros((len(answers), n_m))
    for start in range(0, len(x), _CHUNK):
        stop = start + _CHUNK
        p = row_prompt[start:stop]
        mu, v = mean[:, p, :].transpose(1, 0, 2), var[:, p, :].transpose(1, 0, 2)
        ll = -0.5 * (np.log(2 * math.pi * v) + (x[start:stop, None, :] - mu) ** 2 / v)
        ll = np.where(usable[:, p].T[..., None], ll, -np.inf).sum(axis=-1)
        np.add.at(scores, row_of[start:stop], ll)
    right: np.ndarray = (np.argmax(scores, axis=1) == answer_model).astype(float)
    return right


def recognisability(
    answers: Sequence[PoolAnswer], *, style_of: Callable[[str], AnswerStyle] = style_counts
) -> list[ModelRecognisability]:
    """Per model (in slug order): how recognisable its pool answers are (module docstring)."""
    if not answers:
        return []
    models = sorted({a.model for a in answers})
    prompts = list(dict.fromkeys(a.prompt for a in answers))
    groups: dict[tuple[Hashable, str], list[int]] = {}
    for index, answer in enumerate(answers):
        groups.setdefault((answer.prompt, answer.model), []).append(index)
    styled = (
        _style_accuracy(answers, models, prompts, style_of)
        if len(models) >= 2 and len(prompts) >= 2
        else None
    )
    # Per model: the mean over its prompts of each measure's share among that prompt's variants.
    exact: dict[str, list[float]] = {m: [] for m in models}
    named: dict[str, list[float]] = {m: [] for m in models}
    style: dict[str, list[float]] = {m: [] for m in models}
    for (_, model), indices in groups.items():
        known = {fold(turn) for turn in answers[indices[0]].turns}
        exact[model].append(
            sum(any(fold(t) in known for t in answers[i].turns) for i in indices) / len(indices)
        )
        named[model].append(sum(answers[i].names_model for i in indices) / len(indices))
        if styled is not None:
            style[model].append(float(styled[indices].mean()))
    counts: dict[str, int] = {}
    for answer in answers:
        counts[answer.model] = counts.get(answer.model, 0) + 1
    return [
        ModelRecognisability(
            model=m,
            prompts=len(exact[m]),
            variants=counts[m],
            exact_text=sum(exact[m]) / len(exact[m]),
            style=sum(style[m]) / len(style[m]) if styled is not None else None,
            names_model=sum(named[m]) / len(named[m]),
        )
        for m in models
    ]
