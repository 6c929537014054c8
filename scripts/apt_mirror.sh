# Sourced by install_nsys.sh: add Debian's contrib and non-free components from the mirror
# this machine already uses, so the install works behind a site's mirror or proxy.
#
#   enable_non_free APT_ETC CODENAME   writes APT_ETC/sources.list.d/debian-non-free.sources
#                                      (deb822 machines) or .list (one-line sources.list)
#                                      unless present; prints the file's path.
#
# The mirror is the first "deb" entry for CODENAME with component "main", read from
# APT_ETC/sources.list.d/*.sources (deb822) or else APT_ETC/sources.list and
# APT_ETC/sources.list.d/*.list (one-line format); its URIs and Signed-By keyring are reused.

# Prints "URIs: ..." and, if set, "Signed-By: ..." (continuation lines kept) of the first
# matching deb822 stanza.
deb822_mirror() {
    awk -v suite="$1" '
        function flush() {
            if (!found && (" " types " ") ~ / deb / && (" " suites " ") ~ (" " suite " ") \
                && (" " comps " ") ~ / main / && tolower(enabled) != "no" && uris != "") {
                print "URIs: " uris
                if (signed != "") print "Signed-By: " signed
                found = 1
            }
            types = uris = suites = comps = signed = enabled = field = ""
        }
        /^#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/ { if (field == "signed-by") signed = signed "\n" $0; next }
        {
            i = index($0, ":"); field = tolower(substr($0, 1, i - 1)); value = substr($0, i + 1)
            gsub(/^[ \t]+|[ \t]+$/, "", value)
            if (field == "types") types = value
            else if (field == "uris") uris = value
            else if (field == "suites") suites = value
            else if (field == "components") comps = value
            else if (field == "signed-by") signed = value
            else if (field == "enabled") enabled = value
        }
        END { flush(); exit !found }
    ' "$2"
}

# Prints "[options] URI" of the first matching one-line "deb" entry.
one_line_mirror() {
    awk -v suite="$1" '
        $1 != "deb" { next }
        {
            i = 2; opts = ""
            if ($2 ~ /^\[/) {
                opts = $2
                while (opts !~ /\]$/ && i < NF) { i++; opts = opts " " $i }
                i++
            }
            main = 0
            for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
            if ($(i + 1) == suite && main) { print (opts == "" ? "" : opts " ") $i; found = 1; exit }
        }
        END { exit !found }
    ' "$2"
}

enable_non_free() {
    apt_etc="$1"; suite="$2"; parts="$apt_etc/sources.list.d"
    for file in "$parts"/*.sources; do
        [ -r "$file" ] || continue
        if mirror="$(deb822_mirror "$suite" "$file")"; then
            out="$parts/debian-non-free.sources"
            [ -e "$out" ] || printf 'Types: deb\n%s\nSuites: %s\nComponents: contrib non-free\n' \
                "$mirror" "$suite" > "$out"
            echo "$out"
            return 0
        fi
    done
    for file in "$apt_etc/sources.list" "$parts"/*.list; do
        [ -r "$file" ] || continue
        if mirror="$(one_line_mirror "$suite" "$file")"; then
            out="$parts/debian-non-free.list"
            mkdir -p "$parts"
            [ -e "$out" ] || printf 'deb %s %s contrib non-free\n' "$mirror" "$suite" > "$out"
            echo "$out"
            return 0
        fi
    done
    printf 'no Debian mirror for %s (a "deb" entry with component main) in %s or %s\n' \
        "$suite" "$parts/*.sources" "$apt_etc/sources.list" >&2
    return 1
}
