"""An answer's feature vector: its embedding, its relevance to the prompt, its style counts.

``raw_features`` lays out, per answer, ``[embedding (e), cos(prompt, answer) (1), style (4)]``
(the parts a spec leaves out are absent): ``embedding`` is the answer's unit-norm sentence
embedding, the cosine its similarity to the prompt's embedding (what the pair (prompt, answer)
adds once differences between answers to one prompt cancel the prompt's own embedding), and the
style part ``log(1 + count)`` of the four elements LMArena's style control counts
(``answer_style.STYLE_ELEMENTS``: tokens, headers, list items, bold spans).

A ``FeatureSpec`` records which parts a fit used and the per-column centre and scale it
standardised them with (from its training answers), so that a stored snapshot scores new answers
as it was fitted. Django-free and without I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from answer_style import ANSWER_KEYS, STYLE_ELEMENTS

from .estimator import FloatArray

STYLE_NAMES: tuple[str, ...] = tuple(f"log1p_{element}" for element in STYLE_ELEMENTS)


def style_totals(counts: Mapping[str, Any] | None) -> list[int]:
    """Each style element's total in one answer's counts (its parts summed; zeros for none)."""
    out = []
    for element in STYLE_ELEMENTS:
        key, parts = ANSWER_KEYS[element]
        value = (counts or {}).get(key)
        if parts:
            total = sum(int((value or {}).get(p, 0)) for p in parts)
        else:
            total = int(value or 0)
        out.append(max(total, 0))
    return out


def style_vector(
    counts: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None,
) -> list[float]:
    """``log(1 + count)`` of each style element of one answer's counts, or of several answers'
    (the turns of one side of a battle) summed."""
    answers = counts if isinstance(counts, Sequence) else [counts]
    totals = [sum(column) for column in zip(*(style_totals(c) for c in answers), strict=True)]
    return [float(np.log1p(t)) for t in (totals or [0] * len(STYLE_ELEMENTS))]


def style_matrix(counts: Sequence[Mapping[str, Any] | None]) -> FloatArray:
    return np.array([style_vector(c) for c in counts], dtype=np.float64).reshape(-1, 4)


@dataclass(frozen=True)
class FeatureSpec:
    """Which parts the features hold (``embedding``: the embedding model's name, or None;
    ``style``), the embedding's width, and the standardisation fitted on the training answers."""

    embedding: str | None
    embedding_dim: int
    style: bool
    centre: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        names: tuple[str, ...] = ()
        if self.embedding:
            names += tuple(f"emb_{i}" for i in range(self.embedding_dim)) + ("cos_prompt",)
        if self.style:
            names += STYLE_NAMES
        return names

    @property
    def dim(self) -> int:
        return len(self.names)

    def as_json(self) -> dict[str, Any]:
        return {
            "embedding": self.embedding,
            "embedding_dim": self.embedding_dim,
            "style": self.style,
            "centre": list(self.centre),
            "scale": list(self.scale),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FeatureSpec:
        return cls(
            embedding=data.get("embedding"),
            embedding_dim=int(data.get("embedding_dim", 0)),
            style=bool(data.get("style")),
            centre=tuple(float(x) for x in data.get("centre", ())),
            scale=tuple(float(x) for x in data.get("scale", ())),
        )


def raw_features(
    spec: FeatureSpec,
    *,
    answer_embeddings: FloatArray | None = None,
    prompt_embeddings: FloatArray | None = None,
    styles: FloatArray | None = None,
) -> FloatArray:
    """The unstandardised features (n, spec.dim) of n answers (module docstring)."""
    parts: list[FloatArray] = []
    if spec.embedding:
        if answer_embeddings is None or prompt_embeddings is None:
            raise ValueError("This spec needs the answers' and the prompts' embeddings.")
        cos = np.einsum("ij,ij->i", answer_embeddings, prompt_embeddings)[:, None]
        parts += [answer_embeddings, cos]
    if spec.style:
        if styles is None:
            raise ValueError("This spec needs the answers' style counts.")
        parts.append(styles)
    if not parts:
        raise ValueError("A spec holds the embedding, the style, or both.")
    return np.hstack(parts).astype(np.float64)


def fitted_spec(spec: FeatureSpec, raw: FloatArray) -> FeatureSpec:
    """``spec`` with the centre and scale of ``raw`` (training answers' features); a constant
    column keeps scale 1."""
    if len(raw) == 0:
        centre, scale = np.zeros(spec.dim), np.ones(spec.dim)
    else:
        centre, scale = raw.mean(axis=0), raw.std(axis=0)
        scale = np.where(scale > 1e-12, scale, 1.0)
    return FeatureSpec(
        embedding=spec.embedding,
        embedding_dim=spec.embedding_dim,
        style=spec.style,
        centre=tuple(float(x) for x in centre),
        scale=tuple(float(x) for x in scale),
    )


def standardised(spec: FeatureSpec, raw: FloatArray) -> FloatArray:
    if not spec.scale:
        return raw
    out: FloatArray = (raw - np.asarray(spec.centre)) / np.asarray(spec.scale)
    return out
