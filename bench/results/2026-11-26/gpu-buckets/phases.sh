# The phases of the bucket run (README.md beside this file), sourced by
# ../gpu-torch/run.sh in place of its own (make_bundle.sh PHASES=this file):
# the CUDA cases, buckets on a CUDA model among them; the bucket suite on the
# device's torch 2.x (register_post_accumulate_grad_hook, never run before);
# then the other torch suites whole, as make check runs them.
phase gpu-tests 150 "$PY" "$H/run_tests.py" test_torch.CudaModel test_extension.DeviceArrays
phase test_torch_buckets.py 90 "$PY" "$TD/test_torch_buckets.py"
[ "$(left)" -gt 40 ] && phase test_torch_behaviours.py 60 "$PY" "$TD/test_torch_behaviours.py"
[ "$(left)" -gt 60 ] && phase test_torch.py 120 "$PY" "$TD/test_torch.py"
[ "$(left)" -gt 30 ] && phase test_extension.py 30 "$PY" "$TD/test_extension.py"
