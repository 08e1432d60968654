#!/usr/bin/env bash
# The Grafana dashboard (deploy/grafana/dcps.json) shows only what a shard
# exports: every metric named in any of its expressions is a series or a family
# in the /metrics page of a real dcps-server (sync mode, with checkpoints, so
# that every family the shard can export is there). Also: the file is JSON,
# every panel has at least one expression, and no two panels share an id.
set -uo pipefail

: "${DCPS_BUILDDIR:?run through make check}" "${DCPS_SRCDIR:=$DCPS_BUILDDIR}"
command -v python3 >/dev/null || { echo "SKIP: no python3 to read the JSON"; exit 77; }
dashboard=$DCPS_SRCDIR/deploy/grafana/dcps.json

# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
srv=
cleanup() {
    [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
}

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/job.ini" <<EOF
[job]
name = dashboard
workers = 2
mode = sync
[servers]
shards = tcp://127.0.0.1:*
[model]
layers = 784,10
[server]
metrics_port = $port
checkpoint_dir = $tmp/ckpt
EOF
"$DCPS_BUILDDIR/dcps-server" --config "$tmp/job.ini" --shard 0 --endpoint-file "$tmp/ep" \
    2>"$tmp/server.log" &
srv=$!
page=
for _ in $(seq 100); do
    page=$(python3 -c "import urllib.request, sys
try: print(urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=2).read().decode())
except Exception: sys.exit(1)") && [ -n "$page" ] && break
    sleep 0.1
done
[ -n "$page" ] || { echo "FAIL: no metrics page"; cat "$tmp/server.log"; exit 1; }
printf '%s\n' "$page" >"$tmp/metrics"

python3 - "$dashboard" "$tmp/metrics" <<'EOF'
import json, re, sys

dash = json.load(open(sys.argv[1]))
page = open(sys.argv[2]).read()
samples = set(re.findall(r"^(dcps_[a-z_]+)[{ ]", page, re.M))
families = set(re.findall(r"^# TYPE (dcps_[a-z_]+) ", page, re.M))

def exported(name):
    if name in samples or name in families:
        return True
    return any(name == f + s for f in families for s in ("_bucket", "_sum", "_count"))

status, ids, names = 0, set(), set()
for p in dash["panels"]:
    exprs = [t.get("expr", "") for t in p.get("targets", [])]
    if not any(exprs):
        print(f"FAIL: panel {p.get('title')!r} has no expression")
        status = 1
    if p["id"] in ids:
        print(f"FAIL: panel id {p['id']} is used twice")
        status = 1
    ids.add(p["id"])
    for e in exprs:
        for name in re.findall(r"\bdcps_[a-z_]+", e):
            names.add(name)
            if not exported(name):
                print(f"FAIL: panel {p['title']!r} uses {name}, which dcps-server does not export")
                status = 1
if status == 0:
    print(f"PASS: the dashboard's {len(dash['panels'])} panels use {len(names)} metrics, "
          "all exported by dcps-server")
sys.exit(status)
EOF
