#!/usr/bin/env bash
# `make install` into a staging directory (DESTDIR) puts every file in its place,
# a program builds against the staged libdcps through pkg-config, the man pages
# are clean roff that document every key, the example jobs load, the launchers
# parse, and `make uninstall` leaves no file behind.
set -uo pipefail

: "${DCPS_BUILDDIR:?run through make check}" "${MAKE:=make}" "${CC:=cc}" "${PKG_CONFIG:=pkg-config}"
# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
stage=$tmp/stage
status=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; status=1; }
# make in the build tree, as a make of its own: without the MAKEFLAGS of the
# `make check` that runs this test (its jobserver is not open to a script).
submake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $MAKE --no-print-directory -s -C "$DCPS_BUILDDIR" "$@"; }

# The directories as this build's Makefile has them (prefix, bindir, ...).
eval "$(submake print-install-dirs)" ||
    { echo "FAIL: make print-install-dirs"; exit 1; }

if ! submake install DESTDIR="$stage" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"
    echo "FAIL: make install DESTDIR=..."
    exit 1
fi

# Every installed file is where it belongs.
expect=(
    "$bindir/dcps-server" "$bindir/dcps-worker"
    "$includedir/dcps/dcps.h" "$includedir/dcps/error.h" "$includedir/dcps/step.h"
    "$libdir/pkgconfig/dcps.pc" "$libdir/libdcps.la"
    "$mandir/man8/dcps-server.8" "$mandir/man1/dcps-worker.1" "$mandir/man5/dcps.conf.5"
    "$docdir/examples/local.ini" "$docdir/examples/cluster.ini"
    "$docdir/examples/launch-local.sh" "$docdir/examples/dcps.sbatch" "$docdir/README.md"
)
# The docs README.md links to, beside it as in the repository.
for d in $(grep -o '](docs/[a-z]*\.md' "$stage$docdir/README.md" 2>/dev/null | sed 's/^](//' | sort -u); do
    expect+=("$docdir/$d")
done
[ -n "$pkgpyexecdir" ] &&
    expect+=("$pkgpyexecdir/__init__.py" "$pkgpyexecdir/torch.py" "$pkgpyexecdir/checkpoint.py"
        "$pkgpyexecdir/_dcps.so")
[ -n "$systemdsystemunitdir" ] &&
    expect+=("$systemdsystemunitdir/dcps-server@.service" "$systemdsystemunitdir/dcps-worker@.service")
missing=0
for f in "${expect[@]}"; do
    [ -e "$stage$f" ] || { fail "not installed: $f"; missing=1; }
done
for f in "$bindir/dcps-server" "$bindir/dcps-worker" "$docdir/examples/launch-local.sh" \
    "$docdir/examples/dcps.sbatch"; do
    [ -x "$stage$f" ] || { fail "not executable: $f"; missing=1; }
done
[ $missing -eq 0 ] && pass "${#expect[@]} files installed where expected"

# Installed text names installed paths, never the build tree (unless the prefix
# is inside it, as distcheck's is inside its source tree, not its build tree).
case $prefix/ in "$DCPS_BUILDDIR"/*) leak=/nonexistent/ ;; *) leak=$DCPS_BUILDDIR/ ;; esac
if grep -rlF -e "$leak" "$stage$mandir" \
    "$stage$docdir" "$stage$libdir/pkgconfig" ${systemdsystemunitdir:+"$stage$systemdsystemunitdir"} \
    >"$tmp/leaks"; then
    fail "build-tree paths in: $(tr '\n' ' ' <"$tmp/leaks")"
else
    pass "no build-tree path in the installed units, man pages, examples and dcps.pc"
fi
if [ -n "$systemdsystemunitdir" ]; then
    if grep -qx "ExecStart=$bindir/dcps-server .*" "$stage$systemdsystemunitdir/dcps-server@.service" &&
        grep -qx "ExecStart=$bindir/dcps-worker .*" "$stage$systemdsystemunitdir/dcps-worker@.service"; then
        pass "the units start $bindir/dcps-server and $bindir/dcps-worker"
    else
        fail "ExecStart= does not name the installed programs"
    fi
fi

# A program against the staged library, found through pkg-config. The sysroot
# makes pkg-config prefix -I and -L with the staging directory.
export PKG_CONFIG_PATH=$stage$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$stage
cat >"$tmp/prog.c" <<'EOF'
#include <dcps/dcps.h>
#include <dcps/error.h>
#include <dcps/step.h>
#include <stdio.h>
#include <string.h>

/* The prototypes as a user sees them; a mismatch is a compile error. */
static dcps_step_t *(*const new_fn)(const char *, int, const char *const *, size_t, size_t,
                                    int *, char *, size_t) = dcps_step_open;
static void (*const close_fn)(dcps_client_t **) = dcps_client_close;

