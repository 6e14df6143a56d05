"""Active pair sampling: which two models the next battle shows.

One family, three modules, one concept each:

- ``arena.sampling.rule``: the draw itself, plain Python (no Django, no I/O): pair
  probabilities from standard errors, pair counts, weights and a floor, and the draw.
- ``arena.sampling.stats``: the policy in force and the statistics it reads from the shared
  cache (the switch, the floor, the latest snapshot's figures, the established models).
- ``arena.sampling.store``: the one write, ``sampling_stats_store``, a service the ratings side
  calls after each snapshot to hand the arena those figures.

The package itself imports nothing, so the pure rule loads without Django.
"""
