#!/usr/bin/env bash
# Leave the repository in the current directory at BASE with nothing newer reachable.
#
# Official task images carry the gold commit's objects (the evaluation checks hidden tests out of
# them), often behind branches, tags, reflogs or stashes. Rather than hunt each of those down, the
# history reachable from BASE is fetched into a brand-new repository that replaces .git, so no ref,
# reflog, stash, hook or stray object of the old one survives. The working tree is reset to BASE;
# ignored files (installed dependencies, build outputs) are left in place.
#
# Initialised submodules (a `git submodule update --init --recursive` in the image) get the same
# guard, recursively: each one's history is cut at the commit its parent's BASE records, and its
# fresh history lives in its own `.git` directory, since the parent's `.git/modules` store (which
# holds the submodules' full histories) goes with the parent's old `.git`.
set -euo pipefail
export GIT_TERMINAL_PROMPT=0 GIT_CONFIG_NOSYSTEM=1

# sanitise_repo WHERE BASE: run in a subshell, so the `cd` and the trap stay inside it.
sanitise_repo() (
  cd "$1"
  local base="$2" gitdir fresh entry meta path sha key value submodules=0
  if [ ! -e .git ]; then
    echo "swepipe sanitise: $(pwd) has no .git" >&2
    exit 3
  fi
  gitdir="$(cd "$(git rev-parse --git-dir)" && pwd -P)"
  if ! git rev-parse -q --verify "${base}^{commit}" >/dev/null; then
    echo "swepipe sanitise: base commit ${base} is not in the repository at $(pwd)" >&2
    exit 3
  fi
  base="$(git rev-parse "${base}^{commit}")"

  git -c advice.detachedHead=false checkout -q -f --detach "$base"
  git reset -q --hard "$base"
  git clean -fdq

  # Submodules first, while this repository's old store (where their histories may live) still exists.
  if git cat-file -e "$base:.gitmodules" 2>/dev/null; then
    while IFS= read -r -d '' entry; do
      case "$entry" in "160000 "*) ;; *) continue ;; esac
      meta="${entry%%$'\t'*}"
      path="${entry#*$'\t'}"
      sha="${meta##* }"
      if [ -e "$path/.git" ]; then
        sanitise_repo "$path" "$sha"
        submodules=1
      fi
    done < <(git ls-tree -r -z "$base")
  fi

  fresh="$(mktemp -d)"
  trap 'rm -rf "$fresh"' EXIT
  git init -q "$fresh"
  git update-ref refs/swepipe/base "$base"
  git -C "$fresh" fetch -q --no-tags --no-write-fetch-head "$gitdir" refs/swepipe/base
  git -C "$fresh" config core.logAllRefUpdates false
  # Copy the settings that change how the working tree is read, nothing else (no remotes, no hooks).
  for key in core.autocrlf core.eol core.filemode core.symlinks core.ignorecase core.precomposeunicode; do
    if value="$(git config --local --get "$key")"; then git -C "$fresh" config "$key" "$value"; fi
  done
  # The initialised submodules stay initialised in git's eyes (`git submodule status`, `foreach`), without a URL.
  if [ "$submodules" = 1 ]; then git -C "$fresh" config submodule.active .; fi
  if [ -f "$gitdir/info/exclude" ]; then cp "$gitdir/info/exclude" "$fresh/.git/info/exclude"; fi
  # A submodule's .git is a file naming its store (in the parent's .git/modules/...): both go.
  rm -rf .git "$gitdir"
  mv "$fresh/.git" .git
  printf '%s\n' "$base" > .git/HEAD
  git reset -q
  rm -rf .git/logs .git/ORIG_HEAD .git/FETCH_HEAD
  git config user.name >/dev/null || git config user.name swepipe
  git config user.email >/dev/null || git config user.email swepipe@localhost
  echo "swepipe sanitise: $(pwd) at $base, $(git rev-list --count HEAD) commits reachable"
)

sanitise_repo . "$1"
