from fermix_site.conf import ConfigError, conf
from resources import install
from resources.bootstrap import DEFAULT_AGENT_NAME, bootstrap_seed
from resources.catalog import check_agent, display_name
from resources.cli import ResourceCommand


class Command(ResourceCommand):
    help = ("Set up Fermix: ask for the agent's name, the memory review interval and the compaction threshold, "
            "write config.toml, and seed the bootstrap files that do not exist yet. --noinput takes the defaults "
            "and leaves an existing config.toml alone.")

    def add_arguments(self, parser):
        parser.add_argument("--noinput", "--no-input", action="store_false", dest="interactive",
                            help="ask nothing: defaults for a new install, existing settings otherwise")
        super().add_arguments(parser)

    def handle(self, *args, **options):
        agent_id = check_agent(self.agent(options))
        if options["interactive"]:
            name, interval, threshold = self.ask()
            install.config_write(review_interval_hours=interval, compaction_threshold=threshold)
            self.stdout.write(f"wrote {conf.config_path}")
        else:
            name = DEFAULT_AGENT_NAME
            if not conf.config_path.exists():
                install.config_write(review_interval_hours=conf.memory.review_interval_hours,
                                     compaction_threshold=conf.compaction.threshold)
                self.stdout.write(f"wrote {conf.config_path} (defaults)")
        self.seed(agent_id, name)

    def ask(self):
        self.stdout.write("Fermix set-up. Press Enter to keep the value in brackets.\n")
        name = self.prompt("Agent name", DEFAULT_AGENT_NAME, lambda text: text.strip() or DEFAULT_AGENT_NAME)
        interval = self.prompt("Memory review interval in hours (0 turns background review off)",
                               conf.memory.review_interval_hours, install.parse_review_interval)
        threshold = self.prompt("Compaction threshold, share of the context window (0.1-1.0)",
                                conf.compaction.threshold, install.parse_threshold)
        return name, interval, threshold

    def prompt(self, question, default, parse):
        shown = f"{default:g}" if isinstance(default, float) else default
        while True:
            try:
                answer = input(f"{question} [{shown}]: ").strip()
            except EOFError:
                answer = ""
            if not answer:
                return default
            try:
                return parse(answer)
            except ConfigError as exc:
                self.stderr.write(f"  {exc}")

    def seed(self, agent_id, name):
        for result in bootstrap_seed(agent_id=agent_id, agent_name=name):
            file = display_name(result.resource_type)
            if result.seeded:
                self.stdout.write(f"seeded  {file:<12} {result.path} (r{result.revision}, seed)")
            else:
                self.stdout.write(f"kept    {file:<12} {result.path} (exists)")