int main(int argc, char **argv)
{
    char err[256];
    int code = 0;
    dcps_client_t *c = dcps_client_open(argc > 1 ? argv[1] : "", 0, NULL, 0, &code, err, sizeof err);
    if (c || code != DCPS_E_CONFIG || !new_fn || !close_fn)
        return 1;
    dcps_step_t *s = dcps_step_open(argc > 1 ? argv[1] : "", 0, NULL, 0, 100, &code, err,
                                    sizeof err);
    if (s || code != DCPS_E_CONFIG)
        return 1;
    printf("%s: %s\n", dcps_strerror(code), err);
    return strlen(err) > 0 ? 0 : 1;
}
EOF
if ! flags=$($PKG_CONFIG --cflags --libs dcps 2>"$tmp/pc.err"); then
    fail "pkg-config dcps: $(cat "$tmp/pc.err")"
# With the build's CFLAGS and LDFLAGS: a library built with sanitizers needs them.
elif ! $CC ${CFLAGS:-} -std=c11 -Wall -Wextra -Werror -o "$tmp/prog" "$tmp/prog.c" $flags \
    ${LDFLAGS:-} 2>"$tmp/cc.err"; then
    cat "$tmp/cc.err"
    fail "cannot build against the staged libdcps with: $flags"
elif ! out=$(LD_LIBRARY_PATH=$stage$libdir "$tmp/prog" "$tmp/no-such-job.ini"); then
    fail "the program built against libdcps misbehaves: $out"
else
    pass "built with \`pkg-config --cflags --libs dcps\` ($flags); it says: $out"
fi
# The Python package, from the staged tree alone.
if [ -n "$pkgpyexecdir" ]; then
    if out=$(cd "$tmp" && PYTHONPATH=$stage${pkgpyexecdir%/dcps} "$PYTHON" -c \
        'import dcps; print(dcps.__version__, dcps.__file__)' 2>&1) &&
        [ "${out%% *}" = "$("$DCPS_BUILDDIR/dcps-server" --version | awk '{print $2}')" ] &&
        case $out in *"$stage$pkgpyexecdir/__init__.py") true ;; *) false ;; esac; then
        pass "the staged Python package imports: $out"
    else
        fail "the staged Python package: $out"
    fi
fi
# libdcps exports the functions its installed headers declare and nothing else
# (libdcps.sym): no internal module is part of its ABI.
if [ -e "$stage$libdir/libdcps.so" ] && command -v nm >/dev/null; then
    nm -D --defined-only "$stage$libdir/libdcps.so" | awk '{print $3}' | LC_ALL=C sort >"$tmp/exported"
    sed -n 's/^[a-z][^(]*[ *]\(dcps_[a-z0-9_]*\)(.*/\1/p' "$stage$includedir"/dcps/*.h |
        LC_ALL=C sort -u >"$tmp/declared"
    if [ -s "$tmp/declared" ] && cmp -s "$tmp/exported" "$tmp/declared"; then
        pass "libdcps.so exports exactly the $(wc -l <"$tmp/declared") functions its headers declare"
    else
        fail "libdcps.so's exports differ from its headers' functions (< exported, > declared):"
        diff "$tmp/exported" "$tmp/declared" | grep '^[<>]' | head -20
    fi
fi
# No installed header names a type that is not installed: every struct they
# mention is an opaque handle typedef'd there (dcps_client_t, dcps_step_t), and
# every dcps_*_t they use is defined there.
if hdrs=("$stage$includedir"/dcps/*.h) && [ -e "${hdrs[0]}" ]; then
    used=$(grep -ho 'struct dcps_[a-z0-9_]*\|\bdcps_[a-z0-9_]*_t\b' "${hdrs[@]}" |
        sed 's/^struct //' | LC_ALL=C sort -u)
    defined=$(sed -n 's/^typedef struct \(dcps_[a-z0-9_]*\) \(dcps_[a-z0-9_]*_t\);.*/\1 \2/p; s/^} \(dcps_[a-z0-9_]*_t\);.*/\1/p' \
        "${hdrs[@]}" | tr ' ' '\n' | LC_ALL=C sort -u)
    unknown=$(LC_ALL=C comm -23 <(echo "$used") <(echo "$defined") | paste -sd' ' -)
    if [ -z "$unknown" ] && [ -n "$used" ]; then
        pass "the installed headers name only types they define ($(echo "$used" | wc -l) names)"
    else
        fail "the installed headers name types they do not define: $unknown"
    fi
fi
# libdcps links what its header needs and nothing else: none of the server's
# libraries (libuv, libsystemd, libmicrohttpd) nor the trainer's (zlib, CBLAS).
role_libs='libuv|libsystemd|libmicrohttpd|libz\.|libopenblas|libblas|libcblas'
if [ -e "$stage$libdir/libdcps.so" ] && command -v readelf >/dev/null; then
    needed=$(readelf -d "$stage$libdir/libdcps.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd' ' -)
    if [ -n "$needed" ] && ! echo "$needed" | grep -qE "$role_libs"; then
        pass "libdcps.so needs only the client's libraries: $needed"
    else
        fail "libdcps.so needs a library of the server or the trainer: $needed"
    fi
fi
# dcps.pc names only the client's dependencies, and a static link adds nothing
# of the server's or the trainer's but what libzmq itself brings (its own
# Requires.private may pull -lz in through libxml2).
pc_static=$($PKG_CONFIG --libs --static dcps 2>/dev/null)
zmq_static=$($PKG_CONFIG --libs --static libzmq 2>/dev/null)
pc_req=$(sed -n 's/^Requires.private: *//p' "$stage$libdir/pkgconfig/dcps.pc")
bad=
for l in -luv -lsystemd -lmicrohttpd -lopenblas -lblas -lcblas -lz; do
    case " $pc_static " in *" $l "*) case " $zmq_static " in *" $l "*) ;; *) bad="$bad $l" ;; esac ;; esac
