#!/usr/bin/env bash
# The docs say what the tree and the programs are.
#
# - README.md is at most 300 lines and opens (after its title) with the two
#   commands of deploy/quickstart.sh, demo then check.
# - Every relative link of README.md and docs/*.md names a file or directory of
#   the tree, and a link into a Markdown file with #anchor names one of its
#   headings (GitHub's anchors: lower case, punctuation dropped, blanks as "-").
#   Only in a git checkout: the release tarball leaves out debian/ and
#   bench/results/, which the docs link to.
# - The key reference of docs/configuration.md is what `make update-docs` makes
#   from this build's `dcps-server --dump-config` (docs/keys2md.awk); a diff
#   says where it is not.
# - The keys of the final: lines and the header of the metrics CSV shown in
#   docs/operating.md are those worker/job.c and worker/trainer.c print.
# - docs/operating.md's metrics table has a row for every metric server/metrics.c
#   writes; its installation table and docs/packaging.md list every installed
#   example (Makefile.am); its systemd steps name the package's examples directory.
# - Every ```sh, ```python and ```c block of README.md and docs/pytorch.md runs, as
#   a user would run it after the demo, unless the line before it says why not
#   ("<!-- not run: ... -->") or which test runs it ("<!-- example: tests/... -->"):
#   see docs/testing.md, "The code blocks of the docs". Shell blocks run in a copy
#   of the tree's deploy/ with this build as build/ and Debian's /usr/bin/python3 as
#   python3, where JOB.ini is a small job, train.py the README's Python block and
#   client.c its C program; each Python block runs as the one worker of a small
#   job (launch-local.sh), after tests/doc_prelude.py.
set -uo pipefail
: "${DCPS_BUILDDIR:?run through make check}" "${DCPS_SRCDIR:?run through make check}" "${AWK:=awk}"
src=$DCPS_SRCDIR
# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }

# --- README.md: short, and the two commands first ---------------------------------
lines=$(wc -l <"$src/README.md")
[ "$lines" -le 300 ] && pass "README.md has $lines lines" || fail "README.md has $lines lines, more than 300"
first=$(grep -v -e '^#' -e '^$' -e '^<!--' "$src/README.md" | head -n 4 | sed 's/ *#.*//')
want=$(printf '%s\n' '```sh' 'deploy/quickstart.sh demo' 'deploy/quickstart.sh check' '```')
[ "$first" = "$want" ] && pass "README.md opens with deploy/quickstart.sh demo and check" \
    || fail "README.md does not open with the two commands; its first lines: $first"

# --- links -----------------------------------------------------------------------------
# The anchors of a Markdown file, one a line.
anchors() {
    $AWK '/^```/ { code = !code; next }
          !code && /^#+ / { h = $0; sub(/^#+ +/, "", h); h = tolower(h)
                            gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h); print h }' "$1"
}
if [ -e "$src/.git" ]; then
    nlinks=0
    for doc in "$src/README.md" "$src"/docs/*.md; do
        dir=$(dirname "$doc")
        name=${doc#"$src"/}
        # ](target) outside code blocks; not http:, mailto: or a bare #anchor.
        while IFS= read -r target; do
            nlinks=$((nlinks + 1))
            path=${target%%#*}
            anchor=
            [ "$path" != "$target" ] && anchor=${target#*#}
            if [ -n "$path" ] && [ ! -e "$dir/$path" ]; then
                fail "$name links to $target: no such file"
            elif [ -n "$anchor" ] && [[ "$path" == *.md || -z "$path" ]]; then
                file=$dir/${path:-${doc##*/}}
                anchors "$file" | grep -qxF -- "$anchor" ||
                    fail "$name links to $target: no heading of ${file#"$src"/} has that anchor"
            fi
        done < <($AWK '/^```/ { code = !code; next } !code' "$doc" |
                 grep -o '\]([^)[:space:]]*)' | sed 's/^](//; s/)$//' |
                 grep -v -e '^[a-z]*:' -e '^$')
    done
    [ "$fails" = 0 ] && pass "$nlinks relative links of README.md and docs/*.md lead somewhere"
else
    echo "SKIP (links): $src is not a git checkout"
fi

# --- docs/configuration.md: the generated key reference ---------------------------
if ! "$DCPS_BUILDDIR/dcps-server" --dump-config >"$tmp/keys"; then
    fail "dcps-server --dump-config"
elif ! $AWK -v keys="$tmp/keys" -f "$src/man/sections.awk" -f "$src/docs/keys2md.awk" \
    "$src/docs/configuration.md" >"$tmp/configuration.md"; then
    fail "docs/keys2md.awk failed"
elif ! diff -u "$src/docs/configuration.md" "$tmp/configuration.md" >"$tmp/diff"; then
    fail "docs/configuration.md is not what dcps-server --dump-config makes; run \`make update-docs\`:"
    cat "$tmp/diff"
