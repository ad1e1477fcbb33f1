from django.core.management.base import BaseCommand, CommandError

from api.models import ApiKey
from api.services import ApiKeyError, apikey_create


class Command(BaseCommand):
    help = ("Create an API key and print it (only the key, once: only its hash is stored). "
            "channel keys are for bots, operator keys may do everything.")

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True, help="a unique name, used to revoke the key")
        parser.add_argument("--role", required=True, choices=ApiKey.Role.values)
        parser.add_argument("--agent", action="append", default=[], metavar="ID",
                            help="restrict the key to this agent (repeatable; default: every agent)")
        parser.add_argument("--may-assert-operator", action="store_true",
                            help="channel keys: requests may send \"trust\": \"operator\" (a bot that knows when "
                                 "the owner speaks); without it such a request is refused with 403 trust_not_allowed")

    def handle(self, *args, **options):
        try:
            _, key = apikey_create(name=options["name"], role=options["role"], agents=options["agent"],
                                   may_assert_operator=options["may_assert_operator"])
        except ApiKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(key)
