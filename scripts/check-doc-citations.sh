#!/usr/bin/env bash
# Checks that every citation of the project's reference pages points at something in the
# repository: no citation of documents that live outside it (the old spec's rules.md, FORMAT.md,
# verbs-notes.md, softroce-vm.md, "spec §N", /work/shared), and every `docs/model.md §N`,
# `docs/model.md rule N` and `docs/verbs-notes.md, pitfall N` names a section, rule or pitfall
# that docs/ defines. Plain grep and sed; a second or two.
#
# Usage: scripts/check-doc-citations.sh   (from anywhere; exits 1 listing every bad citation)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bad=0
report() { printf '%s\n' "$@" >&2; bad=1; }

# The files that may cite: sources, manifests, scripts and prose, outside docs/ and build output.
files() {
    git ls-files -co --exclude-standard -- '*.rs' '*.md' '*.sh' '*.toml' '*.litmus' \
        | grep -v '^docs/' | grep -v '^scripts/check-doc-citations.sh$' || true
}

# 1. Documents outside the repository.
stale='rules\.md|FORMAT\.md|softroce-vm\.md|shared/spec|/work/shared|(^|[^/[:alnum:]_-])verbs-notes\.md|\b[Ss]pec §'
while IFS= read -r hit; do
    report "$hit: cites a document outside the repository (use docs/model.md, docs/litmus-format.md or docs/verbs-notes.md)"
done < <(files | xargs -r grep -nE "$stale" || true)

# 2. Sections of docs/model.md: each `docs/model.md §N` or `§N.M` (and each end of a range
#    `§5.3-§5.5`) must be a heading (`## §4 ...`) or a numbered fact (`**§3.4 ...`) there.
defined=$(grep -oE '^(#+ |[0-9]+\. \*\*)§[0-9]+(\.[0-9]+)?' docs/model.md | grep -oE '§[0-9.]+' | sort -u)
while IFS= read -r hit; do
    loc=${hit%%:docs/model.md*}
    for sec in $(printf '%s\n' "$hit" | grep -oE '§[0-9]+(\.[0-9]+)?'); do
        grep -qxF -- "$sec" <<<"$defined" || report "$loc: docs/model.md has no $sec"
    done
done < <(files | xargs -r grep -noE 'docs/model\.md §[0-9]+(\.[0-9]+)?(-§[0-9]+(\.[0-9]+)?)?' || true)

# 3. Rules of docs/model.md §4.4: `docs/model.md rule N` with N a row of its table.
rules=$(sed -n '/^### §4.4 /,/^### /p' docs/model.md | grep -oE '^\| [0-9]+ \|' | grep -oE '[0-9]+')
while IFS= read -r hit; do
    n=${hit##* }
    grep -qxF -- "$n" <<<"$rules" || report "${hit%%:docs/model.md*}: docs/model.md has no rule $n"
done < <(files | xargs -r grep -noE 'docs/model\.md rule [0-9]+' || true)

# 4. Pitfalls of docs/verbs-notes.md: `docs/verbs-notes.md, pitfall N` with N in its numbered list.
pitfalls=$(sed -n '/^## Pitfalls/,/^## /p' docs/verbs-notes.md | grep -oE '^[0-9]+\. ' | grep -oE '[0-9]+')
while IFS= read -r hit; do
    n=${hit##* }
    grep -qxF -- "$n" <<<"$pitfalls" || report "${hit%%:docs/verbs-notes.md*}: docs/verbs-notes.md has no pitfall $n"
done < <(files | xargs -r grep -noE 'docs/verbs-notes\.md, pitfall [0-9]+' || true)

if [ "$bad" = 0 ]; then
    echo "doc citations: all point into docs/"
fi
exit "$bad"
