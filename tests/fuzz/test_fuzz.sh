#!/usr/bin/env bash
# make check's fuzz run: each libFuzzer harness (tests/fuzz/fuzz_codec and
# fuzz_router, built by `make fuzz`) for FUZZ_SECONDS (25) from its seed corpus
# and the inputs of tests/fuzz/regress/ (which it runs first), with
# AddressSanitizer, UndefinedBehaviorSanitizer and the harness's invariants.
# Skipped (77) where configure found no clang that links libFuzzer; the corpora
# are replayed anyway by tests/fuzz/replay_*. New inputs and any crash go to the
# build tree's tests/fuzz/runs/NAME/; a crash fails the test, and its input
# belongs in tests/fuzz/regress/NAME/ once the bug is fixed.
set -u
build=${DCPS_BUILDDIR:?run from make check}
src=${DCPS_SRCDIR:?run from make check}
secs=${FUZZ_SECONDS:-25}

for h in codec router; do
    if [ ! -x "$build/tests/fuzz/fuzz_$h" ]; then
        echo "SKIP: tests/fuzz/fuzz_$h is not built (configure found no clang with libFuzzer)"
        exit 77
    fi
done

status=0
for h in codec router; do
    work=$build/tests/fuzz/runs/$h
    rm -rf "$work"
    mkdir -p "$work/corpus"
    dirs=("$work/corpus" "$src/tests/fuzz/corpus/$h")
    [ -d "$src/tests/fuzz/regress/$h" ] && dirs+=("$src/tests/fuzz/regress/$h")
    # libFuzzer's own exit code for a crash is 77, which make check reads as a skip.
    "$build/tests/fuzz/fuzz_$h" -max_total_time="$secs" -max_len=4096 -timeout=10 \
        -rss_limit_mb=2048 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
        -dict="$src/tests/fuzz/dcps.dict" -artifact_prefix="$work/" "${dirs[@]}" \
        >"$work/log" 2>&1
    rc=$?
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' "$work/log" |
        sed "s/^/fuzz_$h: /"
    if [ $rc -ne 0 ]; then
        echo "FAIL: fuzz_$h exited with $rc; its log ($work/log) ends:"
        tail -n 60 "$work/log"
        ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null |
            sed 's/^/input: /'
        status=1
    fi
done
exit $status
