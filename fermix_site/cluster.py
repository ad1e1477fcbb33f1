"""The task cluster (`manage.py qcluster`) stops once, however many stop signals reach it.

`serve` stops its cluster with SIGTERM, and a Ctrl-C on the terminal (or a signal to the whole process
group) reaches the cluster as well: two stop signals. django-q2 2.x's `Cluster.sig_handler` calls `stop()`
at each, and a signal that arrives after the first stop has finished, while the process is exiting and
joining its children, fails on the event the first stop cleared (`'NoneType' object has no attribute
'set'`) and prints a traceback on the operator's terminal. A cluster that has been started and stopped
ignores further stop signals; before it starts, django-q2's own handling is unchanged.
"""

from __future__ import annotations

from django_q.cluster import Cluster

_library_handler = Cluster.sig_handler


def _stop_once(self: Cluster, signum, frame) -> None:
    if self.sentinel is not None and self.stop_event is None:
        return  # stopped already: nothing left to stop
    _library_handler(self, signum, frame)


def install() -> None:
    """Called once, from the app's `ready()`."""
    if Cluster.sig_handler is not _stop_once:
        Cluster.sig_handler = _stop_once
