"""Keep a learner's code inside its case folder, whoever runs the grader: what the child does to itself first.

    confinement()          # what this machine allows: Landlock's ABI, whether signals are scoped, who runs
    check_confinable()     # in the grader, before anything starts: CannotConfine as root where nothing confines
    confine(folder)        # in the child, before the learner's code: from here on it writes only in `folder`

The choice, and why. A grader runs what a stranger wrote; it must not be able to write outside the folder made for
it, whether a student runs `zerosim exercise check` or Gradescope runs the autograder as root. Four ways were weighed:

- **Landlock** (Linux 5.13+, `Documentation/userspace-api/landlock.rst`): a process restricts *itself*, with no
  privilege, for good (its children inherit it; nothing lifts it). The rules here: every kind of write (writing or
  truncating a file, making or removing a file, folder, link, socket, fifo or device node, moving a file) is denied
  except beneath the case folder (and writing to /dev/null); reading is left alone (an interpreter may live anywhere,
  pyenv's under a private home included). From ABI 6 (Linux 6.12) it also scopes signals: the learner's code cannot
  signal a process outside its own domain (the grader, the keeper, anything else on the machine). The one used.
- **A dedicated unprivileged user** alone (the old `nobody` fallback): it needs an interpreter that user can read
  (not one under root's home, mode 700), and it can still write wherever anyone may (/tmp, /dev/shm, /var/tmp).
- **A filesystem namespace** (`unshare -m`, everything remounted read-only but the folder): needs root or an
  unprivileged user namespace (Docker's default seccomp profile refuses `unshare`; Ubuntu 24.04 restricts user
  namespaces), and code left as root inside the namespace can remount.
- **A private temp tree** (a folder of its own as cwd and TMPDIR): kept, as where the learner's files go, but on its
  own it confines nothing.

As root the child also sheds root before the learner's code runs, since Landlock does not cover changing a file's
mode or times (chmod, utime) and root may signal anything where signals are not scoped: it becomes `nobody`
(uid 65534 where there is no such user), keeping only CAP_DAC_READ_SEARCH (read any file, search any folder: the
interpreter and the package stay readable wherever they are installed; a subprocess keeps it, as an ambient
capability) and dropping every other capability from its bounding set. Where Landlock is missing (an older or
non-Linux kernel, Landlock not enabled at boot, a seccomp filter refusing its calls) nothing keeps a root grader's
solution in its folder, and the grader refuses to run as root (`CannotConfine`, saying what to do); a user who is
not root still grades there, the solution running with that user's own rights (it can write where that user can).

What is not confined here: reading (a solution can read what its user can), the network, memory and the number of
processes. Issue 62's rule on what a solution may import and call belongs beside `confine`, in the child, before
the learner's file is loaded (_child.py).
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
import sys
from dataclasses import dataclass

# include/uapi/asm-generic/unistd.h: the same numbers on every Linux architecture (the calls are new enough)
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1  # landlock_create_ruleset(NULL, 0, this): the ABI version the kernel speaks
_RULE_PATH_BENEATH = 1
# include/uapi/linux/landlock.h, LANDLOCK_ACCESS_FS_*: every write right, by the ABI that brought it
_WRITE_FILE = 1 << 1
_WRITES_BY_ABI = (
    (1, _WRITE_FILE | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 12),  # write,
    # remove dir/file, make char/dir/reg/sock/fifo/block/sym
    (2, 1 << 13),  # REFER: link or rename a file into another folder
    (3, 1 << 14),  # TRUNCATE
)
_TRUNCATE = 1 << 14
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL, _SCOPES_FROM = 1 << 0, 1 << 1, 6  # LANDLOCK_SCOPE_*, ABI 6
_NET_FROM = 4  # ABI 4 added handled_access_net: the ruleset's attribute grew by a field
# include/uapi/linux/prctl.h and capability.h
_PR_SET_KEEPCAPS, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE = 8, 24, 38, 47, 2
_CAP_DAC_READ_SEARCH, _CAPABILITY_VERSION_3 = 2, 0x20080522
_NOBODY = 65534  # the kernel's overflow uid: `nobody` on every Linux distribution that has the user


class CannotConfine(ValueError):
    """Nothing on this machine keeps a solution from writing outside its folder, and the grader runs as root."""


@dataclass(frozen=True)
class Confinement:
    """What confining a child can do here."""

    landlock: int  # Landlock's ABI version (0: none)
    root: bool  # the grader runs as root: the child sheds root too
    why_not: str = ""  # why there is no Landlock, in words ("" when there is)

    @property
    def writes(self) -> bool:
        """Writes outside the case folder are denied."""
        return self.landlock >= 1

    @property
    def signals(self) -> bool:
        """The learner's code cannot signal a process outside its own domain (Landlock's signal scope, ABI 6)."""
        return self.landlock >= _SCOPES_FROM


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


@functools.lru_cache(maxsize=1)
def confinement() -> Confinement:
    """What this machine allows (asked once: one system call, no process)."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    if not sys.platform.startswith("linux"):
        return Confinement(0, root, f"Landlock is Linux's, and this is {sys.platform}")
    libc = _libc()
    abi = libc.syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if abi >= 1:
        return Confinement(abi, root)
    errno = ctypes.get_errno()
    why = {38: "this kernel has no Landlock (Linux 5.13 or later, built with CONFIG_SECURITY_LANDLOCK)",  # ENOSYS
           95: "Landlock is built in but not enabled (add landlock to the kernel's lsm= boot parameter)",  # EOPNOTSUPP
           1: "a seccomp filter (a container's) refuses Landlock's system calls"}  # EPERM
    return Confinement(0, root, why.get(errno, f"Landlock's probe failed: {os.strerror(errno)}"))


