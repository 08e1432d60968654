#!/usr/bin/env bash
# Tests clean up after themselves: a passing test leaves nothing in TMPDIR, a
# failing one keeps its directory and prints its path once ("kept: PATH").
# - Leaves nothing: unit suites (tests/test_config, a directory per test;
#   tests/test_security, key files and --keygen), a daemon suite
#   (tests/daemon/test_security: shards, key directories, job files), a shell
#   test that starts a shard (tests/test_dashboard.sh) and a Python suite with
#   real shards (python/tests/test_extension.py), each run with TMPDIR set to an
#   empty directory that must be empty afterwards; what is left is named.
# - Keeps what failed: a Check suite built here from tests/harness.c with one
#   passing and one failing test, a shell script on tests/scratch.sh that exits
#   1, and a Python suite on python/tests/harness.py with one passing and one
#   failing test each print one "kept:" line, for the failing test's directory,
#   which is there and holds what that test wrote; the passing tests' are gone.
# The suites say how they do it: tests/scratch.h, tests/scratch.sh, harness.py.
set -uo pipefail

: "${DCPS_BUILDDIR:?run through make check}" "${DCPS_SRCDIR:?run through make check}"
: "${CC:=cc}" "${PKG_CONFIG:=pkg-config}" "${PYTHON:=}"
# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
status=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; status=1; }

# What is in directory $1, two levels deep, on one line ("" when empty).
contents() { find "$1" -mindepth 1 -maxdepth 2 | sed "s|^$1/||" | sort | tr '\n' ' '; }

# Runs the test program "$@" with TMPDIR an empty directory; it must pass (or
# skip) and leave that directory empty. $1 names it in the messages.
leaves_nothing() {
    local name=$1 t rc left
    shift
    t=$(mktemp -d "$tmp/run.XXXXXX")
    TMPDIR=$t "$@" >"$t.log" 2>&1
    rc=$?
    if [ $rc != 0 ] && [ $rc != 77 ]; then
        fail "$name exited with $rc; its output ends:"
        tail -n 20 "$t.log"
        return
    fi
    left=$(contents "$t")
    if [ -z "$left" ]; then
        pass "$name ($([ $rc = 0 ] && echo passed || echo skipped)) leaves nothing in TMPDIR"
    else
        fail "$name left in TMPDIR: $left"
    fi
}

leaves_nothing "tests/test_config" "$DCPS_BUILDDIR/tests/test_config"
leaves_nothing "tests/test_security" "$DCPS_BUILDDIR/tests/test_security"
leaves_nothing "tests/daemon/test_security" "$DCPS_BUILDDIR/tests/daemon/test_security"
leaves_nothing "tests/test_dashboard.sh" bash "$DCPS_SRCDIR/tests/test_dashboard.sh"
if [ -n "$PYTHON" ] && "$PYTHON" -c 'import dcps' 2>/dev/null; then
    leaves_nothing "python/tests/test_extension.py" "$PYTHON" \
        "$DCPS_SRCDIR/python/tests/test_extension.py"
else
    echo "not run: python/tests/test_extension.py (no PYTHON that imports dcps)"
fi

# What is in directory $1 besides $2 (a path relative to $1), what $2 holds and
# the directories on the way to it, on one line.
others() {
    local p
    (cd "$1" && find . -mindepth 1 | sed 's|^\./||') | while read -r p; do
        case "$2" in "$p" | "$p"/*) continue ;; esac
        case "$p" in "$2"/*) continue ;; esac
        printf '%s ' "$p"
    done
}

# Runs "$@" (a suite with one failing test that wrote the file `mark` in its
# directory) with TMPDIR an empty directory: it must fail and print exactly one
# "kept:" line, naming a directory under TMPDIR that holds `mark`, and nothing
# else may be left. $1 names it in the messages.
keeps_the_failed() {
    local name=$1 t rc kept n left
    shift
    t=$(mktemp -d "$tmp/run.XXXXXX")
    TMPDIR=$t "$@" >"$t.log" 2>&1
    rc=$?
    n=$(grep -c '^kept: ' "$t.log")
    kept=$(sed -n 's/^kept: //p' "$t.log")
    if [ $rc = 0 ] || [ $rc = 77 ]; then
        fail "$name exited with $rc, not as a failure"
    elif [ "$n" != 1 ]; then
        fail "$name printed $n \"kept:\" lines, not 1"
        cat "$t.log"
    elif [ "${kept#"$t"/}" = "$kept" ] || [ ! -f "$kept/mark" ]; then
        fail "$name kept \"$kept\", which is not the failed test's directory under $t"
    else
        left=$(others "$t" "${kept#"$t"/}")
        if [ -n "$left" ]; then
            fail "$name left more than the failed test's directory: $left"
        else
            pass "$name keeps the failed test's directory, prints it once, removes the rest"
        fi
    fi
}

# A Check suite on the harness: a test that passes, one that fails, each with
# its h_dir().
cat >"$tmp/suite.c" <<'EOF'
#include "tests/check_run.h"
#include "tests/harness.h"
START_TEST(passes)
{
    h_write("ok", "");
}
END_TEST
START_TEST(fails)
{
    h_write("mark", "");
    ck_assert_msg(0, "fails on purpose");
}
END_TEST
int main(void)
{
    Suite *s = suite_create("leftovers");
    TCase *tc = tcase_create("leftovers");
    tcase_add_test(tc, passes);
    tcase_add_test(tc, fails);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
EOF
# shellcheck disable=SC2046 # the flags are words
if $CC -std=c11 -D_GNU_SOURCE -I"$DCPS_SRCDIR" -o "$tmp/suite" "$tmp/suite.c" \
    "$DCPS_SRCDIR/tests/harness.c" $($PKG_CONFIG --cflags --libs check) -lm >"$tmp/cc.log" 2>&1; then
    keeps_the_failed "a Check suite" "$tmp/suite"
else
    fail "cannot build a Check suite on tests/harness.c:"
    cat "$tmp/cc.log"
fi

# A shell test on tests/scratch.sh that fails, and one that passes; each runs
# its cleanup function first.
for rc in 1 0; do
    cat >"$tmp/script$rc.sh" <<EOF
. "$DCPS_SRCDIR/tests/scratch.sh"
cleanup() { echo "cleanup ran"; }
: >"\$tmp/mark"
exit $rc
EOF
done
keeps_the_failed "a shell test" bash "$tmp/script1.sh"
grep -q '^cleanup ran$' "$tmp"/run.*.log || fail "scratch.sh did not run the test's cleanup"
leaves_nothing "a passing shell test" bash "$tmp/script0.sh"

# A Python suite on the harness: a test that passes, one that fails, each with
# a Job (no shard: just its directory).
if [ -n "$PYTHON" ]; then
    cat >"$tmp/suite.py" <<EOF
import os, sys, unittest
sys.path.insert(0, os.path.join("$DCPS_SRCDIR", "python", "tests"))
import harness


class Leftovers(unittest.TestCase):
    def test_passes(self):
        harness.Job(harness.job_text(), shards=0).close()

    def test_fails(self):
        job = harness.Job(harness.job_text(), shards=0)
        open(os.path.join(job.dir, "mark"), "w").close()
        job.close()
        self.fail("on purpose")


harness.main(need_torch=False, need_data=False)
EOF
    keeps_the_failed "a Python suite" "$PYTHON" "$tmp/suite.py"
else
    echo "not run: the Python harness (no PYTHON)"
fi
exit $status
