# keys2man.awk — fills in dcps.conf(5): copies the page template from its input
# and replaces the line @KEYS@ with the key reference made from the output of
# `dcps-server --dump-config`, read from the file named by -v keys=FILE. The
# dump is read, and the sentence about each section given, by man/sections.awk,
# loaded before it.
# Each section becomes an .SS heading and each key a tagged paragraph:
#   .TP
#   \fBkey\fR = \fIdefault\fR
#   description (range)

# Text made safe for roff: backslashes escaped, and no control character at the
# start of a line.
function roff(s) {
    gsub(/\\/, "\\e", s)
    if (s ~ /^[.']/)
        s = "\\&" s
    return s
}

function reference(    t, n) {
    n = 0
    # Left-aligned and unhyphenated: defaults are paths and lists, not prose.
    print ".ad l"
    print ".nh"
    while ((t = next_entry()) > 0) {
        if (t == 1) {
            print ".SS " roff(E_SEC)
            if (E_SEC in about)
                print about[E_SEC] (E_SEC in see ? " " see[E_SEC] : "")
        } else {
            print ".TP"
            print "\\fB" E_KEY "\\fR = " (E_DEF == "" ? "(empty)" : "\\fI" roff(E_DEF) "\\fR")
            print roff(E_DOC)
            E_DOC = ""
            n++
        }
    }
    if (n == 0) {
        print "keys2man.awk: no keys in " keys > "/dev/stderr"
        exit 1
    }
}

BEGIN {
    see["[security]"] = "See SECURITY below."
    if (keys == "") {
        print "keys2man.awk: usage: awk -v keys=DUMP -f sections.awk -f keys2man.awk TEMPLATE" > "/dev/stderr"
        exit 1
    }
}

/^@KEYS@$/ { reference(); next }
{ print }
