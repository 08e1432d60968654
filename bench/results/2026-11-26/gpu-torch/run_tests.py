#!/usr/bin/env python3
"""Runs chosen cases of dcps's Python suites the way harness.main() runs a
whole module (a scratch TMPDIR for the run, a Job's directory removed when its
test passed, one 'python: N passed, N failed' line), so that a GPU run can take
the CUDA cases first and a few CPU ones after.

    run_tests.py test_torch.CudaModel test_extension.DeviceArrays ...

Names are unittest's (module[.Class[.method]]), the modules those of
$DCPS_SRCDIR/python/tests. Exit 0 when all passed (skips count as passed)."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.environ["DCPS_SRCDIR"], "python", "tests"))
import harness  # noqa: E402


class _Result(harness._Result):
    """harness._Result, safe where unittest calls stopTest without startTest
    (Python 3.12.1 does for a skipped test: gh-106584, reverted in 3.12.2)."""

    def stopTest(self, test):
        if harness._made is None:
            unittest.TextTestResult.stopTest(self, test)
        else:
            super().stopTest(test)


def main(names):
    if not os.path.exists(harness.TRAIN[0]):
        print(f"SKIP: {harness.TRAIN[0]} is missing")
        return 77
    harness._run = tempfile.mkdtemp(prefix="dcps-test-")
    os.environ["TMPDIR"] = tempfile.tempdir = harness._run
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2,
                                     resultclass=_Result).run(suite)
    failed = len(result.failures) + len(result.errors)
    print(f"python: {result.testsRun - failed} passed, {failed} failed, "
          f"{len(result.skipped)} skipped")
    for t, why in result.skipped:
        print(f"skipped: {t.id()}: {why}")
    if result.wasSuccessful():
        shutil.rmtree(harness._run, ignore_errors=True)
    else:
        for name in sorted(os.listdir(harness._run)):
            print(f"kept: {os.path.join(harness._run, name)}")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
