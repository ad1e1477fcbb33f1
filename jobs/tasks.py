"""django-q2 tasks of scheduled jobs. Thin: they take an id and call a service."""

from jobs import services


def job_run_scheduled(job_id):
    """Fired by the job's Schedule."""
    run = services.job_run_scheduled(job_id=int(job_id))
    return run.status if run else "skipped"


def job_run_execute(run_id):
    """A run claimed by "run now" (POST …/jobs/{id}/run), executed by a worker."""
    return services.job_run_execute(run_id=int(run_id)).status
