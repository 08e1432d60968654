# sections.awk — what the two key references made from `dcps-server
# --dump-config` share: dcps.conf(5) (man/keys2man.awk) and
# docs/configuration.md (docs/keys2md.awk). Load it first:
# awk -f man/sections.awk -f man/keys2man.awk ...
#
# The dump is a valid job file: "[section]" headers, and for each key a comment
# line "; description (range)" followed by "key = default". next_entry() reads
# it from the file named by the variable keys, one entry a call: it returns 1
# for a section (its header in E_SEC), 2 for a key (E_KEY, E_DEF, E_DOC), 0 at
# the end.
function next_entry(    line) {
    while ((getline line < keys) > 0) {
        if (line ~ /^\[.*\]$/) {
            E_SEC = line
            return 1
        } else if (line ~ /^; /) {
            E_DOC = substr(line, 3)
        } else if (E_SEC != "" && line ~ /^[a-z0-9_]+ =/) {
            E_KEY = line
            sub(/ =.*/, "", E_KEY)
            E_DEF = line
            sub(/^[^=]*= ?/, "", E_DEF)
            return 2
        }
    }
    close(keys)
    return 0
}

# One sentence about each section.
BEGIN {
    about["[job]"] = "The job as a whole: its name and id, its workers and how they keep in step."
    about["[servers]"] = "Where the shards are."
    about["[model]"] = "The model: a multi-layer perceptron, or any model's parameter count."
    about["[data]"] = "The data set, in MNIST (IDX) format, and how it is walked."
    about["[optimizer]"] = "The update rule the shards apply."
    about["[compression]"] = "How gradients and parameters travel between workers and shards."
    about["[worker]"] = "The workers' device, output and patience."
    about["[server]"] = "The shards' checkpoints, metrics and heartbeats."
    about["[security]"] = "ZeroMQ CURVE encryption and authentication."
}
