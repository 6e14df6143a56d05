"""The arena's writes of battles, answers, votes, terms acceptances, models and pools.

Views, management commands and tasks write through these functions; the live battle's writes
(its turns, the providers' breakers, the sweep) live with the rest of that feature in
``arena.live``. Two kinds of write do not: the admin's own forms and actions (providers,
models, prompts, completions, live limits), and Django's sessions. A model's standing
(retired or not, public or not) is the exception: the admin changes it through
``arena.services.models``, which records each change.
"""
