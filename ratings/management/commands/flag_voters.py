"""``manage.py flag_voters [--dry-run]``: flag anomalous voters and their votes now.

The same run as the periodic task (``ratings.tasks.voters_flag``); prints each voter below the
threshold with their combined p-value, and each of their tested votes with its own p-value.
``--dry-run`` prints the same and writes nothing.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ratings.voters import voters_flag_run


class Command(BaseCommand):
    help = "Flag voters whose votes disagree with everyone else's beyond chance (Fisher's method)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--dry-run", action="store_true", help="print only; write nothing")
        parser.add_argument(
            "--min-votes", type=int, default=None, help="default: ARENA_ANOMALY_MIN_VOTES"
        )
        parser.add_argument(
            "--threshold", type=float, default=None, help="default: ARENA_ANOMALY_P_THRESHOLD"
        )

    def handle(
        self,
        *args: Any,
        dry_run: bool = False,
        min_votes: int | None = None,
        threshold: float | None = None,
        **options: Any,
    ) -> None:
        if min_votes is not None and min_votes < 1:
            raise CommandError("--min-votes must be at least 1.")
        if threshold is not None and not 0 < threshold < 1:
            raise CommandError("--threshold must be between 0 and 1.")
        run = voters_flag_run(dry_run=dry_run, min_votes=min_votes, threshold=threshold)
        self.stdout.write(
            f"Tested {run.n_votes_tested} votes; {run.n_voters_tested} voters with at least "
            f"{run.min_votes} votes; threshold p < {run.threshold:g}."
        )
        by_voter = run.votes.groupby("voter", sort=False)
        for voter in run.voters.itertuples():
            self.stdout.write(
                f"Anomalous voter {voter.voter}: {voter.n_votes} votes, "
                f"Fisher statistic {voter.statistic:.1f}, combined p = {voter.p_value:.3g}"
            )
            for vote in by_voter.get_group(voter.voter).itertuples():
                self.stdout.write(f"  vote {vote.vote_id}: p = {vote.p_value:.3g}")
        if run.dry_run:
            self.stdout.write(
                f"Dry run: {len(run.voters)} voter(s) would be flagged; nothing written."
            )
        else:
            self.stdout.write(
                f"Flagged {len(run.voters)} voter(s); {len(run.flagged_vote_ids)} vote(s) newly "
                "flagged anomalous_voter."
            )