else
    n=$(grep -c '^| `' "$src/docs/configuration.md")
    pass "docs/configuration.md lists the $n keys of dcps-server --dump-config"
fi

# --- docs/operating.md: the final: line and the metrics CSV --------------------------
# The keys of the final: line, in the order of worker/job.c's format string.
code_keys=$(sed -n '/"final: rank=/,/compute_ms=%d"/p' "$src/worker/job.c" |
            grep -o '[a-z_]*=%' | sed 's/=%//' | tr '\n' ' ')
[ -n "$code_keys" ] || fail "no final: format in worker/job.c"
nfinal=0
while IFS= read -r line; do
    nfinal=$((nfinal + 1))
    doc_keys=$(printf '%s\n' "$line" | grep -o '[a-z_]*=' | sed 's/=//' | tr '\n' ' ')
    [ "$doc_keys" = "$code_keys" ] || fail "docs/operating.md shows a final: line with the keys
  $doc_keys
which is not what worker/job.c prints:
  $code_keys"
done < <(grep '^final: rank=' "$src/docs/operating.md")
[ "$nfinal" -gt 0 ] || fail "docs/operating.md shows no final: line"
table_keys=$(sed -n '/^- \*\*`final:`\*\*/,/^$/p; /^| key | meaning |/,/^$/p' "$src/docs/operating.md" |
             grep '^| `' | cut -d'|' -f2 | grep -o '`[a-z_]*`' | tr -d '`' | tr '\n' ' ')
[ "$table_keys" = "$code_keys" ] || fail "the final: table of docs/operating.md names
  $table_keys
which is not what worker/job.c prints:
  $code_keys"
code_csv=$(sed -n '/"elapsed_s,step/,/\\n");/p' "$src/worker/trainer.c" | grep -o '"[^"]*"' |
           tr -d '"\n' | sed 's/\\n$//')
grep -qxF -- "$code_csv" "$src/docs/operating.md" ||
    fail "docs/operating.md does not show the metrics CSV header of worker/trainer.c: $code_csv"
[ "$fails" = 0 ] && pass "docs/operating.md shows the final: keys ($code_keys) and the CSV header"

# --- what is installed and exported, as the docs list it ----------------------------
# Every metric family server/metrics.c writes has a row in docs/operating.md's table.
for m in $(grep -ohE '"dcps_[a-z_]+' "$src"/server/metrics.c | tr -d '"' |
           sed -E 's/_(bucket|count|sum)$//' | sort -u); do
    grep -q "^| \`$m\` |" "$src/docs/operating.md" ||
        fail "docs/operating.md's metrics table has no row for $m (server/metrics.c writes it)"
done
# Every example Makefile.am installs is in the lists of operating.md and packaging.md.
examples=$(sed -n '/^dist_examples_\(DATA\|SCRIPTS\) *=/,/[^\\]$/p' "$src/Makefile.am" |
           tr ' \t\\' '\n\n\n' | grep '/' | xargs -n 1 basename)
[ -n "$examples" ] || fail "no dist_examples_DATA in Makefile.am"
for e in $examples; do
    grep '^| examples |' "$src/docs/operating.md" | grep -F "\`$e\`" >/dev/null ||
        fail "docs/operating.md's installation table does not list the example $e"
    grep '^| `dcps-common`' "$src/docs/packaging.md" | grep -F "\`$e\`" >/dev/null ||
        fail "docs/packaging.md's dcps-common row does not list the example $e"
done
# The systemd guide names the examples where the package puts them too.
if [ -f "$src/debian/dcps-common.install" ]; then
    pkg_examples=/$(grep '/examples$' "$src/debian/dcps-common.install")
    # (grep -q in a pipe could end sed with SIGPIPE, a failure under pipefail)
    steps=$(sed -n '/^## Under systemd, step by step/,/^## /p' "$src/docs/operating.md")
    grep -qF "$pkg_examples" <<<"$steps" ||
        fail "docs/operating.md's systemd steps do not name $pkg_examples (debian/dcps-common.install)"
fi
[ "$fails" = 0 ] && pass "docs/operating.md and docs/packaging.md list every metric and example"

# --- the code blocks of README.md and docs/pytorch.md ------------------------------
# Each block into $tmp/blocks/N.LANG, and a line "N LANG DOC:LINE MARK" (MARK: the
# HTML comment before the fence, "-" if none) into $tmp/blocks/list.
mkdir -p "$tmp/blocks"
n=0
for doc in README.md docs/pytorch.md; do
    $AWK -v doc="$doc" -v dir="$tmp/blocks" -v n="$n" '
        /^```/ && !code {
            code = 1; lang = substr($0, 4); n++
            mark = prev ~ /^<!-- (not run|example):/ ? "marked" : "-"
            printf "%d %s %s:%d %s\n", n, (lang == "" ? "none" : lang), doc, NR, mark >> (dir "/list")
            file = dir "/" n "." (lang == "" ? "none" : lang); printf "" > file; next }
        /^```$/ && code { code = 0; close(file); next }
        code { print > file }
        { prev = $0 }
        END { print n > (dir "/count") }' "$src/$doc"
    n=$(cat "$tmp/blocks/count")