def check_confinable() -> Confinement:
    """This machine's confinement; CannotConfine where the grader is root and nothing keeps a solution in its
    folder (module docstring)."""
    c = confinement()
    if c.root and not c.writes:
        raise CannotConfine(f"will not grade as root here: {c.why_not}, so nothing would keep a solution from writing "
                            "anywhere on this machine. Grade as an unprivileged user (one that can read this Python "
                            "and zerosim; e.g. `useradd grader` and `su grader -c '...'` in Gradescope's "
                            "run_autograder), or on a Linux kernel with Landlock")
    return c


def confine(folder: str) -> Confinement:
    """In the child, before any of the learner's code: from here on this process and every one it starts write
    only beneath `folder` (where Landlock is), and, as root, run as `nobody`. Raises CannotConfine (or OSError)
    where that cannot be done: the caller must then not run the learner's code."""
    c = check_confinable()
    if not c.writes:
        return c  # not root, no Landlock: the learner's code runs with the user's own rights (module docstring)
    libc = _libc()
    _call(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")  # Landlock requires it
    if c.root:
        _shed_root(libc, folder)
    _landlock(libc, folder, c.landlock)
    return c


def _shed_root(libc, folder: str) -> None:
    """Become `nobody`, keeping CAP_DAC_READ_SEARCH (effective, and ambient: inherited by a subprocess) and no
    other capability, now or after any exec; `folder` becomes nobody's, so the learner's code can write in it."""
    try:
        import pwd

        user = pwd.getpwnam("nobody")
        uid, gid = user.pw_uid, user.pw_gid
    except (ImportError, KeyError):
        uid, gid = _NOBODY, _NOBODY
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):  # needs CAP_SETPCAP: while still root
        if cap != _CAP_DAC_READ_SEARCH:
            _call(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"prctl(PR_CAPBSET_DROP, {cap})")
    _call(libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(PR_SET_KEEPCAPS)")  # keep the permitted set past setuid
    os.chown(folder, uid, gid)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    keep = 1 << _CAP_DAC_READ_SEARCH
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)(keep, keep, keep, 0, 0, 0)  # effective, permitted, inheritable; the upper 32 caps
    _call(libc.capset(header, data), "capset")
    _call(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0), "prctl(PR_CAP_AMBIENT)")


def _landlock(libc, folder: str, abi: int) -> None:
    """Deny every write this ABI can name except beneath `folder` (and to /dev/null); from ABI 6, scope signals and
    abstract unix sockets to the learner's own processes."""
    writes = 0
    for since, rights in _WRITES_BY_ABI:
        writes |= rights if abi >= since else 0
    fields = [writes] + ([0] if abi >= _NET_FROM else []) + (
        [_SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX_SOCKET] if abi >= _SCOPES_FROM else [])
    attr = ctypes.create_string_buffer(struct.pack(f"{len(fields)}Q", *fields), 8 * len(fields))
    ruleset = _call(libc.syscall(ctypes.c_long(_CREATE_RULESET), attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)),
                    "landlock_create_ruleset")
    try:
        for path, rights in ((folder, writes), (os.devnull, writes & (_WRITE_FILE | _TRUNCATE))):
            where = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:  # struct landlock_path_beneath_attr: u64 allowed_access, s32 parent_fd, packed
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, where), 12)
                _call(libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                   rule, ctypes.c_uint32(0)), f"landlock_add_rule({path})")
            finally:
                os.close(where)
        _call(libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
              "landlock_restrict_self")
    finally:
        os.close(ruleset)
