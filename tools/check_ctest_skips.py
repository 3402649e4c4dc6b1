#!/usr/bin/env python3
"""Fails when ctest skipped a test that may not skip.

    check_ctest_skips.py JUNIT_XML TESTS_JSON

JUNIT_XML is ctest's --output-junit report of a run, TESTS_JSON the
`ctest --show-only=json-v1` listing of the same tests (their labels). Only
tests labelled `cuda` (no GPU here) or `deploy` (no Docker daemon or npm
here) may skip. GoogleTest's skips cannot be turned into failures by test
properties: gtest_discover_tests gives every test a skip regex, and ctest
keeps it whatever is added. So a skipped unit, integration or parity test,
for example every test of a suite whose set-up failed, is caught here.
"""
import json
import sys
import xml.etree.ElementTree as ET

MAY_SKIP = {"cuda", "deploy"}


def labels_by_test(listing):
    labels = {}
    for test in listing.get("tests", []):
        names = []
        for prop in test.get("properties", []):
            if prop.get("name") == "LABELS":
                names = prop.get("value", [])
        labels[test["name"]] = set(names)
    return labels


def skipped_tests(junit_root):
    return [case.get("name") for case in junit_root.iter("testcase")
            if case.find("skipped") is not None]


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    skipped = skipped_tests(ET.parse(argv[1]).getroot())
    with open(argv[2]) as f:
        labels = labels_by_test(json.load(f))
    refused = [name for name in skipped if not labels.get(name, set()) & MAY_SKIP]
    allowed = len(skipped) - len(refused)
    if refused:
        print(f"check_ctest_skips: {len(refused)} test(s) skipped outside the "
              f"{'/'.join(sorted(MAY_SKIP))} labels (a skip there is a failure):")
        for name in refused:
            print(f"  {name} (labels: {', '.join(sorted(labels.get(name, set()))) or 'none'})")
        return 1
    print(f"check_ctest_skips: {allowed} skipped, all under "
          f"{'/'.join(sorted(MAY_SKIP))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
