#!/usr/bin/python3
"""Runs a command under a systemd unit's system-call deny list, as systemd would apply it.

Usage: unit-seccomp.py UNIT_FILE COMMAND [ARGS...]

Reads `SystemCallFilter=~...` and `SystemCallErrorNumber=` from the unit, expands each @group with
`systemd-analyze syscall-filter` (the same tables systemd uses), loads a seccomp filter that fails
those calls with that errno (python3-seccomp, libseccomp's own bindings), then execs COMMAND. No
systemd as PID 1 is needed, so a test can run the service under the unit's filter.
"""
import errno
import os
import re
import subprocess
import sys

import seccomp


def expand(name, seen):
    if not name.startswith("@"):
        return {name}
    if name in seen:
        return set()
    seen.add(name)
    out = subprocess.run(
        ["systemd-analyze", "syscall-filter", "--no-pager", name], capture_output=True, text=True, check=True
    ).stdout
    calls = set()
    for line in out.splitlines()[1:]:
        w = line.strip()
        if w and not w.startswith("#"):
            calls |= expand(w, seen)
    return calls


def main():
    unit, argv = sys.argv[1], sys.argv[2:]
    text = open(unit, encoding="utf-8").read()
    deny = re.search(r"^SystemCallFilter=~(.+)$", text, re.M)
    if not deny:
        sys.exit("unit-seccomp: no SystemCallFilter=~ deny list in " + unit)
    err = re.search(r"^SystemCallErrorNumber=(\w+)$", text, re.M)
    code = getattr(errno, err.group(1)) if err else None
    calls = set()
    for n in deny.group(1).split():
        calls |= expand(n, set())
    # A later allow entry (`SystemCallFilter=name`, no ~) deletes its calls from the deny list, as systemd does.
    for allow in re.findall(r"^SystemCallFilter=([^~\n].*)$", text, re.M):
        for n in allow.split():
            calls -= expand(n, set())
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    action = seccomp.ERRNO(code) if code is not None else seccomp.KILL_PROCESS
    added = 0
    for c in sorted(calls):
        try:
            f.add_rule(action, c)
            added += 1
        except (ValueError, RuntimeError, OSError):
            pass  # not a system call of this architecture (systemd skips those too)
    if added == 0:
        sys.exit("unit-seccomp: no system call of the deny list is known here")
    f.load()
    os.execvp(argv[0], argv)


main()
