import os
import subprocess
from pathlib import Path

import pytest

from pipeline.juniors.pool import build_pool
from pipeline.records import Rollout
from pipeline.runtime.base import CommandResult
from pipeline.runtime.local import LocalRuntime
from pipeline.senior.expand import ExpansionSpan, expand_pool, merge_spans

MONEY = '''\
from decimal import Decimal


def quantum_for(places):
    return Decimal(1).scaleb(-places)
'''

TAX = '''\
from decimal import Decimal

from shop.money import quantum_for

TAX_RATE = Decimal("0.2")


def round_tax(amount, places=2):
    return round(amount * TAX_RATE, places)


def rate():
    return TAX_RATE
'''

INVOICE = '''\
from shop.tax import round_tax


class Invoice:
    def __init__(self, amounts):
        self.amounts = amounts

    def total(self):
        subtotal = sum(self.amounts)
        return subtotal + round_tax(subtotal)
'''

REPORT = '''\
# round_tax is applied by Invoice.total; this module only prints.


def show(invoice):
    print("round_tax")
    return invoice
'''

TESTS = '''\
from shop.invoice import Invoice
from shop.tax import round_tax


def test_total():
    assert Invoice([10]).total() == 12


def test_round_tax():
    assert round_tax(10) == 2
'''


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def make_repo(root: Path, files: dict[str, str]) -> tuple[Path, str]:
    root.mkdir()
    git(root, "init", "-q")
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root, git(root, "rev-parse", "HEAD").strip()


def patch_of(repo: Path, edits: dict[str, str]) -> str:
    """The diff that ``edits`` make to the repository, which is then restored."""
    for path, text in edits.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    diff = git(repo, "diff", "--cached", "--no-renames")
    git(repo, "reset", "-q", "--hard")
    return diff


def expand(repo, base, patches, **options):
    pool = build_pool("task", [Rollout(index=i, patch=p) for i, p in enumerate(patches)])
    with LocalRuntime(repo, base) as runtime:
        return expand_pool(pool, runtime, **options)


def find(spans, file, kind=None):
    return [s for s in spans if s.file == file and (kind is None or s.kind == kind)]


@pytest.fixture
def shop(tmp_path):
    return make_repo(tmp_path / "shop-repo", {"shop/__init__.py": "", "shop/money.py": MONEY, "shop/tax.py": TAX,
                                              "shop/invoice.py": INVOICE, "shop/report.py": REPORT,
                                              "tests/test_invoice.py": TESTS})


FIXED_TAX = TAX.replace("    return round(amount * TAX_RATE, places)",
                        "    return (amount * TAX_RATE).quantize(quantum_for(places))")


def test_python_pool_expands_to_hunk_definition_caller_and_test(shop):
    repo, base = shop
    spans = expand(repo, base, [patch_of(repo, {"shop/tax.py": FIXED_TAX})] * 2)

    assert [s.kind for s in spans] == ["hunk", "definition", "definition", "caller", "test"]
    hunk = find(spans, "shop/tax.py", "hunk")
    assert [(s.start, s.end, s.reason) for s in hunk] == [
        (8, 9, "`round_tax` encloses hunk of 1 candidate (votes 2)")]

    assert [(s.start, s.end, s.reason) for s in find(spans, "shop/money.py")] == [
        (4, 5, "defines `quantum_for` used by the patch")]
    assert [(s.start, s.end, s.reason) for s in find(spans, "shop/tax.py", "definition")] == [
        (5, 5, "defines `TAX_RATE` used by the patch")]
    callers = find(spans, "shop/invoice.py")
    assert [(s.start, s.end, s.kind, s.reason) for s in callers] == [
        (8, 10, "caller", "calls `round_tax`, changed by the patch")]
    tests = find(spans, "tests/test_invoice.py")
    assert [(s.start, s.end, s.kind, s.reason) for s in tests] == [
        (9, 10, "test", "test referencing `round_tax`")]
    assert find(spans, "shop/report.py") == []  # mentions in comments and strings are not calls
    assert spans == expand(repo, base, [patch_of(repo, {"shop/tax.py": FIXED_TAX})] * 2)  # deterministic


