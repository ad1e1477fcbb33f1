from django.utils import timezone

from memory.soul_drafts import soul_propose
from resources.cli import ResourceCommand, positive_int
from resources.soul import OWNER_TRUST, soul_apply, soul_deny


class Command(ResourceCommand):
    help = ("Change SOUL.md with the owner's confirmation: `review` (the model proposes a small improvement "
            "from what memory knows about the owner), `suggest \"INSTRUCTION\"` (the model drafts the change "
            "asked for), `revert N` or `reset` (to the shipped template) print a diff and a token; "
            "`apply TOKEN` writes it, `deny TOKEN` drops it. Tokens expire after five minutes.")

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        review = actions.add_parser("review", help="ask the model for a small improvement, from the owner's memory")
        suggest = actions.add_parser("suggest", help="ask the model to draft the change an instruction asks for")
        suggest.add_argument("instruction", help='what should change, e.g. "be more concise with me"')
        revert = actions.add_parser("revert", help="propose restoring SOUL.md revision N")
        revert.add_argument("revision", type=positive_int)
        reset = actions.add_parser("reset", help="propose restoring the shipped SOUL.md template")
        apply = actions.add_parser("apply", help="apply a proposal")
        apply.add_argument("token")
        deny = actions.add_parser("deny", help="drop a proposal")
        deny.add_argument("token")
        for action in (review, suggest, revert, reset, apply, deny):
            action.add_argument("--agent", metavar="ID", help="agent id (default: the configured agent_id)")

    def handle(self, *args, **options):
        agent_id, action = self.agent(options), options["action"]
        if action in {"review", "suggest", "revert", "reset"}:
            self.propose(agent_id, action, options.get("revision"), options.get("instruction", ""))
        elif action == "apply":
            self.apply(agent_id, options["token"])
        else:
            soul_deny(agent_id=agent_id, token=options["token"], trust=OWNER_TRUST)
            self.stdout.write("Proposal denied; SOUL.md is unchanged.")

    def propose(self, agent_id, mode, revision, instruction):
        if mode in {"review", "suggest"}:
            self.stderr.write("Asking the model for a draft…")
        proposal = soul_propose(agent_id=agent_id, mode=mode, revision=revision, instruction=instruction,
                                trust=OWNER_TRUST, requested_by="manage.py soul")
        seconds = round((proposal.expires_at - timezone.now()).total_seconds())
        self.stdout.write(proposal.diff, ending="")
        if proposal.rationale:
            self.stdout.write(f"\nRationale: {proposal.rationale}")
        change = proposal.metadata.get("change")
        if change:
            self.stdout.write(self.change_text(change, proposal.metadata.get("bound")))
        self.stdout.write(f"\nProposal {proposal.token} expires at {proposal.expires_at:%Y-%m-%d %H:%M:%S} UTC "
                          f"(in {seconds} s).")
        self.stdout.write(f"Apply: python manage.py soul apply {proposal.token}")
        self.stdout.write(f"Deny:  python manage.py soul deny {proposal.token}")

    @staticmethod
    def change_text(change, bound):
        text = (f"Change: {change['lines']} line(s), {change['bytes']} of {change['base_bytes']} bytes "
                f"({change['percent']}%)")
        if bound:
            text += f"; a review may change at most {bound['max_lines']} lines and {bound['max_bytes']} bytes"
        return text + "."

    def apply(self, agent_id, token):
        applied = soul_apply(agent_id=agent_id, token=token, trust=OWNER_TRUST)
        if applied.revision is None:
            self.stdout.write("SOUL.md already had this content; no revision was written.")
            return
        what = {"revert": f"the content of r{applied.proposal.target_revision}",
                "reset": "the shipped template"}.get(applied.proposal.mode, f"the {applied.proposal.mode} draft")
        self.stdout.write(f"Applied: SOUL.md is now r{applied.revision} ({what}). Cached prompts are rebuilt on "
                          "their next use in every process.")
