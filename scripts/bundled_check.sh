#!/usr/bin/env bash
# Check the bundled SWE-Bench Pro tasks end to end with plain docker.
#
#   scripts/bundled_check.sh [--no-build] [--keep] [INSTANCE_ID_SUBSTRING ...]
#
# For every task under pipeline/bundled/tasks (or those whose id contains one of the
# given substrings) this
#   1. builds swepipe-lang:<python|go|node> and swepipe-bundled:<dockerhub_tag>
#      (the build context comes from `python -m pipeline.bundled.build context`);
#   2. reproduces the official swe_bench_pro_eval.py protocol by hand, twice: with the
#      gold patch and with an empty patch. In the container: cd /app, git reset --hard
#      <base>, git checkout <base>, git apply -v the patch, the LAST line of
#      before_repo_set_cmd, bash run_script.sh <selected tests joined by commas> with
#      stdout and stderr in separate files, python parser.py -> output.json;
#   3. reports whether each run resolves the task (every FAIL_TO_PASS and PASS_TO_PASS
#      name PASSED in output.json) and, from the empty-patch run (= the base commit
#      with the hidden tests), which FAIL_TO_PASS tests fail and which PASS_TO_PASS
#      tests pass at base.
# Exits 0 only if, for every task, gold resolves, the empty patch does not, every
# FAIL_TO_PASS test fails at base and every PASS_TO_PASS test passes at base.
# Needs: docker, git, python3 with PyYAML (for the build context).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLED="$ROOT/pipeline/bundled"
DATASET="$BUNDLED/dataset.jsonl"
BUILD=1
KEEP=0
FILTERS=()
for arg in "$@"; do
  case "$arg" in
    --no-build) BUILD=0 ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) FILTERS+=("$arg") ;;
  esac
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/swepipe-bundled-check.XXXXXX")"
cleanup() { if [ "$KEEP" = 1 ]; then echo "work files kept in $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT

cd "$ROOT"
if ! python3 -m pipeline.bundled.build --check >/dev/null; then
  echo "warning: $DATASET is out of date; checking the committed rows anyway (run: python -m pipeline.bundled.build)" >&2
fi

# Field of the dataset row of one instance (lists come out comma-joined).
row_field() {
  python3 - "$DATASET" "$1" "$2" <<'PY'
import json, sys
path, instance_id, field = sys.argv[1:]
for line in open(path, encoding="utf-8"):
    row = json.loads(line)
    if row["instance_id"] == instance_id:
        value = row[field]
        sys.stdout.write(",".join(value) if isinstance(value, list) else str(value))
        break
else:
    sys.exit(f"{instance_id} is not in {path}")
PY
}

declare -A LANG_IMAGE=([python]=python [go]=go [js]=node [ts]=node)
declare -A BUILT=()
FAILURES=0
SUMMARY=()

for task_dir in "$BUNDLED"/tasks/*/; do
  task_dir="${task_dir%/}"
  id="$(basename "$task_dir")"
  if [ ${#FILTERS[@]} -gt 0 ]; then
    keep=0
    for f in "${FILTERS[@]}"; do [[ "$id" == *"$f"* ]] && keep=1; done
    [ "$keep" = 1 ] || continue
  fi
  language="$(row_field "$id" repo_language)"
  tag="$(row_field "$id" dockerhub_tag)"
  image="swepipe-bundled:$tag"
  lang_image="swepipe-lang:${LANG_IMAGE[$language]}"
  echo "=== $id [$language]"

  if [ "$BUILD" = 1 ]; then
    if [ -z "${BUILT[$lang_image]:-}" ]; then
      start=$SECONDS
      docker build -q -t "$lang_image" "$BUNDLED/images/${LANG_IMAGE[$language]}" >"$WORK/build.log" 2>&1 \
        || { cat "$WORK/build.log" >&2; exit 1; }
      echo "  built $lang_image in $((SECONDS - start))s"
      BUILT[$lang_image]=1
    fi
    start=$SECONDS
    python3 -m pipeline.bundled.build context "$task_dir" "$WORK/$id/context" >/dev/null
    docker build -q -t "$image" "$WORK/$id/context" >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log" >&2; exit 1; }
    echo "  built $image in $((SECONDS - start))s"
  fi

  base_commit="$(row_field "$id" base_commit)"
  last_setup_line="$(row_field "$id" before_repo_set_cmd | sed '/^[[:space:]]*$/d' | tail -n 1)"
  selected="$(row_field "$id" selected_test_files_to_run)"

  for mode in gold empty; do
    ws="$WORK/$id/$mode"
    mkdir -p "$ws"
    if [ "$mode" = gold ]; then row_field "$id" patch > "$ws/patch.diff"; else : > "$ws/patch.diff"; fi
    cp "$task_dir/run_script.sh" "$ws/run_script.sh"
    cp "$task_dir/parser.py" "$ws/parser.py"
    cat > "$ws/entryscript.sh" <<EOF
# apply patch
cd /app
git reset --hard $base_commit
git checkout $base_commit
git apply -v /workspace/patch.diff
$last_setup_line
# run test and save stdout and stderr to separate files
bash /workspace/run_script.sh $selected > /workspace/stdout.log 2> /workspace/stderr.log
# run parsing script
python /workspace/parser.py /workspace/stdout.log /workspace/stderr.log /workspace/output.json
EOF
    start=$SECONDS
    docker run --rm --network none -v "$ws:/workspace" --entrypoint /bin/bash "$image" /workspace/entryscript.sh \
      > "$ws/entryscript.log" 2>&1 || echo "  warning: entryscript exited non-zero ($mode), see $ws/entryscript.log"
    echo "  ran $mode patch in $((SECONDS - start))s"
  done

  set +e
  python3 - "$DATASET" "$id" "$WORK/$id" <<'PY'
import json, sys
from pathlib import Path

path, instance_id, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
row = next(r for r in map(json.loads, open(path, encoding="utf-8")) if r["instance_id"] == instance_id)
f2p, p2p = row["fail_to_pass"], row["pass_to_pass"]

def statuses(mode):
    try:
        tests = json.loads((work / mode / "output.json").read_text())["tests"]
    except (OSError, ValueError, KeyError):
        return None
    return {t["name"]: t["status"] for t in tests}

gold, base = statuses("gold"), statuses("empty")
ok = True
for mode, got in (("gold", gold), ("empty", base)):
    if got is None:
        print(f"  {mode}: no output.json")
        ok = False
if gold is None or base is None:
    sys.exit(1)

def resolved(got):
    return all(got.get(n) == "PASSED" for n in f2p + p2p)

def count(got, names, want):
    return sum(1 for n in names if (got.get(n) == "PASSED") == want)

print(f"  gold patch : {'RESOLVED' if resolved(gold) else 'not resolved':<12}  F2P {count(gold, f2p, True)}/{len(f2p)} passed, P2P {count(gold, p2p, True)}/{len(p2p)} passed")
print(f"  empty patch: {'RESOLVED' if resolved(base) else 'not resolved':<12}  F2P {count(base, f2p, True)}/{len(f2p)} passed, P2P {count(base, p2p, True)}/{len(p2p)} passed")
print(f"  F2P failing at base: {count(base, f2p, False)}/{len(f2p)}    P2P passing at base: {count(base, p2p, True)}/{len(p2p)}")
for kind, names in (("F2P", f2p), ("P2P", p2p)):
    for n in names:
        b, g = base.get(n, "MISSING"), gold.get(n, "MISSING")
        expected_base = b != "PASSED" if kind == "F2P" else b == "PASSED"
        flag = "  " if expected_base and g == "PASSED" else "!!"
        print(f"  {flag} {kind} base={b:<7} gold={g:<7} {n}")
ok = ok and resolved(gold) and not resolved(base) and count(base, f2p, False) == len(f2p) and count(base, p2p, True) == len(p2p)
print(f"  => {'OK' if ok else 'PROBLEM'}")
sys.exit(0 if ok else 1)
PY
  status=$?
  set -e
  if [ "$status" = 0 ]; then SUMMARY+=("OK       $id"); else SUMMARY+=("PROBLEM  $id"); FAILURES=$((FAILURES + 1)); fi
done

echo
echo "=== summary"
printf '%s\n' "${SUMMARY[@]}"
exit $((FAILURES > 0))
