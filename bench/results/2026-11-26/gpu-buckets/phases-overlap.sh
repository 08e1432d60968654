# The phases of the overlap runs (README.md beside this file), sourced by
# ../gpu-torch/run.sh in place of its own (make_bundle.sh PHASES=this file).
# Runs 2 and 3 (the defaults): whether bench/netem.sh's tools work there (a
# namespace, a tbf qdisc). Run 4 (TESTS=1 PROBE=0): the CUDA cases (buckets on
# a CUDA model, whole and ordered pulls) and the bucket suite first. Then
# bench/overlap.py --device cuda at four batch sizes, a CSV each.
R=$(cd "$H/.." && pwd)
if [ "${PROBE:-1}" = 1 ]; then
    phase netem-probe 15 bash -c 'ip netns add dcpsprobe && ip netns del dcpsprobe &&
        tc qdisc add dev lo root tbf rate 1gbit burst 1mb latency 50ms &&
        tc qdisc del dev lo root && echo "namespaces and tbf work"'
fi
if [ "${TESTS:-0}" = 1 ]; then
    phase gpu-tests 90 "$PY" "$H/run_tests.py" test_torch.CudaModel
    phase test_torch_buckets.py 60 "$PY" "$TD/test_torch_buckets.py"
fi
for b in 4096 16384 32768 65536; do
    [ "$(left)" -gt 40 ] || break
    phase "overlap-b$b" 120 bash -c '"$0" "$1/bench/overlap.py" --device cuda --width 2048 \
        --layers 8 --steps 5 --reps 2 --bucket-mb 25 --batch "$2" >"$3"' \
        "$PY" "$R" "$b" "$OUT/overlap-b$b.csv"
    cat "$OUT/overlap-b$b.csv"
done
