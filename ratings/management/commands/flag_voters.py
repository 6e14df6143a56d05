"""``manage.py flag_voters [--dry-run]``: flag anomalous voters and their votes now.

The same run as the periodic task (``ratings.tasks.voters_flag``); prints each voter and source
below the threshold with each test's p-value and the combined one, and each flagged voter's
tested votes with their crowd p-values.
``--dry-run`` prints the same and writes nothing.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ratings.voters import voters_flag_run


class Command(BaseCommand):
    help = "Flag voters and sources whose votes disagree with the crowd or the fit beyond chance."

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
            tests = ", ".join(
                f"{name} {p:.3g}"
                for name, p in (
                    ("crowd", voter.p_crowd),
                    ("model", voter.p_model),
                    ("fit", voter.p_fit),
                )
                if p == p  # NaN: not tested
            )
            if voter.voter.startswith("source:"):
                self.stdout.write(
                    f"Anomalous source {voter.voter}: {voter.n_votes} votes from "
                    f"{len(voter.sessions)} sessions ({', '.join(voter.sessions)}); p-values "
                    f"{tests}; combined p = {voter.p_value:.3g} ({voter.test})"
                )
                continue
            self.stdout.write(
                f"Anomalous voter {voter.voter}: {voter.n_votes} votes, "
                f"Fisher statistic {voter.statistic:.1f}; p-values {tests}; "
                f"combined p = {voter.p_value:.3g} ({voter.test})"
            )
            for vote in by_voter.get_group(voter.voter).itertuples():
                self.stdout.write(f"  vote {vote.vote_id}: p = {vote.p_value:.3g}")
        if run.dry_run:
            self.stdout.write(
                f"Dry run: {len(run.voters)} voter(s) would be flagged; nothing written."
            )
        else:
            self.stdout.write(
                f"Flagged {len(run.voters)} voter(s) or source(s); {len(run.flagged_vote_ids)} vote(s) newly "
                "flagged anomalous_voter."
            )
