"""Text as people paste it into issues and chats, made shell text again: CR-only and CRLF line
ends, typographic quotes and dashes (word processors, issue renderers), non-breaking spaces,
spaces after a continuation backslash, line numbers copied along with a code view
(`12 | vllm serve ...`, `12: ...`, `12  ...`), and sentences among the commands."""

from __future__ import annotations

import itertools
import re

from vllm_pd_doctor.infra.shell.words import ShellSyntaxError, tokenize

_QUOTES = str.maketrans(
    {
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2033": '"',
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u2032": "'",
        "\u00a0": " ",
        "\u202f": " ",
        "\u2009": " ",
    }
)
_DASH_FLAG = re.compile(r"(?<![\w-])[\u2012\u2013\u2014\u2015\u2212]{1,2}(?=[A-Za-z])")
_BACKSLASH_SPACE = re.compile(r"(?<!\\)\\[ \t]+\n")
"""A continuation backslash followed by spaces (pasted from a rendered page): the line goes on."""
_NUMBERED = re.compile(r"^[ \t]*(\d{1,5})(?:[ \t]*[|:│][ \t]?|[ \t]+|$)")


def line_ends(text: str) -> str:
    """CRLF and lone CR (old Mac, some web forms) -> LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def normalise(text: str) -> str:
    """Pasted text -> shell text (see the module doc); text without these is returned unchanged."""
    text = line_ends(text)
    if any(c in text for c in "\u201c\u201d\u201e\u2033\u2018\u2019\u201a\u2032\u00a0\u202f\u2009"):
        text = text.translate(_QUOTES)
    text = _DASH_FLAG.sub("--", text)
    text = _BACKSLASH_SPACE.sub("\\\\\n", text)
    return strip_line_numbers(text)


def strip_line_numbers(text: str) -> str:
    """Remove a column of consecutive line numbers when (nearly) every line carries one."""
    lines = text.split("\n")
    body = [ln for ln in lines if ln.strip()]
    if len(body) < 3:
        return text
    nums: list[int] = []
    for ln in body:
        m = _NUMBERED.match(ln)
        if m is None:
            return text
        nums.append(int(m.group(1)))
    steps = sum(1 for a, b in itertools.pairwise(nums) if b > a)
    if steps < len(nums) - 1 or nums[-1] - nums[0] < len(nums) - 1:
        return text
    return "\n".join(_NUMBERED.sub("", ln, count=1) if ln.strip() else ln for ln in lines)


_PROSE = re.compile(r"^[ \t]*[A-Z][a-z]*(?:[ \t]+[^\s]+){2,}[ \t]*$")
_SHELLISH = re.compile(r"(--|=|\$|\\$|\||&&|;|^\s*(?:export|cd|if|for|while|fi|done)\b)")
MAX_PROSE_LINES = 20


def without_prose(text: str) -> str:
    """Sentences pasted among commands (`I have four V100s ... it's normal.`) turned into comments
    when the text cannot be split otherwise: only lines reading as prose, at most MAX_PROSE_LINES;
    a quote left open in a command line is still reported."""
    lines = text.split("\n")
    for _ in range(MAX_PROSE_LINES):
        try:
            tokenize("\n".join(lines))
            return "\n".join(lines)
        except ShellSyntaxError as exc:
            m = re.search(r"line (\d+),", str(exc))
            k = int(m.group(1)) - 1 if m else -1
            if not (0 <= k < len(lines)) or not _is_prose(lines[k]):
                return "\n".join(lines)  # the caller reports the position
            lines[k] = "# " + lines[k]
    return "\n".join(lines)


def _is_prose(line: str) -> bool:
    return bool(_PROSE.match(line)) and not _SHELLISH.search(line)
