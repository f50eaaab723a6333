"""Which folders are checkpoints: `latest`, complete and incomplete tags, and what a killed save leaves behind.

    DIR/latest        the tag to resume (written last, as DeepSpeed writes it)
    DIR/<tag>/        complete when its manifest.json exists: the manifest is renamed into place after
                      every rank file is, so it is the commit (torch DCP's `.metadata` plays that part)

A save killed midway leaves a tag folder without a manifest, and maybe `*.tmp-<pid>` files. Such a
folder is not a checkpoint: loading treats it as absent and resumes from the last complete one, and
the next save into that tag cleans it and writes it anew. The frameworks do the same: torch DCP decides
whether a checkpoint exists by its metadata file alone (torch/distributed/checkpoint/filesystem.py,
`_FileSystemWriter._metadata_exists`, called by `prepare_local_plan`; `finish` writes `.metadata.tmp`
and renames it), and DeepSpeed loads only the tag its `latest` names, written after every file of the
tag (deepspeed/runtime/engine.py, `save_checkpoint`: `commit(tag)`, then `latest`; `load_checkpoint`).

zerosim writes no symbolic link into a checkpoint folder, so a link there is not one of its tags: a tag folder that
is a link is neither listed, loaded, written into nor removed (a link `C/step000006 -> ../B/step000006` would
otherwise let a save or an overwrite of C change B's files), and is refused by name where a save or a load would
reach it. One process saves into a folder at a time (`save_lock`: an advisory lock on the folder itself), so two
saves of one run at once cannot remove each other's temporary files or mix their rank files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time

from zerosim.checkpoint._files import CheckpointError
from zerosim.outputs import open_input

MANIFEST, LATEST = "manifest.json", "latest"
_TEMP = re.compile(r".+\.tmp-\d+$")  # files.write_atomic's temporary names
_RANK_FILE = re.compile(r"rank\d{5}\.safetensors$")


def check_tag(tag: str) -> str:
    """A tag is a plain folder name: no path separator, not '.', '..' or 'latest'."""
    if not isinstance(tag, str) or not tag or os.sep in tag or (os.altsep and os.altsep in tag) \
            or tag in (".", "..", LATEST) or tag != tag.strip() or any(ord(ch) < 32 for ch in tag):
        raise ValueError(f"a checkpoint tag is a plain folder name, got {tag!r}")
    return tag


def is_complete(folder: str) -> bool:
    """True when `folder` holds a manifest: every rank file was in place before it was written."""
    return os.path.isfile(os.path.join(folder, MANIFEST))  # (a FIFO or a device is not a file: not complete)


def read_latest(directory: str) -> str | None:
    """The tag DIR/latest names (None when there is no such file); a clear error naming it when it is not a tag."""
    path = os.path.join(directory, LATEST)
    try:
        with open_input(path, "rb") as f:  # a FIFO would block the read for ever: refused
            raw = f.read(4097)
    except FileNotFoundError:
        return None
    except (IsADirectoryError, ValueError):
        raise CheckpointError(f"{path}: not a file, where the name of the newest checkpoint's tag belongs") from None
    try:
        tag = raw.decode("utf-8").strip()
        if len(raw) > 4096:
            raise ValueError
        return check_tag(tag)
    except (UnicodeDecodeError, ValueError):
        raise CheckpointError(f"{path}: does not hold a checkpoint tag (a plain folder name, one line): it was "
                              f"overwritten or corrupted; pass tag=... (or resume a tag folder itself)") from None


def complete_tags(directory: str) -> list:
    """The complete tag folders in DIR, oldest first (by the iteration their manifest records, then name)."""
    found = []
    for name in _listing(directory):
        folder = os.path.join(directory, name)
        if name != LATEST and not os.path.islink(folder) and os.path.isdir(folder) and is_complete(folder):
            found.append((_iteration(folder), name))
    return [name for _, name in sorted(found)]


def _iteration(folder: str) -> int:
    """The manifest's iteration, or -1 when it cannot be read (such a folder sorts first: never preferred)."""
    try:
        with open_input(os.path.join(folder, MANIFEST)) as f:
            value = json.load(f).get("iteration", -1)
        return value if type(value) is int else -1
    except (OSError, ValueError, AttributeError):
        return -1