def test_hunks_are_ordered_by_votes_and_shared_hunks_merge(shop):
    repo, base = shop
    rate_fix = TAX.replace("    return TAX_RATE\n", "    return TAX_RATE * 1\n")
    both = FIXED_TAX.replace("    return TAX_RATE\n", "    return TAX_RATE * 1\n")
    spans = expand(repo, base, [patch_of(repo, {"shop/tax.py": rate_fix})] * 3 +
                   [patch_of(repo, {"shop/tax.py": both})], max_callers=0, max_tests=0, max_symbols=0)
    hunks = [s for s in spans if s.kind == "hunk"]
    assert [(s.start, s.end) for s in hunks] == [(12, 13), (8, 9)]
    assert hunks[0].reason == "`rate` encloses hunk of 2 candidates (votes 4)"
    assert hunks[1].reason == "`round_tax` encloses hunk of 1 candidate (votes 1)"


def test_insertions_belong_to_the_definition_they_are_written_in(shop):
    repo, base = shop
    init = "        self.amounts = amounts\n"

    def hunks_of(edits):
        spans = expand(repo, base, [patch_of(repo, edits)], max_symbols=0, max_callers=0, max_tests=0)
        return [(s.file, s.start, s.end, s.kind, s.reason.split(" hunk")[0]) for s in spans]

    # a statement appended after the last line of a Python method body
    assert hunks_of({"shop/invoice.py": INVOICE.replace(init, init + "        self.paid = False\n")}) == [
        ("shop/invoice.py", 5, 6, "hunk", "`Invoice.__init__` encloses")]
    # a new method after it belongs to the class
    method = "\n    def pay(self):\n        self.paid = True\n"
    assert hunks_of({"shop/invoice.py": INVOICE.replace(init, init + method)}) == [
        ("shop/invoice.py", 4, 10, "hunk", "`Invoice` encloses")]
    # a new top-level function at the end of a module belongs to nothing
    assert hunks_of({"shop/tax.py": TAX + "\n\ndef zero():\n    return 0\n"}) == [
        ("shop/tax.py", 1, 13, "window", "lines around")]


def test_window_for_unparsed_files_and_new_or_missing_files_are_skipped(shop, tmp_path):
    repo, base = shop
    config = "\n".join(f"option_{i} = {i}" for i in range(1, 41)) + "\n"
    repo2, base2 = make_repo(tmp_path / "cfg-repo", {"setup.cfg": config, "shop/tax.py": TAX})
    edited = config.replace("option_20 = 20", "option_20 = 21")
    new_file = patch_of(repo2, {"setup.cfg": edited, "shop/discount.py": "def discount():\n    return 0\n"})
    ghost = ("--- a/shop/ghost.py\n+++ b/shop/ghost.py\n@@ -1,2 +1,2 @@\n def ghost():\n-    return 1\n"
             "+    return 2\n")
    spans = expand(repo2, base2, [new_file, ghost], window=5)
    assert [(s.file, s.start, s.end, s.kind) for s in spans] == [("setup.cfg", 15, 25, "window")]
    assert spans[0].reason == "lines around hunk of 1 candidate (votes 1)"


def test_too_common_names_are_skipped(tmp_path):
    many = "from shop.tax import log_tax\n\n" + "".join(f"def use_{i}():\n    log_tax({i})\n\n\n" for i in range(45))
    tax = "def log_tax(value):\n    return value\n\n\ndef apply(value):\n    return value\n"
    repo, base = make_repo(tmp_path / "noisy", {"shop/tax.py": tax, "shop/many.py": many,
                                                "shop/one.py": "from shop.tax import apply\n\n\ndef one():\n"
                                                                "    return apply(1)\n"})
    changes_log_tax = patch_of(repo, {"shop/tax.py": tax.replace("return value\n", "return value + 0\n", 1)})
    spans = expand(repo, base, [changes_log_tax])
    assert [(s.file, s.start, s.end, s.kind) for s in spans] == [("shop/tax.py", 1, 2, "hunk")]

    # a frequently called helper used by the patch is declared once: its definition is still found
    uses_log_tax = patch_of(repo, {"shop/tax.py": tax.replace("    return value\n", "    return log_tax(value)\n")
                                   .replace("log_tax(value)\n", "value\n", 1)})
    spans = expand(repo, base, [uses_log_tax])
    assert [(s.file, s.start, s.end, s.kind, s.reason) for s in spans] == [
        ("shop/tax.py", 5, 6, "hunk", "`apply` encloses hunk of 1 candidate (votes 1)"),
        ("shop/tax.py", 1, 2, "definition", "defines `log_tax` used by the patch"),
        ("shop/one.py", 4, 5, "caller", "calls `apply`, changed by the patch")]


