"""Django settings for Fermix.

Everything comes from the environment (and `$FERMIX_HOME/config.toml` through `fermix_site.conf`).
`DATABASE_URL` switches from the embedded SQLite to PostgreSQL; `REDIS_URL` switches the django-q2
broker and the cache to Redis.
"""

import os
import secrets
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from fermix_site.conf import ConfigError, conf
from fermix_site.storage import sqlite_init_command

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name, default):
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


CONFIG = conf.get()  # raises ConfigError, naming the key, on any invalid value
FERMIX_HOME = CONFIG.home
# Everything Fermix creates is its owner's alone (0600 files, 0700 folders), whoever made FERMIX_HOME
# and whatever umask the shell had: memory.db holds every conversation.
os.umask(0o077)
FERMIX_HOME.mkdir(parents=True, exist_ok=True, mode=0o700)
# The servers' own files (gunicorn's control socket and heartbeat files) and the temporary files of
# SQLite (large sorts, VACUUM) stay inside FERMIX_HOME too.
RUN_DIR = FERMIX_HOME / "run"
RUN_DIR.mkdir(exist_ok=True, mode=0o700)
os.environ.setdefault("SQLITE_TMPDIR", str(RUN_DIR))


def _secret_key():
    if os.environ.get("FERMIX_SECRET_KEY"):
        return os.environ["FERMIX_SECRET_KEY"]
    path = FERMIX_HOME / "secret_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = envbool("FERMIX_DEBUG", False)
ALLOWED_HOSTS = [h for h in os.environ.get("FERMIX_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",") if h]
if os.environ.get("FERMIX_BIND") and os.environ["FERMIX_BIND"] not in ALLOWED_HOSTS:
    ALLOWED_HOSTS.append(os.environ["FERMIX_BIND"])
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("FERMIX_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_extensions",
    "django_q",
    "ninja",  # serves the API docs' assets locally instead of from a CDN
    "fermix_site",
    "memory",
    "resources",
    "jobs",
    "api",
    "providers",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "fermix_site.urls"
WSGI_APPLICATION = "fermix_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_from_url(url: str) -> dict:
    """`postgres://user:pass@host:port/name?sslmode=…` or `sqlite:////abs/path.db`."""
    parts = urlparse(url)
    if parts.scheme == "sqlite":
        return sqlite_database(Path(unquote(parts.path)))
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ConfigError(f"DATABASE_URL must start with postgres:// or sqlite:///, got {parts.scheme!r}")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "fermix",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": options,
        "TEST": {"NAME": os.environ.get("FERMIX_TEST_DATABASE_NAME") or None},
    }


def sqlite_database(path: Path) -> dict:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            # IMMEDIATE takes the write lock at BEGIN, so two writers queue on the busy timeout
            # instead of failing with "database is locked" when a read transaction upgrades.
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": sqlite_init_command(CONFIG.storage.durability),
        },
        # Keep each worker's connection between requests, as for PostgreSQL. Opening one per request
        # costs more than the request's own write: the schema is parsed again, and when the last
        # connection closes SQLite checkpoints the WAL into the database and removes it.
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        # A file, not :memory:, so a second process in a test sees the same database.
        "TEST": {"NAME": str(path.with_name("test-" + path.name))},
    }


DATABASES = {
    "default": database_from_url(os.environ["DATABASE_URL"])
    if os.environ.get("DATABASE_URL")
    else sqlite_database(CONFIG.db_path)
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "fermix",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "fermix"}}

# django-q2. Without these, a failing task is retried for ever (max_attempts) and a task that runs
# past `retry` is handed to a second worker while the first still runs, so retry > timeout > the longest
# task: a compaction makes two model calls (review, then summary), each of which may try every provider.
Q_TIMEOUT = CONFIG.timeouts.llm_buffered_ms // 1000 * max(1, len(CONFIG.providers)) * 2 + 60
Q_CLUSTER = {
    "name": "fermix",
    "workers": int(os.environ.get("FERMIX_WORKERS", "2")),
    "timeout": Q_TIMEOUT,
    "retry": Q_TIMEOUT + 60,
    "max_attempts": 3,
    "ack_failures": True,
    "catch_up": False,
    "save_limit": 1000,
    "poll": 0.5,
    "label": "Task queue",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = ["fermix_site.formats"]  # one date format: 2026-12-01 19:40 (UTC)

STATIC_URL = "static/"
STATIC_ROOT = FERMIX_HOME / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # 1 MiB; the API answers 413 above it

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if envbool("FERMIX_BEHIND_PROXY", False) else None
# Served over HTTPS (directly or behind a proxy that sets X-Forwarded-Proto with FERMIX_BEHIND_PROXY):
# secure cookies, redirect plain HTTP (except the health probe), and HSTS. `check --deploy` is clean.
HTTPS = envbool("FERMIX_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = int(os.environ.get("FERMIX_HSTS_SECONDS", "31536000")) if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

LOG_LEVEL = os.environ.get("FERMIX_LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # django-q2 logs as "django-q": a line per queued and per finished task (the heartbeat's, each
        # minute) would bury everything else.
        "django-q": {"level": os.environ.get("FERMIX_Q_LOG_LEVEL", "WARNING").upper()},
        # Django logs every 4xx answer as a warning; a wrong key or an unknown id is the caller's mistake,
        # answered in JSON, and not the operator's business unless they ask (FERMIX_LOG_LEVEL=DEBUG).
        "django.request": {"level": "DEBUG" if LOG_LEVEL == "DEBUG" else "ERROR"},
        "httpx": {"level": "WARNING"},  # a line per model request is noise; calls are traced in model_calls
    },
}
