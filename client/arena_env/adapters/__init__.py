"""Adapters for the ecosystem's training loops, duck-typed (none of them is imported):

- ``arena_env.adapters.trl.human_reward``: a reward function for TRL's ``GRPOTrainer``.
- ``arena_env.adapters.atropos.HumanFeedbackEnv``: Atropos' ``get_next_item`` /
  ``collect_trajectories`` loop.
- ``arena_env.adapters.verifiers.human_reward`` / ``human_group_reward``: async reward
  functions for a verifiers ``Rubric``.
"""
