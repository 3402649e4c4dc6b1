#!/usr/bin/python3
"""docs/serving.md's flag table says what performer-serve --helpfull says.

The program's flags are defined in one place, server/server_config.cc; its --helpfull lists them
with their defaults. The table under "## Flags" in docs/serving.md must name exactly those flags,
once each, with the same defaults (written for people: `empty`, `off`, `1 GiB`, ...). A flag added
without a row, a row for a flag that is gone, or a default changed on one side only fails.

Run: python3 tests/server/server_flags_doc_test.py PERFORMER_SERVE [SERVING_MD]
(ctest integration.server_flags_doc).
"""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFINED_IN = "server/server_config.cc"
UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def program_flags(binary):
    """Flag name -> default as --helpfull prints it, for the flags of DEFINED_IN."""
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    sections = re.split(r"\n\s*Flags from ", text)
    # The section names the source as the compiler saw it (relative to the build folder, or
    # absolute).
    ours = [s for s in sections if s.split(":", 1)[0].endswith(DEFINED_IN)]
    if len(ours) != 1:
        raise SystemExit("%s --helpfull has no section for %s" % (binary, DEFINED_IN))
    flags = {}
    for match in re.finditer(r"^\s+--(\w+) \(.*?\);\s+default: (.*?);$", ours[0], re.S | re.M):
        flags[match.group(1)] = match.group(2).strip()
    if len(flags) < 10:
        raise SystemExit("could not read the flags of %s from --helpfull" % DEFINED_IN)
    return flags


def table_rows(serving_md):
    """Flag name -> [default cells] of the table under '## Flags'."""
    with open(serving_md, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Flags\n", 1)
    if len(section) != 2:
        raise SystemExit("%s has no '## Flags' section" % serving_md)
    body = section[1].split("\n## ", 1)[0]
    rows = {}
    for line in body.splitlines():
        match = re.match(r"\|\s*`--(\w+)`\s*\|\s*(.*?)\s*\|", line)
        if match:
            rows.setdefault(match.group(1), []).append(match.group(2))
    return rows


def normalize_doc(cell):
    """A documented default as --helpfull would print it."""
    cell = cell.replace("`", "").strip()
    if cell == "empty":
        return '""'
    if cell == "off":
        return "false"
    match = re.fullmatch(r"(\d+) (KiB|MiB|GiB)", cell)
    if match:
        return str(int(match.group(1)) * UNITS[match.group(2)])
    return cell


def normalize_program(name, value):
    if name == "model_repository" and value.strip('"').endswith("/models"):
        # The build's absolute path to the repository's models/.
        return "the repository's models/"
    return value


def problems(flags, rows):
    found = []
    for name in sorted(set(flags) - set(rows)):
        found.append("--%s (default %s) has no row in the flag table" % (name, flags[name]))
    for name in sorted(set(rows) - set(flags)):
        found.append("the flag table has a row for --%s, which the program does not define" % name)
    for name in sorted(set(rows) & set(flags)):
        if len(rows[name]) != 1:
            found.append("--%s has %d rows in the flag table" % (name, len(rows[name])))
            continue
        documented = normalize_doc(rows[name][0])
        actual = normalize_program(name, flags[name])
        if documented.strip('"') != actual.strip('"'):
            found.append("--%s: the table says default %r, the program %s" %
                         (name, rows[name][0], flags[name]))
    return found


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    serving_md = sys.argv[2] if len(sys.argv) > 2 else os.path.join(REPO, "docs", "serving.md")
    flags = program_flags(sys.argv[1])
    found = problems(flags, table_rows(serving_md))
    for line in found:
        print(line)
    if found:
        print("%d difference(s) between docs/serving.md and --helpfull" % len(found),
              file=sys.stderr)
        return 1
    print("flag table: %d flags, each documented with its default" % len(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