done

# The tree a user has after the demo: deploy/ and the build as build/; python3 is
# Debian's. JOB.ini: 1 shard on an ephemeral port, 2 workers, a model of any size.
tree=$tmp/tree
mkdir -p "$tree/bin"
cp -R "$src/deploy" "$tree/" && chmod -R u+w "$tree/deploy" && # (distcheck's srcdir is read-only)
    ln -s "$(cd "$DCPS_BUILDDIR" && pwd)" "$tree/build"
[ -x /usr/bin/python3 ] && ln -s /usr/bin/python3 "$tree/bin/python3"
cat >"$tree/JOB.ini" <<'EOF_JOB'
[job]
name = docs-block
workers = 2
[servers]
shards = tcp://127.0.0.1:*
[model]
params = auto
[data]
batch_size = 16
epochs = 1
[optimizer]
lr = 0.05
EOF_JOB
# train.py: the README's Python block after the prelude.
readme_py=$(awk '$2 == "python" && $3 ~ /^README.md:/ { print $1; exit }' "$tmp/blocks/list")
[ -n "$readme_py" ] || fail "README.md has no \`\`\`python block"
cat "$src/tests/doc_prelude.py" "$tmp/blocks/$readme_py.python" >"$tree/train.py" 2>/dev/null
awk '/^<!-- example:/ { on = 1; next } on && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit } inside { print }' "$src/README.md" >"$tree/client.c"
torch_ok=0
fashion=$($AWK -F' *= *' '$1 == "train_images" { print $2 }' "$src/deploy/jobs/local.ini")
PYTHONPATH=$DCPS_BUILDDIR/python /usr/bin/python3 -c 'import torch, dcps.torch' 2>/dev/null && torch_ok=1

# Python block N as the worker of JOB.ini (1 worker): the prelude, a worker unless
# the block makes one, the block, and finish() unless the block did.
run_python() {
    local f=$tmp/blocks/$1.python w=$tmp/py$1
    mkdir -p "$w"
    {
        cat "$src/tests/doc_prelude.py"
        grep -q 'dt.Worker(' "$f" || echo 'worker = dt.Worker(model)'
        cat "$f"
        echo 'if not worker._finished:'
        echo '    worker.finish(evaluate=my_eval)'
    } >"$w/block.py"
    (cd "$w" && PATH=$tree/bin:$PATH timeout 300 bash "$tree/deploy/launch-local.sh" \
        "$tree/JOB.ini" -w 1 -q -d "$w/run" -- python3 "$w/block.py") >"$w/out" 2>&1
}
nrun=0 nskip=0
while read -r i lang where mark; do
    [ "$mark" = marked ] && continue
    case $lang in
    sh | python | c) ;;
    *) continue ;; # output, INI: not code
    esac
    if [ $torch_ok = 0 ] && { [ "$lang" = python ] || grep -q 'train.py' "$tmp/blocks/$i.$lang"; }; then
        echo "SKIP ($where): /usr/bin/python3 cannot import torch and this build's dcps.torch"
        nskip=$((nskip + 1))
        continue
    fi
    if grep -q 'deploy/jobs/local.ini' "$tmp/blocks/$i.$lang" && [ ! -r "$fashion" ]; then
        echo "SKIP ($where): no $fashion (Debian package dataset-fashion-mnist)"
        nskip=$((nskip + 1))
        continue
    fi
    case $lang in
    python) run_python "$i"; rc=$?; out=$tmp/py$i/out ;;
    sh)
        (cd "$tree" && PATH=$tree/bin:$PATH timeout 300 bash -eo pipefail "$tmp/blocks/$i.sh") \
            >"$tmp/sh$i.out" 2>&1
        rc=$? out=$tmp/sh$i.out
        ;;
    c) rc=1; echo "no runner for C blocks: mark it" >"$tmp/c$i.out"; out=$tmp/c$i.out ;;
    esac
    nrun=$((nrun + 1))
    if [ $rc -ne 0 ]; then
        fail "the $lang block at $where exits $rc:"
        sed 's/^/    /' "$tmp/blocks/$i.$lang"
        tail -n 30 "$out" "$tmp/py$i"/run/*.log 2>/dev/null
    fi
done <"$tmp/blocks/list"
[ "$fails" = 0 ] && pass "$nrun code blocks of README.md and docs/pytorch.md run ($nskip skipped; the others are marked)"
exit $((fails > 0))
