"""``manage.py flag_cohorts [--dry-run]``: run the burst test now (every refit runs it first).

Prints each burst (the model, the window, the cohort's votes on the model, its z before and
after the hold-out, the votes and sources held out) and what changed. ``--dry-run`` writes
nothing.
"""

from typing import Any

from django.core.management.base import BaseCommand

from ratings.cohorts import cohorts_quarantine_run


class Command(BaseCommand):
    help = "Hold out bursts of new sources' votes that disagree with the rest of the arena."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--dry-run", action="store_true", help="print only; write nothing")

    def handle(self, *args: Any, dry_run: bool = False, **options: Any) -> None:
        run = cohorts_quarantine_run(dry_run=dry_run)
        self.stdout.write(
            f"Tested {run.windows_tested} cohorts among {run.n_votes} votes; "
            f"{len(run.bursts)} burst{'s' * (len(run.bursts) != 1)}."
        )
        for burst in run.bursts:
            self.stdout.write(
                f"Burst on {burst.model}: {burst.window_hours:g} h window from "
                f"{burst.window_start:%Y-%m-%d %H:%M} UTC, {burst.n_votes} cohort votes on it, "
                f"z {burst.z_before:+.2f} -> {burst.z_after:+.2f}; "
                f"{burst.quarantined_votes} votes of {burst.quarantined_sources} sources held out"
            )
        verb = "would hold out" if dry_run else "holds out"
        self.stdout.write(
            f"The test {verb} {len(run.quarantined_ids)} votes"
            + ("." if dry_run else f" ({len(run.flagged)} newly, {len(run.lifted)} released).")
        )