done
if [ -z "$bad" ] && [ "$pc_req" = "libzmq libprotobuf-c inih" ]; then
    pass "dcps.pc requires $pc_req; pkg-config --libs --static dcps names no library of the server or the trainer"
else
    fail "dcps.pc: Requires.private '$pc_req'; pkg-config --libs --static dcps adds$bad"
fi
version=$($PKG_CONFIG --modversion dcps 2>/dev/null)
[ "$version" = "$("$DCPS_BUILDDIR/dcps-server" --version | awk '{print $2}')" ] &&
    pass "pkg-config --modversion dcps: $version" || fail "pkg-config --modversion dcps: $version"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# Man pages: no groff warning, and dcps.conf(5) documents every key under its section.
# -Wbreak: the pages hold the installation paths, which cannot be broken; under a
# long prefix (distcheck's, in a deep build tree) groff warns that it cannot break
# or adjust those lines. Every other warning still fails the test.
if command -v groff >/dev/null; then
    for page in man8/dcps-server.8 man1/dcps-worker.1 man5/dcps.conf.5; do
        if groff -man -Tutf8 -ww -Wbreak -z "$stage$mandir/$page" 2>"$tmp/groff.err" && [ ! -s "$tmp/groff.err" ]; then
            pass "groff -man -ww -Wbreak: $page"
        else
            fail "groff -man -ww -Wbreak: $page: $(cat "$tmp/groff.err")"
        fi
    done
else
    echo "SKIP: no groff, man pages not checked"
fi
# The pages' OPTIONS are the programs' --help: every long option is in its page.
for prog in dcps-server:man8/dcps-server.8 dcps-worker:man1/dcps-worker.1; do
    missing=$("$DCPS_BUILDDIR/${prog%%:*}" --help | grep -o -- '--[a-z][a-z-]*' | sort -u |
        while read -r opt; do
            grep -qF -- "$(printf '%s' "$opt" | sed 's/-/\\-/g')" "$stage$mandir/${prog#*:}" || echo "$opt"
        done)
    [ -z "$missing" ] && pass "${prog#*:}: every option of ${prog%%:*} --help" ||
        fail "${prog#*:} lacks $(echo $missing)"
done
"$DCPS_BUILDDIR/dcps-server" --dump-config |
    awk '/^\[/ { sec = substr($0, 2, length($0) - 2) } /^[a-z0-9_]+ =/ { print sec "." $1 }' |
    sort >"$tmp/keys.dump"
awk '/^\.SS \[/ { sec = substr($2, 2, length($2) - 2) }
     /^\\fB[a-z0-9_]+\\fR = / { k = $1; gsub(/\\f[BR]/, "", k); print sec "." k }' \
    "$stage$mandir/man5/dcps.conf.5" | sort >"$tmp/keys.man"
if [ -s "$tmp/keys.dump" ] && cmp -s "$tmp/keys.dump" "$tmp/keys.man"; then
    pass "dcps.conf(5) documents all $(wc -l <"$tmp/keys.dump") keys of --dump-config"
else
    fail "dcps.conf(5) and --dump-config differ: $(diff "$tmp/keys.dump" "$tmp/keys.man" | tr '\n' ' ')"
fi

# The example jobs load: a rank beyond [job] workers is refused only after the
# file and its checks passed.
for job in "$stage$docdir"/examples/*.ini; do
    out=$("$DCPS_BUILDDIR/dcps-worker" --config "$job" --rank 100000 2>&1)
    case $out in
    *"--rank 100000: "*"has [job] workers"*) pass "example job loads: ${job##*/}" ;;
    *) fail "example job ${job##*/}: $out" ;;
    esac
done
for script in "$stage$docdir/examples/launch-local.sh" "$stage$docdir/examples/dcps.sbatch" \
    "${DCPS_SRCDIR:-.}/deploy/quickstart.sh"; do
    if bash -n "$script" 2>"$tmp/sh.err"; then
        pass "bash -n ${script##*/}"
    else
        fail "bash -n ${script##*/}: $(cat "$tmp/sh.err")"
    fi
done

# Uninstall removes every file it installed.
if ! submake uninstall DESTDIR="$stage" >"$tmp/uninstall.log" 2>&1; then
    cat "$tmp/uninstall.log"
    fail "make uninstall DESTDIR=..."
fi
left=$(find "$stage" ! -type d | head -n 20)
if [ -n "$left" ]; then
    fail "left after make uninstall: $left"
else
    pass "make uninstall leaves no file"
fi
exit $status
