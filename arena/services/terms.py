"""Acceptance of the arena's terms: votes and prompts may be published as a data set."""

from django.conf import settings
from django.db import IntegrityError, transaction

from arena.identity import ip_hash
from arena.models import TermsAcceptance


def terms_accept(*, voter_id: str, ip: str | None = None) -> TermsAcceptance:
    """Record that ``voter_id`` accepted the current terms; accepting twice is a no-op."""
    version = settings.ARENA_TERMS_VERSION
    existing = TermsAcceptance.objects.filter(voter_id=voter_id, terms_version=version).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return TermsAcceptance.objects.create(
                voter_id=voter_id, terms_version=version, ip_hash=ip_hash(ip)
            )
    except IntegrityError:  # a concurrent request accepted first
        return TermsAcceptance.objects.get(voter_id=voter_id, terms_version=version)
