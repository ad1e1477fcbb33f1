"""Production settings: `check --deploy` is clean when served over HTTPS, and cookies are secure."""

import pytest

from tests.conftest import process_env, run_manage

pytestmark = pytest.mark.django_db


def test_check_deploy_is_clean_over_https(tmp_path):
    result = run_manage("check", "--deploy", "--fail-level", "WARNING",
                        env=process_env(FERMIX_HOME=tmp_path, FERMIX_HTTPS="true"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


SHOW = ("from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT)")


def test_cookies_are_secure_only_over_https(tmp_path):
    https = run_manage("shell", "-c", SHOW, env=process_env(FERMIX_HOME=tmp_path, FERMIX_HTTPS="true"))
    plain = run_manage("shell", "-c", SHOW, env=process_env(FERMIX_HOME=tmp_path, FERMIX_HTTPS="false"))
    assert https.stdout.split()[-3:] == ["True", "True", "True"]
    assert plain.stdout.split()[-3:] == ["False", "False", "False"]
