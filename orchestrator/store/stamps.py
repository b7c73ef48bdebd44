"""A file's stamp: what tells, without reading it, that a file is the one read before (STORE).

Why: `orch serve`'s views (the runs index, /status, /api/status) are asked again every few
seconds of folders holding thousands of runs that never change; each keeps what it read of a
file with the file's stamp and reads it again only when the stamp differs. The stamp holds the
kind, device, inode (a file replaced by a rename is another inode), size, mtime and ctime (any
write moves ctime, a touch -d back in time too).
"""

from __future__ import annotations

import os
import stat

# what a view read is kept only once every file it was read from is this much older than the view:
# a write in the same clock tick as the stamp (file times are coarse: a jiffy, a second on some file
# systems) could leave every stamp as it was, the racy-git problem
SETTLE_NS = 2_000_000_000
Stamp = tuple[int, int, int, int, int, int] | None  # of one file; None: there is none


def file_stamp(path: str) -> Stamp:
    """(kind, device, inode, size, mtime_ns, ctime_ns) of the file at path (followed), None if none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (stat.S_IFMT(st.st_mode), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def settled(stamps: tuple[Stamp, ...], before_ns: int) -> bool:
    """Was every file (of these stamps) last changed before `before_ns` (none: nothing to change)?"""
    return all(s is None or s[5] < before_ns for s in stamps)
