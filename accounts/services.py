"""Writes of the accounts app: deleting an account."""

from django.contrib.auth import get_user_model
from django.db import transaction


def account_delete(*, account_id: int) -> bool:
    """Delete the account and what hangs off it: its email addresses (and their pending
    confirmations) and social accounts (and their tokens), allauth's rows, which cascade from
    it. Its votes stay, as anonymous votes: ``Vote.account`` is emptied (the foreign key's
    ``SET_NULL``, in the same transaction), nothing else about them changes. False when there
    was no such account (already deleted)."""
    with transaction.atomic():
        deleted, _ = get_user_model().objects.filter(pk=account_id).delete()
    return deleted > 0
