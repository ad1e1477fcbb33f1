"""Settings of the benchmark's web server only: the production settings, plus the bare views of
`bench.urls` when FERMIX_BENCH_VIEWS=1. Nothing in production imports this module."""

import os

from django.core.exceptions import ImproperlyConfigured

from fermix_site.settings import *  # noqa: F403

if os.environ.get("FERMIX_BENCH_VIEWS") != "1":
    raise ImproperlyConfigured("bench.settings serves benchmark-only views: set FERMIX_BENCH_VIEWS=1 to use it")

ROOT_URLCONF = "bench.urls"
