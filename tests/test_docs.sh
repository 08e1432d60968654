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
first=$(grep -v -e '^#' -e '^$' "$src/README.md" | head -n 4 | sed 's/ *#.*//')
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
exit $((fails > 0))
