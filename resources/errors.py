"""Every refusal the resources app can give, in one place.

Each error has a stable `code` and the HTTP status the API answers with, so the command line, the API
and the admin all say the same thing for the same mistake.
"""


class ResourceError(Exception):
    """A resource operation was refused; nothing was written."""

    code = "resource_error"
    http_status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


class InvalidAgent(ResourceError):
    code = "invalid_agent"


class UnknownType(ResourceError):
    code = "unknown_type"


class InvalidScope(ResourceError):
    code = "invalid_scope"


class UnknownScope(InvalidScope):
    """A well-formed scope that the type does not have: no resource can be there."""

    code = "unknown_scope"
    http_status = 404


class InvalidMutationSource(ResourceError):
    code = "invalid_mutation_source"


class InvalidContent(ResourceError):
    code = "invalid_content"


class UnknownResource(ResourceError):
    code = "unknown_resource"
    http_status = 404


class UnknownRevision(ResourceError):
    code = "unknown_revision"
    http_status = 404


class CheckpointRollback(ResourceError):
    code = "checkpoint_rollback"
    http_status = 409


class RedactedRevision(ResourceError):
    code = "redacted_revision"
    http_status = 409


class UnsafePath(ResourceError):
    code = "unsafe_path"


class Forbidden(ResourceError):
    code = "forbidden"
    http_status = 403


class UnknownProposal(ResourceError):
    code = "unknown_proposal"
    http_status = 404


class UnsupportedMode(ResourceError):
    code = "unsupported_mode"


class NothingToReview(UnsupportedMode):
    """A review asked of an empty SOUL.md: the request is fine, the file's state is what refuses it."""

    code = "nothing_to_review"
    http_status = 409


class NoChange(ResourceError):
    code = "no_change"
    http_status = 409


class StaleBase(ResourceError):
    code = "stale_base"
    http_status = 409


class ProposalExpired(ResourceError):
    code = "expired"
    http_status = 409


class ProposalClosed(ResourceError):
    code = "proposal_closed"
    http_status = 409


class DraftTooLarge(ResourceError):
    code = "draft_too_large"
    http_status = 422


class UnusableDraft(ResourceError):
    """The model answered, but not with a usable SOUL.md."""

    code = "unusable_draft"
    http_status = 502


class ModelUnavailable(ResourceError):
    code = "model_unavailable"
    http_status = 503
