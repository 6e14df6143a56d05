"""The arena as a human environment: a trainer's runs submit groups of completions, visitors
judge them in ordinary anonymous battles, and the trainer reads rewards back.

The app plugs into the arena, which never imports it: ``signals`` registers its battle source
(``arena.battle_sources``), and it sends and the rating side receives ``arena.signals``. Its
tables keep the names they had as arena models (``arena_envrun``...). The bearer tokens it
authenticates with are the arena's (``arena.tokens``, ``ApiToken``): the exports use them too.

- ``models``: runs, submissions, completions (their reward records), environment battles.
- ``runs``: creating and closing runs, submissions (idempotent), their completions.
- ``selectors``: reads (a run with its counts, the reward feed after a cursor).
- ``api``: the HTTP API at ``/api/env/v1/`` (django-ninja; its OpenAPI schema is generated).
- ``serve``: which environment battle, if any, a visitor's next pool battle is.
- ``references``: reference models' answers to a submission's prompt (pool, or generated once).
- ``rewards``: storing reward records after votes (the fit itself is the rating side's).
- ``model_rewards``: a reward model's records at once (the model is the rating side's), the
  seam it registers with, and their supersession by the humans'.
- ``webhook``: signed, retried delivery of changed records.
- ``outbound``: the one guarded client of trainers' URLs (public addresses only, pinned).
- ``tasks``: its Celery tasks, under the names they had in ``arena.tasks``.
- ``admin``: runs in the admin (staff may close one).
"""
