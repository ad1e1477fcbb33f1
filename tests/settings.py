"""Test settings: a throw-away FERMIX_HOME unless the caller gives one; otherwise the real settings."""

import os
import tempfile

os.environ.setdefault("FERMIX_HOME", tempfile.mkdtemp(prefix="fermix-test-home-"))

from fermix_site.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed only; never in production
