"""Writing the user's files without following a symlink planted at the target.

Every file the command line or the pages write goes through :func:`write_file`: the bytes land in a temporary
file in the target's own folder and are renamed over the target, so a reader never sees half a file and a
rename replaces a name, never what a link points to. A symlink already at the target is refused by name.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class SymlinkRefused(OSError):
    """The target of a write is a symbolic link; nothing was written."""

    def __init__(self, path: Path):
        try:
            dest = os.readlink(path)
        except OSError:
            dest = "?"
        super().__init__(f"{path}: is a symbolic link (to {dest}); refusing to write through it - remove it "
                         "or choose another name")
        self.strerror = f"is a symbolic link (to {dest}); refusing to write through it"
        self.filename = str(path)

    def __str__(self) -> str:
        return str(self.args[0])


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_file(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` (str is UTF-8) to ``path`` by temp file + rename; raises SymlinkRefused or OSError."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    else:
        if stat.S_ISLNK(st.st_mode):
            raise SymlinkRefused(path)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "is a folder, not a file", str(path))
        mode = stat.S_IMODE(st.st_mode)  # replacing a file keeps its permissions
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, mode)
        os.replace(tmp, path)  # rename(2) replaces the name; a link planted since the check is replaced, not followed
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
