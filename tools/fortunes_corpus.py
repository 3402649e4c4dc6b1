#!/usr/bin/env python3
"""Builds the training corpus of the default model from Debian's `fortunes`.

Reads every fortune file of /usr/share/games/fortunes (packages `fortunes` and
`fortunes-min`, BSD licence, see models/README.md) except the ASCII-art and
untranslated ones, removes the typewriter overstrike (`_\\bX`, `X\\bX`) some
files use for underline and bold, shuffles the fortunes with a fixed seed so
that the held-out tail of the corpus (the trainer's validation split) is drawn
from every file rather than being the last file, and writes them separated by
"%" lines, as fortune(6) stores them.

Usage: fortunes_corpus.py OUT.txt [--dir=/usr/share/games/fortunes] [--seed=0]
"""
import argparse
import os
import random
import re
import sys

# Files that are not prose: pictures drawn in characters, and a file of
# sentences in other languages to translate.
EXCLUDED = {"art", "ascii-art", "translate-me"}


def read_fortunes(directory):
    names = sorted(
        n for n in os.listdir(directory)
        if not n.endswith((".dat", ".u8")) and n not in EXCLUDED
        and os.path.isfile(os.path.join(directory, n)))
    if not names:
        sys.exit(f"fortunes_corpus: no fortune files in {directory} (apt-get install fortunes)")
    fortunes = []
    for name in names:
        with open(os.path.join(directory, name), encoding="latin-1") as f:
            text = f.read()
        # Overstrike: "c\bc" (bold) and "_\bc" (underline) print as "c".
        text = re.sub(r".\x08", "", text)
        # Bells and stray backspaces are terminal effects, not text.
        text = re.sub(r"[\x07\x08]", "", text)
        for fortune in re.split(r"^%\n", text, flags=re.M):
            fortune = fortune.strip("\n")
            if fortune.strip():
                fortunes.append(fortune)
    return names, fortunes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--dir", default="/usr/share/games/fortunes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    names, fortunes = read_fortunes(args.dir)
    random.Random(args.seed).shuffle(fortunes)
    with open(args.out, "w", encoding="latin-1", newline="\n") as f:
        f.write("\n%\n".join(fortunes))
        f.write("\n%\n")
    size = os.path.getsize(args.out)
    print(f"fortunes_corpus: {len(fortunes)} fortunes from {len(names)} files, {size} bytes -> {args.out}")


if __name__ == "__main__":
    main()
