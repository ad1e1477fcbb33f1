from django.core.management.base import BaseCommand, CommandError

from api.services import ApiKeyError, apikey_revoke


class Command(BaseCommand):
    help = "Revoke an API key by name; requests with it are refused from now on."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, **options):
        try:
            row = apikey_revoke(name=options["name"])
        except ApiKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Revoked API key {row.name!r} ({row.role}).")
