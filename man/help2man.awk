# help2man.awk: the OPTIONS entries of a man page from a program's --help text, so
# that the page and --help cannot disagree (make runs `PROG --help` and this).
#   awk -v help=FILE -f help2man.awk < page.in > page
# copies page.in and replaces its line "@OPTIONS@" by one .TP entry per option of
# FILE: an option line is "  -x, --long ARG" (or "      --long ARG") padded to
# column 27 and its description; lines indented to column 27 continue it.
function roff(s) {
    gsub(/\\/, "\\e", s)
    gsub(/-/, "\\-", s)
    return s
}
function flush() {
    if (spec != "") {
        print ".TP"
        print ".B \"" roff(spec) "\""
        text = roff(desc)
        sub(/^[.']/, "\\\\\\&&", text)
        print text
    }
    spec = desc = ""
}
$0 == "@OPTIONS@" {
    while ((getline line < help) > 0) {
        if (match(line, /^ +-/) && RLENGTH < 27) {
            flush()
            spec = substr(line, 1, 27); sub(/^ +/, "", spec); sub(/ +$/, "", spec)
            desc = substr(line, 28)
        } else if (line ~ /^                           [^ ]/ && spec != "") {
            desc = desc " " substr(line, 28)
        }
    }
    flush()
    close(help)
    next
}
{ print }
