"""Small filesystems for storage-fault tests: a tmpfs mounted on a folder, a file that fills it, and a
configuration that leaves a disk no room.

Mounting needs root. Where it is refused the test is skipped, and the skip reason says so.
"""

from __future__ import annotations

import errno
import pwd
import subprocess
import time
from pathlib import Path

import pytest

from fermix_site.storage import free_bytes


def mount_tmpfs(folder: Path, size: str, *, owner: str | None = None) -> None:
    """Mount a `size` tmpfs (`"48m"`, `"16k"`) on `folder`, owned by `owner` (default: the caller)."""
    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size},mode=0700"
    if owner is not None:
        try:
            user = pwd.getpwnam(owner)
        except KeyError:
            pytest.skip(f"no {owner} user on this machine to own the {size} tmpfs")
        options += f",uid={user.pw_uid},gid={user.pw_gid}"
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here (mounting needs root): {mounted.stderr.strip()}")


def unmount(folder: Path) -> None:
    """Unmount, waiting a little for processes that are still closing their files there."""
    for _ in range(20):
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode == 0:
            return
        time.sleep(0.5)
    subprocess.run(["umount", "--lazy", str(folder)], check=True)


def fill(folder: Path) -> Path:
    """Write `folder/filler` until the filesystem holding `folder` has no byte left; return its path."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (65536, 512):
            try:
                while True:
                    fh.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def keeping_more_free_than(folder: Path) -> str:
    """A `[fermix_core.storage]` table that keeps more space free than the disk of `folder` has: no cache
    fits there (config text, for `use_config`)."""
    return f"[fermix_core.storage]\nmin_free_mb = {(free_bytes(folder) >> 20) + 1}\n"
