"""The arena's writes of battles, answers, votes, terms acceptances, models and pools.

Views, the websocket consumer, management commands and tasks write through these functions. Two
kinds of write do not: the admin's own forms and actions (providers, models, prompts,
completions, live limits, the deactivate action), and Django's sessions.
"""
