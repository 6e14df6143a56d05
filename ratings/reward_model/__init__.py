"""The reward model: a Bradley-Terry head on answer embeddings, fitted on the arena's own votes.

- ``estimator``: the head itself (numpy/scipy, no I/O): an L2-regularised Bradley-Terry fit by
  Newton's method, its Laplace (inverse-Hessian) covariance, and group rewards with intervals on
  the environment rewards' Elo scale.
- ``features``: an answer's feature vector from its embedding and its style counts
  (``answer_style``), standardised by the spec stored with each fit.
- ``embedding``: the bundled all-MiniLM-L6-v2 (the optional ``reward-model`` extra), imported
  lazily and loaded once per process, on the CPU; ``unavailable_reason`` says why it cannot be.
- ``services``: the Django side: training pairs from the votes, fitted snapshots
  (``ratings.models.RewardModelSnapshot``) and a run's model rewards.
"""