def test_long_definitions_give_a_window_and_names_declared_everywhere_are_skipped(tmp_path):
    big = "def big(value):\n" + "".join(f"    value += {i}\n" for i in range(400)) + "    return value\n"
    handlers = "".join(f"class H{i}:\n    def handle(self):\n        return {i}\n\n\n" for i in range(45))
    repo, base = make_repo(tmp_path / "long", {"app/big.py": big, "app/handlers.py": handlers,
                                               "app/use.py": "from app.big import big\n\n\ndef use():\n"
                                                             "    return big(1)\n"})
    edited = big.replace("    value += 200\n", "    value += handle(200)\n")
    spans = expand(repo, base, [patch_of(repo, {"app/big.py": edited})], window=5)
    assert [(s.file, s.start, s.end, s.kind, s.reason) for s in spans] == [
        ("app/big.py", 197, 207, "window", "lines of `big` around hunk of 1 candidate (votes 1)"),
        ("app/use.py", 4, 5, "caller", "calls `big`, changed by the patch")]


def test_callers_are_shared_between_changed_functions(tmp_path):
    lib = "def first():\n    return 1\n\n\ndef second():\n    return 2\n"
    repo, base = make_repo(tmp_path / "share", {
        "lib.py": lib,
        "a.py": "from lib import first\n\n\ndef a1():\n    return first()\n\n\ndef a2():\n    return first()\n",
        "b.py": "from lib import second\n\n\ndef b1():\n    return second()\n"})
    spans = expand(repo, base, [patch_of(repo, {"lib.py": lib.replace("1", "10").replace("2", "20")})],
                   max_callers=2)
    assert [(s.file, s.start, s.kind) for s in spans if s.kind == "caller"] == [("a.py", 4, "caller"),
                                                                               ("b.py", 4, "caller")]


GO_TAX = '''\
package shop

type Rounder interface {
	Round(cents int64) int64
}

func RoundTax(amount int64) int64 {
	return amount / 5
}
'''

GO_INVOICE = '''\
package shop

type Invoice struct {
	Amounts []int64
}

func (inv *Invoice) Total() int64 {
	var sum int64
	for _, a := range inv.Amounts {
		sum += a
	}
	return sum + RoundTax(sum)
}
'''

GO_TEST = '''\
package shop

import "testing"

func TestRoundTax(t *testing.T) {
	if RoundTax(10) != 2 {
		t.Fatal("bad")
	}
}
'''


def test_go_repository(tmp_path):
    repo, base = make_repo(tmp_path / "go-repo", {"go.mod": "module shop\n", "shop/tax.go": GO_TAX,
                                                  "shop/invoice.go": GO_INVOICE, "shop/tax_test.go": GO_TEST})
    fixed = GO_TAX.replace("\treturn amount / 5\n", "\tvar r Rounder\n\treturn r.Round(amount / 5)\n")
    spans = expand(repo, base, [patch_of(repo, {"shop/tax.go": fixed})])
    assert [(s.file, s.start, s.end, s.kind, s.reason) for s in spans] == [
        ("shop/tax.go", 7, 9, "hunk", "`RoundTax` encloses hunk of 1 candidate (votes 1)"),
        ("shop/tax.go", 3, 5, "definition", "defines `Rounder` used by the patch"),
        ("shop/invoice.go", 7, 13, "caller", "calls `RoundTax`, changed by the patch"),
        ("shop/tax_test.go", 5, 9, "test", "test referencing `RoundTax`")]


