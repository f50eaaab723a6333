"""Where a command may write: every output path checked before the work starts, never inside a checkpoint folder.

    check_file("plan.png", "--figure", suffixes=(".png",))   # before planning: a ValueError naming flag and path
    check_folder("site/explorer", "--html")                   # a folder to write into (made later if missing)
    write_atomic(path, lambda tmp: fig.savefig(tmp))          # whole or not at all; errors name `path`, never tmp

A path is refused, in one line naming the flag and the path, when it is a folder where a file is meant (or a file
where a folder is), when the nearest folder that exists on its way cannot be written (checked by creating and
removing one empty file there: permissions alone do not tell, e.g. under /proc or on a read-only mount), or when
it lies inside a checkpoint folder — a tag folder (it holds a zerosim `manifest.json`) or the folder a run saves
into (it holds a `latest` file naming such a tag, or such tags): a command never writes into a checkpoint it was
not asked to save (torch DCP and DeepSpeed own their folders the same way; zerosim.checkpoint.save is the one
writer there). The folders on the way are followed as the user named them (a link among them is resolved, so a path
through one into a checkpoint is refused too), but the file itself is never a symbolic link: a link may point out
of the folder the user named, into a checkpoint or at any file, and writing through it would change that file
(`open_output` opens with O_NOFOLLOW, so a link made after the check is refused too). An existing file without
write permission is refused rather than replaced, as `cp` refuses it without -f.
"""

from __future__ import annotations

import os
import stat

MANIFEST, LATEST = "manifest.json", "latest"  # zerosim.checkpoint's names (checkpoint/_folders.py)
MARK = b'"zerosim-checkpoint"'  # the manifest's "format" value, in its first bytes


def is_tag_folder(folder: str) -> bool:
    """True when `folder` holds a zerosim checkpoint's manifest (a complete tag, or one given as DIR itself)."""
    try:
        with open_input(os.path.join(folder, MANIFEST), "rb") as f:
            return MARK in f.read(4096)
    except (OSError, ValueError):  # ValueError: not a regular file (a FIFO would block the read)
        return False


def is_run_folder(folder: str) -> bool:
    """True when `folder` is where a run saves its tags: a `latest` file or a tag folder inside it."""
    if os.path.isfile(os.path.join(folder, LATEST)):
        try:
            with open_input(os.path.join(folder, LATEST), "rb") as f:
                tag = f.read(256).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            tag = ""
        if tag and os.sep not in tag and is_tag_folder(os.path.join(folder, tag)):
            return True
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return any(is_tag_folder(os.path.join(folder, n)) for n in names if not n.startswith("."))


