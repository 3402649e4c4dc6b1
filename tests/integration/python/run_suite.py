#!/usr/bin/env python3
"""Runs performer-serve integration test modules (stdlib unittest).

Usage: run_suite.py MODULE [MODULE...]      e.g. run_suite.py test_greedy
       run_suite.py MODULE.Class.test_name

The fixtures are the repository's own (<repo>/tests/fixtures/performer) and
the default model is <repo>/models: nothing outside the checkout is read.

Environment:
  PERFORMER_SERVE             the server binary (default <repo>/build/server/performer-serve)
  PYTHONPATH                  must hold the generated stubs (<build>/python)
  PERFORMER_KEEP_TEMP=1       keep the temporary repositories and server logs

Exit status: 0 all passed; 1 a failure, an error, a skipped test (everything
the tests need is in the repository, so a skip means something is broken) or
no test run; 2 usage or setup error (stubs, binary or fixtures missing).
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    try:
        import harness  # noqa: F401 - needs the generated stubs
    except ImportError as e:
        sys.stderr.write("error: cannot import the generated gRPC stubs (%s); PYTHONPATH=%s\n"
                         % (e, os.environ.get("PYTHONPATH", "")))
        return 2
    if not harness.fixtures_present():
        sys.stderr.write("error: fixture folder %s is missing from the checkout\n"
                         % harness.performer_fixtures())
        return 2
    binary = harness.server_binary()
    if not os.access(binary, os.X_OK):
        sys.stderr.write("error: performer-serve binary %s is missing (set PERFORMER_SERVE)\n"
                         % binary)
        return 2
    print("performer-serve: %s\nfixtures: %s" % (binary, harness.performer_fixtures()))
    sys.stdout.flush()

    suite = unittest.defaultTestLoader.loadTestsFromNames(argv[1:])
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    if not result.wasSuccessful():
        harness.dump_server_logs(sys.stdout)
    harness.cleanup()
    if result.testsRun == 0:
        return 1
    if result.skipped:
        print("\nFAILED: %d test(s) skipped; no integration test may skip:" % len(result.skipped))
        for test, reason in result.skipped:
            print("  %s: %s" % (test.id(), reason))
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
