"""API tokens from the shell (the admin lists and revokes them too):

- ``manage.py api_token create --name NAME --scope env [--scope export]`` prints the token once;
  only its SHA-256 is stored.
- ``manage.py api_token list``: id, prefix, name, scopes, created, last used, revoked.
- ``manage.py api_token revoke PREFIX_OR_ID``.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.models import ApiToken
from arena.tokens import SCOPES, token_create, token_find, token_revoke


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


class Command(BaseCommand):
    help = "Create, list and revoke API tokens (the environment API's and the exports')."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Create a token and print it (only once).")
        create.add_argument("--name", required=True, help="Who or what the token is for.")
        create.add_argument(
            "--scope",
            action="append",
            required=True,
            choices=sorted(SCOPES),
            help="A scope the token carries; repeat for several.",
        )
        actions.add_parser("list", help="List the tokens (never their secret part).")
        revoke = actions.add_parser("revoke", help="Revoke a token.")
        revoke.add_argument("token", help="The token's id or prefix (as `list` shows).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["action"] == "create":
                self._create(options["name"], options["scope"])
            elif options["action"] == "list":
                self._list()
            else:
                self._revoke(options["token"])
        except ArenaError as exc:
            raise CommandError(exc.message) from None

    def _create(self, name: str, scopes: list[str]) -> None:
        token, raw = token_create(name=name, scopes=scopes)
        self.stdout.write(
            f"Created API token {token.pk} ({token.name}; {', '.join(token.scopes)})."
        )
        self.stdout.write("Keep it now: it is not stored and cannot be shown again.")
        self.stdout.write(raw)

    def _list(self) -> None:
        tokens = ApiToken.objects.order_by("pk")
        if not tokens:
            self.stdout.write("No API tokens.")
            return
        self.stdout.write("id\tprefix\tname\tscopes\tcreated\tlast used\trevoked")
        for token in tokens:
            self.stdout.write(
                "\t".join(
                    [
                        str(token.pk),
                        token.prefix,
                        token.name,
                        ",".join(token.scopes),
                        _when(token.created_at),
                        _when(token.last_used_at),
                        _when(token.revoked_at),
                    ]
                )
            )

    def _revoke(self, prefix_or_id: str) -> None:
        token = token_find(prefix_or_id=prefix_or_id)
        if token_revoke(token=token):
            self.stdout.write(f"Revoked API token {token.pk} ({token.name}).")
        else:
            self.stdout.write(f"API token {token.pk} ({token.name}) was already revoked.")
