#!/usr/bin/env python
"""Django's command-line utility for Fermix."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fermix_site.settings")
    from django.core.management import execute_from_command_line

    from fermix_site.conf import ConfigError

    try:
        execute_from_command_line(sys.argv)
    except ConfigError as exc:
        # An invalid config.toml value or environment variable: say which, without a traceback.
        sys.stderr.write(f"fermix: configuration error: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