def resolve(directory: str, tag: str | None = None) -> str:
    """The checkpoint folder to load: DIR/<tag>; DIR itself if it holds a manifest; the tag DIR/latest names;
    or, when `latest` is missing or names a folder whose save never finished, the newest complete tag."""
    if not isinstance(directory, (str, os.PathLike)) or not str(directory).strip():
        raise TypeError(f"a checkpoint folder is a path, got {directory!r}")
    directory = os.fspath(directory)
    if tag is not None:
        return refuse_link(os.path.join(directory, check_tag(tag)))
    if not os.path.isdir(directory):
        raise CheckpointError(f"{directory}: no such folder" if not os.path.exists(directory)
                              else f"{directory}: a file, not a checkpoint folder")
    if is_complete(directory):
        return directory
    named = read_latest(directory)
    if named is not None:
        refuse_link(os.path.join(directory, named), f"{os.path.join(directory, LATEST)} names {named!r}: ")
    if named is not None and is_complete(os.path.join(directory, named)):
        return os.path.join(directory, named)
    complete = complete_tags(directory)
    if complete:  # the save `latest` would have named next was killed, or `latest` names a folder left unfinished
        return os.path.join(directory, complete[-1])
    if named is not None:
        raise CheckpointError(f"{os.path.join(directory, LATEST)}: names {named!r}, whose save never finished "
                              f"(no {MANIFEST}), and no other complete checkpoint is in {directory}")
    raise CheckpointError(f"{directory}: no checkpoint here (neither a {MANIFEST} nor a '{LATEST}' file, "
                          "nor a complete tag folder)")


def refuse_link(folder: str, said: str = "") -> str:
    """`folder` (a tag's place), refused when it is a symbolic link: zerosim neither reads, writes nor removes a
    checkpoint through one (see the module docstring)."""
    if os.path.islink(folder):
        raise CheckpointError(f"{said}{folder}: a symbolic link (to {os.readlink(folder)}), not a checkpoint this "
                              "folder holds; zerosim neither follows nor removes links in a checkpoint folder: name "
                              "the folder it points to, or remove the link")
    return folder


LOCK_WAIT = 600.0  # seconds a save waits for another process's save into the same folder (a large one takes minutes)


@contextlib.contextmanager
def save_lock(directory: str, wait: float | None = None):
    """Hold the folder's save lock while the body runs: an exclusive `flock` on the folder itself (no file is added
    to it), released by the kernel when the process ends, kill -9 included. Where flock is missing (Windows) nothing
    is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover (no flock: no lock, as before)
        yield
        return
    wait = LOCK_WAIT if wait is None else wait
    fd = os.open(directory, os.O_RDONLY)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise CheckpointError(f"{directory}: another process has been saving into it for {wait:g} s "
                                          "(it holds the folder's lock); nothing was written: let it finish, or save "
                                          "into another folder") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the lock


def clean_incomplete(directory: str, folder: str | None) -> None:
    """Remove what a killed save left behind: the rank files and temporary files in the incomplete `folder`
    (None: none to clean), and `latest`'s temporary files in DIR. Nothing else is touched (zerosim did not write it)."""
    leftovers = [os.path.join(folder, n) for n in _listing(folder) if _TEMP.match(n) or _RANK_FILE.match(n)] \
        if folder else []
    leftovers += [os.path.join(directory, n) for n in _listing(directory)
                  if n.startswith(LATEST + ".tmp-") and _TEMP.match(n)]
    for path in leftovers:
        if os.path.isfile(path):
            os.remove(path)


def _listing(folder: str) -> list:
    try:
        return os.listdir(folder)
    except OSError:  # missing, not a folder, a name too long, not readable: nothing of zerosim's listed there
        return []
