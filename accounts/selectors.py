"""Reads for a signed-in visitor's pages: their own board, and everything kept about them.

The votes come from the arena's selector (``arena.selectors.account_votes``), the public ranks
from the ratings app's (``ratings.selectors.public_ranks``), the account's rows from Django's
and allauth's models. The fit is ``accounts.board``'s, in pure Python: nothing here loads
numpy or pandas.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from allauth.account.models import EmailAddress
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.base_user import AbstractBaseUser

from accounts.board import Board, Game, board_fit
from arena.models import Battle
from arena.selectors import AccountVote, account_votes
from ratings.selectors import PublicRank, public_ranks


@dataclass(frozen=True)
class PersonalRow:
    """One model of the visitor's board, beside its public place (None: not ranked there)."""

    model: str  # slug
    name: str
    rank: int
    rating: float
    wins: int
    ties: int
    losses: int
    public: PublicRank | None

    @property
    def games(self) -> int:
        return self.wins + self.ties + self.losses


@dataclass(frozen=True)
class PersonalBoard:
    """The visitor's board: ``votes`` every vote cast from the account, ``counted`` those the
    board fits (anonymous battles, not a trainer's environment battles, as the public board)."""

    rows: list[PersonalRow]
    votes: int
    counted: int
    converged: bool


def board_counts(vote: AccountVote) -> bool:
    """Whether a vote goes into the visitor's board: an anonymous battle between two models
    (a named battle's vote was cast knowing the names; an environment battle's sides are a
    trainer's completions), as the public leaderboard reads them."""
    return vote.mode == Battle.Mode.ANONYMOUS and vote.source != Battle.Source.ENV


def personal_board(*, account_id: int) -> PersonalBoard:
    """The account's board: its votes' regularised Bradley-Terry fit (``accounts.board``),
    each model with the newest public snapshot's rank."""
    votes = account_votes(account_id=account_id)
    counted = [vote for vote in votes if board_counts(vote)]
    board: Board = board_fit(Game(v.model_a, v.model_b, v.winner) for v in counted)
    names = {v.model_a: v.model_a_name for v in counted} | {
        v.model_b: v.model_b_name for v in counted
    }
    ranks = public_ranks() if board.rows else {}
    return PersonalBoard(
        rows=[
            PersonalRow(
                model=row.model,
                name=names[row.model],
                rank=row.rank,
                rating=row.rating,
                wins=row.wins,
                ties=row.ties,
                losses=row.losses,
                public=ranks.get(row.model),
            )
            for row in board.rows
        ],
        votes=len(votes),
        counted=board.games,
        converged=board.converged,
    )


class VoteData(TypedDict):
    vote_id: int
    battle_id: str
    battle_mode: str
    battle_source: str
    model_a: str
    model_b: str
    model_a_name: str
    model_b_name: str
    winner: str
    created_at: str


class EmailData(TypedDict):
    email: str
    verified: bool
    primary: bool


class SocialData(TypedDict):
    provider: str
    uid: str
    date_joined: str


class AccountData(TypedDict):
    """The download of everything the arena keeps about an account (``/account/data.json``)."""

    email: str
    date_joined: str
    last_login: str | None
    email_addresses: list[EmailData]
    social_accounts: list[SocialData]
    votes: list[VoteData]


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def account_data(*, account: AbstractBaseUser) -> AccountData:
    """Everything kept about ``account``: its email addresses, its social accounts (the
    provider and the account's id there; never a token) and every vote cast from it."""
    return {
        "email": str(getattr(account, "email", "")),
        "date_joined": _iso(account.date_joined),  # type: ignore[attr-defined]
        "last_login": _iso(account.last_login) if account.last_login else None,
        "email_addresses": [
            {"email": e.email, "verified": e.verified, "primary": e.primary}
            for e in EmailAddress.objects.filter(user_id=account.pk).order_by("id")
        ],
        "social_accounts": [
            {"provider": s.provider, "uid": s.uid, "date_joined": _iso(s.date_joined)}
            for s in SocialAccount.objects.filter(user_id=account.pk).order_by("id")
        ],
        "votes": [
            {
                "vote_id": v.vote_id,
                "battle_id": str(v.battle_id),
                "battle_mode": v.mode,
                "battle_source": v.source,
                "model_a": v.model_a,
                "model_b": v.model_b,
                "model_a_name": v.model_a_name,
                "model_b_name": v.model_b_name,
                "winner": v.winner,
                "created_at": _iso(v.created_at),
            }
            for v in account_votes(account_id=int(account.pk))
        ],
    }