def test_typescript_repository(tmp_path):
    post = ("import { send } from './client';\n\nexport const postInvoice = async (id: string) => {\n"
            "  return send(id);\n};\n")
    client = "export function send(id: string) {\n  return id;\n}\n"
    view = "import { postInvoice } from '../api/post';\n\nexport class View {\n  save() {\n" \
           "    return postInvoice('1');\n  }\n}\n"
    spec = "import { postInvoice } from '../src/api/post';\n\nit('posts', () => postInvoice('1'));\n"
    repo, base = make_repo(tmp_path / "ts-repo", {"src/api/post.ts": post, "src/api/client.js": client,
                                                  "src/ui/view.tsx": view, "test/post.spec.ts": spec})
    spans = expand(repo, base, [patch_of(repo, {"src/api/post.ts": post.replace("send(id)", "send(id.trim())")})])
    assert [(s.file, s.start, s.end, s.kind, s.reason) for s in spans] == [
        ("src/api/post.ts", 3, 5, "hunk", "`postInvoice` encloses hunk of 1 candidate (votes 1)"),
        ("src/api/client.js", 1, 3, "definition", "defines `send` used by the patch"),
        ("src/ui/view.tsx", 4, 6, "caller", "calls `postInvoice`, changed by the patch"),
        ("test/post.spec.ts", 1, 3, "test", "test referencing `postInvoice`")]


class FailingRuntime:
    """A runtime whose commands and reads all fail."""

    def __init__(self, fail_reads: bool):
        self.fail_reads = fail_reads
        self.source = TAX

    def run(self, command, timeout=60, output_limit=None):
        if "grep" in command:
            raise RuntimeError("boom")
        return CommandResult(1, "", False, 0.0, 0, 0)

    def read_file(self, path):
        if self.fail_reads:
            raise FileNotFoundError(path)
        return self.source.encode()


def test_failing_runtime_contributes_nothing(shop):
    repo, base = shop
    pool = build_pool("task", [Rollout(index=0, patch=patch_of(repo, {"shop/tax.py": FIXED_TAX}))])
    assert expand_pool(pool, FailingRuntime(fail_reads=True)) == []
    spans = expand_pool(pool, FailingRuntime(fail_reads=False))
    assert [(s.start, s.end, s.kind) for s in spans if s.kind == "hunk"] == [(8, 9, "hunk")]
    runtime = FailingRuntime(fail_reads=False)
    runtime.source = "\0binary" + "x" * 100
    assert expand_pool(pool, runtime) == []
    runtime.source = "x = 1\n" * 200_000  # over a megabyte
    assert expand_pool(pool, runtime) == []


def test_merge_spans():
    spans = [ExpansionSpan("b.py", 10, 20, "test of f", "test"),
             ExpansionSpan("a.py", 5, 8, "hunk", "hunk"),
             ExpansionSpan("b.py", 21, 25, "caller of f", "caller"),
             ExpansionSpan("b.py", 40, 50, "window", "window"),
             ExpansionSpan("a.py", 1, 4, "defines g", "definition"),
             ExpansionSpan("b.py", 15, 18, "test of f", "test")]
    assert merge_spans(spans) == [  # in the order of each merged span's first member
        ExpansionSpan("b.py", 10, 25, "caller of f; test of f", "caller"),
        ExpansionSpan("a.py", 1, 8, "hunk; defines g", "hunk"),
        ExpansionSpan("b.py", 40, 50, "window", "window")]
    assert merge_spans([]) == []


def test_a_spec_folder_is_tests_only_when_it_holds_tests(tmp_path):
    """A spec/ folder with test files in it is a test folder (its helpers too); a package's spec/ source folder is
    not."""
    helper = "from shop.tax import round_tax\n\n\ndef rounded_three():\n    return round_tax(3)\n"
    spec_test = "from spec.helpers import rounded_three\n\n\ndef test_three():\n    assert rounded_three() == 0.6\n"
    common = {"shop/__init__.py": "", "shop/tax.py": TAX}
    repo, base = make_repo(tmp_path / "with-tests", {**common, "spec/__init__.py": "", "spec/helpers.py": helper,
                                                     "spec/test_three.py": spec_test})
    spans = expand(repo, base, [patch_of(repo, {"shop/tax.py": FIXED_TAX})])
    assert {s.kind for s in find(spans, "spec/helpers.py")} == {"test"}

    repo, base = make_repo(tmp_path / "source", {**common, "shop/spec/__init__.py": "", "shop/spec/helpers.py": helper})
    spans = expand(repo, base, [patch_of(repo, {"shop/tax.py": FIXED_TAX})])
    assert {s.kind for s in find(spans, "shop/spec/helpers.py")} == {"caller"}
