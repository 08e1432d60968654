# keys2md.awk — fills in the key reference of docs/configuration.md: copies the
# file from its input and replaces what lies between the lines
# "<!-- keys: begin -->" and "<!-- keys: end -->" with the reference made from
# the output of `dcps-server --dump-config`, read from the file named by
# -v keys=FILE. The same dump makes dcps.conf(5) (man/keys2man.awk); the dump
# is read, and each section's sentence given, by man/sections.awk, loaded before
# this file, so the page and the doc cannot disagree.
#
# Each section becomes a heading, a sentence and a table of its keys.

# Text made safe for a table cell.
function cell(s) {
    gsub(/\|/, "\\|", s)
    return s
}

function reference(    t, n) {
    n = 0
    while ((t = next_entry()) > 0) {
        if (t == 1) {
            print ""
            print "### `" E_SEC "`"
            print ""
            if (E_SEC in about)
                print about[E_SEC] (E_SEC in see ? " " see[E_SEC] : "")
            print ""
            print "| key | default | meaning (accepted values) |"
            print "|---|---|---|"
        } else {
            print "| `" E_KEY "` | " (E_DEF == "" ? "(empty)" : "`" cell(E_DEF) "`") " | " cell(E_DOC) " |"
            E_DOC = ""
            n++
        }
    }
    if (n == 0) {
        print "keys2md.awk: no keys in " keys > "/dev/stderr"
        exit 1
    }
    print ""
}

BEGIN {
    see["[security]"] = "See [Security (CURVE)](operating.md#security-curve)."
    if (keys == "") {
        print "keys2md.awk: usage: awk -v keys=DUMP -f sections.awk -f keys2md.awk configuration.md" > "/dev/stderr"
        exit 1
    }
}

/^<!-- keys: begin/ { print; reference(); skip = 1; next }
/^<!-- keys: end/ { skip = 0; found = 1 }
!skip { print }

END {
    if (!found) {
        print "keys2md.awk: no \"<!-- keys: begin -->\" ... \"<!-- keys: end -->\" lines in the input" > "/dev/stderr"
        exit 1
    }
}
