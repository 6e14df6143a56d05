"""Signals the arena sends after commit, for downstream apps (ratings) to listen to.

The arena never imports the apps downstream of it; they connect here instead.
"""

from django.dispatch import Signal

# Sent after the transaction that recorded a vote commits. kwargs: vote_id, battle_id.
vote_recorded = Signal()
