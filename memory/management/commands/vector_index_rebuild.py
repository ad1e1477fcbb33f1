import os

from django.core.management.base import BaseCommand, CommandError

from fermix_site.conf import conf, valid_id
from memory import embeddings
from memory.search import ann


class Command(BaseCommand):
    help = ("Build or bring up to date this node's approximate vector indexes (the scopes with more than "
            "[fermix_core.embeddings] exact_max_vectors vectors), and remove the ones no scope needs. "
            "The indexes are caches under $FERMIX_HOME/cache/vectors/; the schedule fermix-vector-index "
            "does the same every five minutes.")

    def add_arguments(self, parser):
        parser.add_argument("--agent", metavar="ID", help="only this agent's indexes")
        parser.add_argument("--rebuild", action="store_true", help="build every index anew from the database")
        parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, metavar="N",
                            help="threads that build (default: every core)")

    def handle(self, *args, **options):
        agent_id = options["agent"]
        if agent_id is not None and not valid_id(agent_id):
            raise CommandError(f"agent id {agent_id!r} is invalid")
        if not 1 <= options["threads"] <= 256:
            raise CommandError("--threads must be from 1 to 256")
        if not ann.available():
            raise CommandError("usearch is not installed (pip install -r requirements.txt): large scopes stay lexical")
        model = embeddings.embedder()
        if model is None:
            raise CommandError('[fermix_core.embeddings] backend = "none": there are no vectors to index')
        large = ann.large_scopes(model.model_id, agent_id)
        self.stdout.write(f"{model.model_id}: {len(large)} scope(s) past {conf.embeddings.exact_max_vectors:,} "
                          "vectors")
        done = ann.refresh(model.model_id, model.dimensions, agent_id=agent_id, threads=options["threads"],
                           rebuild=options["rebuild"])
        counts = {(agent, kind): n for agent, kind, n in large}
        for (agent, kind), outcome in done.items():
            vectors = f" ({counts[(agent, kind)]:,} vectors)" if (agent, kind) in counts else ""
            self.stdout.write(f"{agent} {kind}: {outcome}{vectors}")
