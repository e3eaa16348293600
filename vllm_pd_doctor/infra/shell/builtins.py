"""What the symbolic shell run evaluates itself: `echo`/`printf`/`seq` output for command
substitution, `[ ]` / `[[ ]]` / `test` conditions (None when they cannot be known) and the commands
that start nothing (QUIET)."""

from __future__ import annotations

import fnmatch
import re

QUIET = {
    "cd",
    "pushd",
    "popd",
    "true",
    ":",
    "sleep",
    "wait",
    "trap",
    "shopt",
    "source",
    ".",
    "read",
    "exit",
    "return",
    "kill",
    "pkill",
    "ulimit",
    "umask",
    "mkdir",
    "rm",
    "cp",
    "mv",
    "touch",
    "chmod",
    "ln",
    "mapfile",
    "readarray",
    "break",
    "continue",
    "alias",
    "ray",
    "__pdd_role",
    "__pdd_comment",
    "unset",
    "shift",
    "set",
    "eval",
    "wait_for_server",
    "curl",
    "tail",
}


def output(argv: list[str]) -> str:
    cmd, args = argv[0], argv[1:]
    if cmd == "echo":
        nl = "\n"
        while args and args[0] in ("-n", "-e", "-E", "-ne", "-en"):
            if "n" in args[0]:
                nl = ""
            args = args[1:]
        return " ".join(args) + nl
    if cmd == "printf":
        if not args:
            return ""
        fmt = args[0].replace("\\n", "\n").replace("\\t", "\t")
        vals = args[1:]
        k = 0

        def sub(m: re.Match[str]) -> str:
            nonlocal k
            if m.group(0) == "%%":
                return "%"
            v = vals[k] if k < len(vals) else ""
            k += 1
            return v

        return re.sub(r"%%|%[-0-9.]*[sdqif]", sub, fmt)
    if cmd == "seq":
        nums = [int(a) for a in args if re.fullmatch(r"-?\d+", a)]
        if len(nums) == 1:
            lo, step, hi = 1, 1, nums[0]
        elif len(nums) == 2:
            lo, step, hi = nums[0], 1, nums[1]
        elif len(nums) == 3:
            lo, step, hi = nums
        else:
            return ""
        if step == 0:
            return ""
        return "".join(f"{x}\n" for x in list(range(lo, hi + (1 if step > 0 else -1), step))[:64])
    if cmd == "basename":
        return (args[0].rstrip("/").rsplit("/", 1)[-1] if args else "") + "\n"
    if cmd == "dirname":
        return (args[0].rstrip("/").rsplit("/", 1)[0] if args and "/" in args[0] else ".") + "\n"
    return ""


def test(argv: list[str]) -> bool | None:
    args = argv[1:]
    if args and args[-1] in ("]", "]]"):
        args = args[:-1]
    if any("${" in a or "$(" in a for a in args):
        return None
    for op in ("||", "&&"):
        if op in args:
            k = args.index(op)
            a, b = test(["[", *args[:k]]), test(["[", *args[k + 1 :]])
            if op == "&&":
                return False if a is False or b is False else (None if None in (a, b) else True)
            return True if a is True or b is True else (None if None in (a, b) else False)
    neg = False
    while args and args[0] == "!":
        neg, args = not neg, args[1:]
    r = test1(args)
    return (not r) if (neg and r is not None) else r


def test1(a: list[str]) -> bool | None:
    if len(a) == 1:
        return a[0] != ""
    if len(a) == 2:
        if a[0] == "-n":
            return a[1] != ""
        if a[0] == "-z":
            return a[1] == ""
        return None
    if len(a) == 3:
        x, op, y = a
        if op in ("==", "="):
            return fnmatch.fnmatchcase(x, y)
        if op == "!=":
            return not fnmatch.fnmatchcase(x, y)
        if op == "=~":
            try:
                return re.search(y, x) is not None
            except re.error:
                return None
        if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
            try:
                i, j = int(x), int(y)
            except ValueError:
                return None
            return {"-eq": i == j, "-ne": i != j, "-lt": i < j, "-le": i <= j, "-gt": i > j, "-ge": i >= j}[
                op
            ]
    return None
