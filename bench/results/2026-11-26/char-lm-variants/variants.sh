#!/bin/bash
# Where the gap of examples/torch/char_lm.ini (AdamW, async, Top-k 1%) comes from: the same
# job with other settings, run one after another from the repository root with a built
# tree in build/ (2026-11-26, the 2-vCPU VM). Each run appends its held-out lines and rank
# 0's final line to heldout.txt and finals.txt, tagged.
out=bench/results/2026-11-26/char-lm-variants
export PYTHONPATH=build/python
run() {
    local tag=$1; shift
    rm -rf "/tmp/v-$tag"
    bash deploy/launch-local.sh examples/torch/char_lm.ini -b build -d "/tmp/v-$tag" -e -q "$@" -- \
        /usr/bin/python3 examples/torch/char_lm.py >"/tmp/v-$tag.launch" 2>&1
    echo "$tag rc=$?" >>$out/runs.txt
    grep -h "^heldout:" "/tmp/v-$tag/worker0.out" | sed "s/^/$tag /" >>$out/heldout.txt
    grep -h "^final:" "/tmp/v-$tag/worker0.out" | sed "s/^/$tag /" >>$out/finals.txt
}
run dense -s compression.push=dense -s compression.pull=dense
run topk_warm -s compression.density_warmup_epochs=2 -s compression.warmup_steps=100
run dense_sync_1w -w 1 -s job.mode=sync -s data.epochs=1 -s compression.push=dense -s compression.pull=dense
run dense_dc -s compression.push=dense -s compression.pull=dense -s optimizer.delay_compensation=adaptive -s optimizer.dc_lambda=2
run topk_sync -s job.mode=sync -s optimizer.total_steps=1195 -s optimizer.warmup_steps=50
