"""django-q2 tasks of the site itself."""

from fermix_site import health


def heartbeat():
    """Scheduled every minute: proves to /healthz and doctor that the cluster runs tasks."""
    health.beat()
