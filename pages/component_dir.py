"""A folder for a custom component's browser files, built once per version (a plain module, not a page).

Streamlit serves a component only from inside its folder, and site-packages may be read-only, so the files are
copied under the temporary directory, which works on a fresh clone. That folder is shared with every local
user: one is reused only when this user owns it and no one else can write to it (a folder someone else made
at the name could serve the app their scripts); otherwise a private one is built for this process.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def _ours(folder: Path) -> bool:
    """A real folder (not a link) of this user's, that only this user can write to."""
    try:
        st = folder.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _settle(folder: Path) -> None:
    """Files 0644 and folders 0755 whatever the source's modes were (a read-only site-packages copies as
    read-only files, which could then be neither patched nor removed; a group-writable one as writable)."""
    for root, dirs, files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)


def built(prefix: str, digest: str, fill: Callable[[Path], None], marker: str) -> Path:
    """``<tmp>/<prefix><digest>``, made by ``fill(folder)`` when missing (``marker`` is the file ``fill``
    writes last: its presence says the folder is complete). Never reuses a folder made by someone else."""
    folder = Path(tempfile.gettempdir()) / f"{prefix}{digest}"
    if _ours(folder) and (folder / marker).is_file():
        return folder
    tmp = Path(tempfile.mkdtemp(prefix=prefix))  # mode 0700, this user's
    try:
        fill(tmp)
        _settle(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.lexists(folder):  # someone else's, or half made: keep ours private to this process
        return tmp
    try:
        tmp.rename(folder)  # atomic: another process may be building the same folder
    except OSError:  # it made the folder first
        if _ours(folder) and (folder / marker).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            return folder
        return tmp
    return folder
