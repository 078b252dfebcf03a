#!/usr/bin/env bash
# What the repository in the current directory holds beyond its HEAD: run right after sanitise.sh (its result, on
# record with the sanitised image), or alone on a repository that was not sanitised. One line per repository, this
# one first, then each initialised submodule of HEAD, recursively:
#
#   swepipe seal: COMMITS REFS REMOTES REFLOGS OBJECTS REACHABLE PATH
#
# COMMITS reachable from HEAD; REFS of any kind (branches, tags, stashes, notes: a sanitised HEAD is detached and
# is none); REMOTES configured; REFLOGS: files under the git directory's logs/; OBJECTS in the object store
# (alternates included) against those REACHABLE from HEAD: any difference is history an agent could dig out.
# A count git could not give is "?". PATH is relative to the top repository ("." for it), a line break in
# it shown as "?".
set -uo pipefail
export GIT_TERMINAL_PROMPT=0 GIT_CONFIG_NOSYSTEM=1 LC_ALL=C

# the lines a git command prints, "?" when it fails (pipefail: its status, not wc's)
count() { local n; if n="$("$@" 2>/dev/null | wc -l)"; then echo "$n"; else echo "?"; fi; }

seal_facts() (
  cd "$1" || exit 0
  local where="$2" gitdir commits refs remotes reflogs objects reachable entry path
  gitdir="$(git rev-parse --git-dir 2>/dev/null)" || { echo "swepipe seal: ? ? ? ? ? ? ${where//[$'\n\r']/?}"; exit 0; }
  commits="$(git rev-list --count HEAD 2>/dev/null || echo "?")"
  refs="$(count git for-each-ref --format=x)"
  remotes="$(count git remote)"
  reflogs=0
  if [ -d "$gitdir/logs" ]; then reflogs="$(find "$gitdir/logs" -type f | wc -l)"; fi
  objects="$(count git cat-file --batch-all-objects --batch-check='%(objectname)')"
  reachable="$(count git rev-list --objects HEAD)"
  echo "swepipe seal: $commits $refs $remotes $reflogs $objects $reachable ${where//[$'\n\r']/?}"
  git ls-tree -r -z HEAD 2>/dev/null | while IFS= read -r -d '' entry; do
    case "$entry" in "160000 "*) ;; *) continue ;; esac
    path="${entry#*$'\t'}"
    if [ -e "$path/.git" ]; then seal_facts "$path" "$([ "$where" = . ] && echo "$path" || echo "$where/$path")"; fi
  done
)

seal_facts . .
