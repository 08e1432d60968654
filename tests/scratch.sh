# shellcheck shell=bash
# tests/scratch.sh — a shell test's scratch directory, kept only when the test
# fails (sourced, not run).
#
# Sourced near the top of a shell test
# (`. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh"`), this makes $tmp, a fresh directory dcps-test-XXXXXX under TMPDIR (/tmp when
# unset or empty), and sets the EXIT trap. At exit the trap first calls the
# test's function `cleanup` if it has one (to stop what it started; $tmp is not
# its business), then removes $tmp when the test exits 0 (pass) or 77 (skip),
# and otherwise keeps it and prints its path once; the test's exit status stays
# what it was. A test sets no EXIT trap of its own: stopping what it started is
# its `cleanup`'s job. The C suites do the same through
# tests/scratch.h, the Python suites through python/tests/harness.py.

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dcps-test-XXXXXX") ||
    { echo "ERROR: cannot make a directory under ${TMPDIR:-/tmp}"; exit 99; }

scratch_exit() {
    local rc=$?
    if declare -F cleanup >/dev/null; then
        cleanup
    fi
    if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then
        rm -rf "$tmp"
    else
        echo "kept: $tmp"
    fi
    exit "$rc"
}
trap scratch_exit EXIT