def checkpoint_around(path: str, include_self: bool = True) -> str | None:
    """The checkpoint folder `path` lies in (the nearest tag or run folder among it and its parents), or None.
    `include_self=False` leaves `path` itself out (a save's own folder may be a run folder)."""
    here = os.path.realpath(path)
    if not include_self:
        here = os.path.dirname(here)
    while True:
        if os.path.isdir(here) and (is_tag_folder(here) or is_run_folder(here)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def refuse_inside_checkpoint(path: str, flag: str, include_self: bool = True) -> None:
    root = checkpoint_around(path, include_self)
    if root is not None:
        raise ValueError(f"{_named(flag, path)}: inside the checkpoint {root}; writing there would overwrite or add "
                         "to its files: write it outside it")


def check_file(path, flag: str = "", suffixes: tuple = ()) -> str:
    """`path` as a file this command may write, checked before any work (see the module docstring); returns it."""
    path = _text(path, flag)
    _short_enough(path, flag)
    refuse_link(path, flag)
    refuse_inside_checkpoint(path, flag)
    if suffixes and not path.lower().endswith(tuple(s.lower() for s in suffixes)):
        raise ValueError(f"{_named(flag, path)}: expected a {' or '.join(suffixes)} file name")
    if os.path.isdir(path):
        raise ValueError(f"{_named(flag, path)}: a folder; give a file name in it")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ValueError(f"{_named(flag, path)}: not a regular file (a device, pipe or socket); give a file name")
    if os.path.isfile(path) and not (os.stat(path).st_mode & 0o222 and os.access(path, os.W_OK)):
        raise ValueError(f"{_named(flag, path)}: a read-only file; make it writable or name another file")
    _writable(os.path.dirname(os.path.abspath(path)), path, flag)
    return path


def open_input(path, mode: str = "r", flag: str = ""):
    """`path` opened for reading ("r" text, "rb" bytes) only when it is a regular file: a FIFO, a device or a socket
    named as a config, a manifest or `latest` would block the read for ever (opened with O_NONBLOCK, which does not
    wait for a writer, then checked); a ValueError names it. Other errors are open()'s (FileNotFoundError, ...)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode_bits = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode_bits):
            raise ValueError(f"{_named(flag, path)}: a folder, not a file")
        if not stat.S_ISREG(mode_bits):
            raise ValueError(f"{_named(flag, path)}: not a regular file (a pipe, a device or a socket): give a file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    except BaseException:
        os.close(fd)
        raise


def refuse_link(path: str, flag: str = "") -> None:
    """Refuse a `path` that is itself a symbolic link (a dangling one too): see the module docstring."""
    if os.path.islink(path):
        raise ValueError(f"{_named(flag, path)}: a symbolic link (to {os.readlink(path)}); zerosim writes no file "
                         "through a link, which may point out of the folder you named: remove the link or name "
                         "another file")


def open_output(path: str, mode: str = "w", flag: str = ""):
    """`path` opened for writing ("w": emptied first, "a": appended to) as a text file, never through a symbolic
    link (O_NOFOLLOW); an OSError names `path` and `flag`."""
    how = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC) | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.fdopen(os.open(path, how, 0o644), mode, encoding="utf-8")
    except OSError as e:
        raise _unwritten(e, flag, path) from None


def refuse_inside(path: str, flag: str, folder: str, folder_flag: str) -> None:
    """Refuse a file `path` that lies in (or is) `folder`, another output of the same command (a run's --save)."""
    here, there = os.path.realpath(path), os.path.realpath(folder)
    if here == there or here.startswith(there.rstrip(os.sep) + os.sep):
        raise ValueError(f"{_named(flag, path)}: inside {_named(folder_flag, folder)}, the folder the run saves its "
                         "checkpoints into; write it outside it")


def check_folder(path, flag: str = "", checkpoint_ok: bool = False) -> str:
    """`path` as a folder this command may write into (made later when missing); returns it. `checkpoint_ok`: the
    folder may itself be a run's checkpoint folder (zerosim.checkpoint.save's, which checks whose it is)."""
    path = _text(path, flag)
    _short_enough(path, flag)
    refuse_inside_checkpoint(path, flag, include_self=not checkpoint_ok)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{_named(flag, path)}: a file, not a folder; give a folder to write into")
    if checkpoint_ok and os.path.isdir(path) and is_tag_folder(path):
        parent = os.path.dirname(os.path.abspath(path))
        raise ValueError(f"{_named(flag, path)}: a checkpoint's tag folder (it holds {MANIFEST}): save into {parent}, "
                         "the folder that holds its tags, or another folder")
    _writable(os.path.abspath(path), path, flag)
    return path


def write_atomic(path: str, write, flag: str = "") -> str:
    """Call `write(tmp)` with a temporary name beside `path`, then rename it to `path`: a reader sees the old file or
    the new one, never half of one. The folders on the way are made. An OSError names `path`, not the temporary
    file (whose name the user never gave)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise _unwritten(e, flag, path) from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _unwritten(e: OSError, flag: str, path: str) -> OSError:
    """An OSError naming `path` (not a temporary name), with e's errno kept but not printed: "[Errno 36]" means
    nothing to a reader."""
    out = OSError(f"{_named(flag, path)}: could not be written ({e.strerror or e})")
    out.errno = e.errno
    return out


def _short_enough(path: str, flag: str) -> None:
    """Refuse a path whose names are longer than the file system takes (NAME_MAX, 255 bytes on Linux) once the
    temporary suffix `write_atomic` adds is counted, or longer than PATH_MAX: refused now, not after the work."""
    full = os.path.abspath(path)
    if len(os.fsencode(full)) >= 4096 - TMP_SUFFIX:
        raise ValueError(f"{_named(flag, path)}: a path of {len(os.fsencode(full)):,} bytes, longer than the file "
                         "system takes (4,096)")
    longest = max(full.split(os.sep), key=lambda part: len(os.fsencode(part)))
    if len(os.fsencode(longest)) + TMP_SUFFIX > 255:
        raise ValueError(f"{_named(flag, path)}: a name of {len(os.fsencode(longest))} bytes, longer than the file "
                         f"system takes ({255 - TMP_SUFFIX} for zerosim's files, which are written under a temporary "
                         "name first)")


TMP_SUFFIX = 24  # ".tmp-<pid>" that write_atomic adds (a pid has at most 10 digits), and room to spare


def _writable(target: str, path: str, flag: str) -> None:
    """Refuse when the nearest existing folder on the way to `target` (a folder) cannot take a new file."""
    here = target
    while not os.path.exists(here):
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    if not os.path.isdir(here):
        raise ValueError(f"{_named(flag, path)}: {here} is a file, not a folder")
    probe = os.path.join(here, f".zerosim-write-check-{os.getpid()}")
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.remove(probe)
    except OSError as e:
        raise ValueError(f"{_named(flag, path)}: cannot write in {here} ({e.strerror or e})") from None


def _text(path, flag: str) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise ValueError(f"{flag + ' ' if flag else ''}needs a path, got {path!r}")
    return path


def _named(flag: str, path: str) -> str:
    return f"{flag} {path}" if flag else path
