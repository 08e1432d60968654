#!/bin/bash
# The char-lm job in sync mode (2 shards, 2 workers: batches of 2 x 32 = 64 per round, 1,195
# rounds), Top-k 1% + delta pulls after 150 dense rounds, AdamW with the lr scaled by
# sqrt(2) for the doubled batch (4.2e-3, warm-up 50, cosine to 4.2e-4 at round 1195): the
# dcps counterpart of DDP with 2 workers, whose numbers are those of one process at batch 64
# (reference_b64.txt). Run from the repository root with a built tree in build/.
out=bench/results/2026-11-26/char-lm-staleness
export PYTHONPATH=build/python
rm -rf /tmp/v-sync-topk
bash deploy/launch-local.sh examples/torch/char_lm.ini -b build -d /tmp/v-sync-topk -e -q \
    -s job.mode=sync -s optimizer.lr=0.0042 -s optimizer.min_lr=0.00042 \
    -s optimizer.warmup_steps=50 -s optimizer.total_steps=1195 \
    -s compression.warmup_steps=150 -- \
    /usr/bin/python3 examples/torch/char_lm.py >/tmp/v-sync-topk.launch 2>&1
echo "rc=$?" >$out/sync_topk.txt
grep -h "^heldout:\|^final:" /tmp/v-sync-topk/worker0.out >>$out/sync_topk.txt
