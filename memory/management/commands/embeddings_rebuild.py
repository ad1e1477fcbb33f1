import time

from django.core.management.base import BaseCommand, CommandError

from fermix_site import leases
from fermix_site.conf import valid_id
from fermix_site.progress import Progress
from memory import embeddings
from memory.vectors import LEASE, LEASE_TTL, embed_pending, hold_embedding_lease, pending_counts, prune_other_models


class Command(BaseCommand):
    help = ("Compute the vectors that are missing under the configured embedding model (every message and "
            "live memory row after a model change), with a progress bar. Resumable: stop it at any time and run "
            "it again, nothing stored is computed twice. When every vector of the current model is there, "
            "the vectors of other models are removed unless --keep-other-models.")

    def add_arguments(self, parser):
        parser.add_argument("--agent", metavar="ID", help="only this agent's messages and memory rows")
        parser.add_argument("--batch", type=int, default=64, metavar="N", help="texts per model run (default 64)")
        parser.add_argument("--every", type=int, default=10_000, metavar="N",
                            help="off a terminal, a progress line every N texts (default 10000)")
        parser.add_argument("--keep-other-models", action="store_true",
                            help="keep the vectors of earlier models")

    def handle(self, *args, **options):
        agent_id, batch = options["agent"], options["batch"]
        if agent_id is not None and not valid_id(agent_id):
            raise CommandError(f"agent id {agent_id!r} is invalid")
        if not 1 <= batch <= 2048:
            raise CommandError("--batch must be from 1 to 2048")
        model = embeddings.embedder()
        if model is None:
            raise CommandError('[fermix_core.embeddings] backend = "none": there is no model to embed with')
        messages, memories = pending_counts(model.model_id, agent_id)
        total = messages + memories
        self.stdout.write(f"{model.model_id}: {messages:,} message(s) and {memories:,} memory row(s) to embed")
        bar = Progress(self.stdout, total, every=options["every"], label="embedded")

        def show(done):
            bar.update(done.messages + done.memories)

        waited = []

        def wait():
            if not waited:
                self.stdout.write("a worker's embedding pass is running; waiting for it to stop (at most a minute)")
            waited.append(1)
            time.sleep(1)

        token = hold_embedding_lease(wait)
        try:
            done = embed_pending(agent_id=agent_id, batch=batch, progress=show,
                                 go_on=lambda: leases.renew(LEASE, token, LEASE_TTL) or True)
        except embeddings.EmbeddingError as exc:
            raise CommandError(f"stopped: {exc} (run the command again to go on from here)") from None
        finally:
            leases.release(LEASE, token)
        bar.finish()
        self.stdout.write(f"embedded {done.messages:,} message(s) and {done.memories:,} memory row(s)")
        if agent_id is None and not options["keep_other_models"] and pending_counts(model.model_id) == (0, 0):
            removed = prune_other_models(model.model_id)
            if removed:
                self.stdout.write(f"removed {removed:,} vector(s) of other models")
