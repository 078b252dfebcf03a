#!/usr/bin/env bash
# Leave the repository in the current directory at BASE with nothing newer reachable.
#
# Official task images carry the gold commit's objects (the evaluation checks hidden tests out of
# them), often behind branches, tags, reflogs or stashes. Rather than hunt each of those down, the
# history reachable from BASE is fetched into a brand-new repository that replaces .git, so no ref,
# reflog, stash, hook or stray object of the old one survives. The working tree is reset to BASE;
# ignored files (installed dependencies, build outputs) are left in place.
set -euo pipefail
base="$1"
export GIT_TERMINAL_PROMPT=0 GIT_CONFIG_NOSYSTEM=1

if [ ! -d .git ]; then
  echo "swepipe sanitise: $(pwd) has no .git directory" >&2
  exit 3
fi
if ! git rev-parse -q --verify "${base}^{commit}" >/dev/null; then
  echo "swepipe sanitise: base commit ${base} is not in the repository at $(pwd)" >&2
  exit 3
fi
base="$(git rev-parse "${base}^{commit}")"

git -c advice.detachedHead=false checkout -q -f --detach "$base"
git reset -q --hard "$base"
git clean -fdq

fresh="$(mktemp -d)"
trap 'rm -rf "$fresh"' EXIT
git init -q "$fresh"
git update-ref refs/swepipe/base "$base"
git -C "$fresh" fetch -q --no-tags --no-write-fetch-head "$(pwd)/.git" refs/swepipe/base
git -C "$fresh" config core.logAllRefUpdates false
# Copy the settings that change how the working tree is read, nothing else (no remotes, no hooks).
for key in core.autocrlf core.eol core.filemode core.symlinks core.ignorecase core.precomposeunicode; do
  if value="$(git config --local --get "$key")"; then git -C "$fresh" config "$key" "$value"; fi
done
if [ -f .git/info/exclude ]; then cp .git/info/exclude "$fresh/.git/info/exclude"; fi
rm -rf .git
mv "$fresh/.git" .git
printf '%s\n' "$base" > .git/HEAD
git reset -q
rm -rf .git/logs .git/ORIG_HEAD .git/FETCH_HEAD
git config user.name >/dev/null || git config user.name swepipe
git config user.email >/dev/null || git config user.email swepipe@localhost
echo "swepipe sanitise: $(pwd) at $base, $(git rev-list --count HEAD) commits reachable"
