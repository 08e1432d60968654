# keys2man.awk — fills in dcps.conf(5): copies the page template from its input
# and replaces the line @KEYS@ with the key reference made from the output of
# `dcps-server --dump-config`, read from the file named by -v keys=FILE.
#
# The dump is a valid job file: "[section]" headers, and for each key a comment
# line "; description (range)" followed by "key = default". Each section becomes
# an .SS heading and each key a tagged paragraph:
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

function reference(    line, doc, key, def, sec, n) {
    n = 0
    # Left-aligned and unhyphenated: defaults are paths and lists, not prose.
    print ".ad l"
    print ".nh"
    while ((getline line < keys) > 0) {
        if (line ~ /^\[.*\]$/) {
            sec = line
            print ".SS " roff(sec)
            if (sec in about)
                print about[sec]
        } else if (line ~ /^; /) {
            doc = substr(line, 3)
        } else if (sec != "" && line ~ /^[a-z0-9_]+ =/) {
            key = line
            sub(/ =.*/, "", key)
            def = line
            sub(/^[^=]*= ?/, "", def)
            print ".TP"
            print "\\fB" key "\\fR = " (def == "" ? "(empty)" : "\\fI" roff(def) "\\fR")
            print roff(doc)
            doc = ""
            n++
        }
    }
    close(keys)
    if (n == 0) {
        print "keys2man.awk: no keys in " keys > "/dev/stderr"
        exit 1
    }
}

BEGIN {
    about["[job]"] = "The job as a whole: its name and id, its workers and how they keep in step."
    about["[servers]"] = "Where the shards are."
    about["[model]"] = "The model: a multi-layer perceptron."
    about["[data]"] = "The data set, in MNIST (IDX) format, and how it is walked."
    about["[optimizer]"] = "The update rule the shards apply."
    about["[compression]"] = "How gradients and parameters travel between workers and shards."
    about["[worker]"] = "The workers' device, output and patience."
    about["[server]"] = "The shards' checkpoints, metrics and heartbeats."
    about["[security]"] = "ZeroMQ CURVE encryption and authentication; see SECURITY below."
    if (keys == "") {
        print "keys2man.awk: usage: awk -v keys=DUMP -f keys2man.awk TEMPLATE" > "/dev/stderr"
        exit 1
    }
}

/^@KEYS@$/ { reference(); next }
{ print }
