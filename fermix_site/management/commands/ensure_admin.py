import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from fermix_site.conf import conf


class Command(BaseCommand):
    help = "Create the `admin` superuser on first run; its password is printed once and kept 0600."

    def handle(self, *args, **options):
        User = get_user_model()
        if User.objects.filter(username="admin").exists():
            return
        password = secrets.token_urlsafe(16)
        path = conf.home / "admin-password.txt"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(password + "\n")
        os.chmod(path, 0o600)
        User.objects.create_superuser("admin", "", password)
        self.stdout.write(f"Created the admin user. Username: admin  Password: {password}")
        self.stdout.write(f"(The password is also in {path}, readable only by you.)")
