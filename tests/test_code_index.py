from pipeline.senior.code_index import Definition, definitions, enclosing, identifiers, language_for, references

PY = '''\
import os
from shop.tax import round_tax

RATE = 20


class Invoice:
    """An invoice."""

    @property
    def total(self):
        subtotal = sum(line.amount for line in self.lines)
        return round_tax(subtotal * RATE, places=2)

    def add(self, line):
        def check(item):
            return item.amount > 0
        self.lines.append(line)


def make_invoice(lines):
    return Invoice(lines)
'''

GO = '''\
package billing

type Invoice struct {
	Lines []Line
}

type (
	Taxer interface{ Tax(amount int) int }
	Cents = int64
)

func (inv *Invoice) Total(t Taxer) int {
	sum := 0
	for _, line := range inv.Lines {
		sum += line.Amount
	}
	return t.Tax(RoundCents(sum))
}

func RoundCents(v int) int { return v }
'''

TS = '''\
import { Line } from "./line";

export interface Taxer {
  tax(amount: number): number;
}
type Cents = number;
enum Currency { EUR, USD }

export class Invoice {
  lines: Line[] = [];
  total(taxer: Taxer): number {
    const subtotal = this.lines.reduce((acc, l) => acc + l.amount, 0);
    return taxer.tax(roundCents(subtotal));
  }
  static empty = () => new Invoice();
}

export const roundCents = (value: number): Cents => Math.round(value);
export default function makeInvoice() { return new Invoice(); }
'''

JS = '''\
const helper = function () { return 1; };
export function post(invoice) {
  return client.send(invoice.payload);
}
class Client {
  send(payload) {
    return fetchJson(payload);
  }
}
module.exports.retry = async () => post(null);
const Klass = class {};
'''


def named(defs):
    return {(d.name, d.kind, d.start_line, d.end_line, d.parent) for d in defs}


def test_language_for():
    assert language_for("a/b.py") == "python"
    assert language_for("x.go") == "go"
    assert [language_for(f"f.{e}") for e in ("js", "mjs", "cjs", "jsx")] == ["javascript"] * 4
    assert [language_for(f"f.{e}") for e in ("ts", "mts", "cts")] == ["typescript"] * 3
    assert language_for("App.tsx") == "tsx"
    assert language_for("setup.cfg") is None and language_for("Makefile") is None
    assert language_for("dir.py/README") is None


def test_python_definitions():
    defs = definitions("shop/invoice.py", PY)
    assert named(defs) == {
        ("RATE", "variable", 4, 4, None),
        ("Invoice", "class", 7, 18, None),
        ("total", "method", 10, 13, "Invoice"),  # the decorator belongs to the definition
        ("add", "method", 15, 18, "Invoice"),
        ("check", "function", 16, 17, "add"),
        ("make_invoice", "function", 21, 22, None),
    }
    assert [d.start_line for d in defs] == sorted(d.start_line for d in defs)


def test_go_definitions():
    assert named(definitions("billing/invoice.go", GO)) == {
        ("Invoice", "struct", 3, 5, None),
        ("Taxer", "interface", 8, 8, None),
        ("Cents", "type", 9, 9, None),
        ("Total", "method", 12, 18, "Invoice"),
        ("RoundCents", "function", 20, 20, None),
    }


def test_typescript_definitions():
    expected = {
        ("Taxer", "interface", 3, 5, None),
        ("Cents", "type", 6, 6, None),
        ("Currency", "enum", 7, 7, None),
        ("Invoice", "class", 9, 16, None),
        ("total", "method", 11, 14, "Invoice"),
        ("empty", "method", 15, 15, "Invoice"),
        ("roundCents", "variable", 18, 18, None),
        ("makeInvoice", "function", 19, 19, None),
    }
    assert named(definitions("src/invoice.ts", TS)) == expected
    assert named(definitions("src/invoice.tsx", TS)) == expected


def test_javascript_definitions():
    assert named(definitions("src/post.js", JS)) == {
        ("helper", "variable", 1, 1, None),
        ("post", "function", 2, 4, None),
        ("Client", "class", 5, 9, None),
        ("send", "method", 6, 8, "Client"),
        ("retry", "function", 10, 10, None),
        ("Klass", "variable", 11, 11, None),
    }


def test_bad_or_unknown_source_gives_no_definitions():
    assert definitions("broken.py", "def (((:\n  x = \n") == []
    assert definitions("notes.txt", "def f(): pass") == []
    assert definitions("weird.go", "\x00\x01\ufffd") == []


def test_enclosing_is_innermost():
    defs = definitions("shop/invoice.py", PY)
    assert enclosing(defs, 12) == Definition("total", "method", 10, 13, "Invoice")
    assert enclosing(defs, 17).name == "check"
    assert enclosing(defs, 18).name == "add"
    assert enclosing(defs, 20) is None
    assert enclosing(defs, 8).name == "Invoice"
    assert enclosing(defs, 2) is None
    assert enclosing(definitions("a.go", GO), 15).name == "Total"


def test_identifiers_of_a_range():
    assert identifiers("shop/invoice.py", PY, 12, 13) == {"subtotal", "amount", "line", "lines", "round_tax",
                                                          "RATE", "places"}
    assert identifiers("a.go", GO, 12, 18) == {"inv", "Invoice", "Total", "Taxer", "Lines", "sum", "line", "Amount",
                                              "Tax", "RoundCents"}
    assert identifiers("a.ts", TS, 11, 13) == {"total", "taxer", "Taxer", "subtotal", "lines", "reduce", "acc",
                                              "amount", "tax", "roundCents"}
    assert identifiers("a.js", JS, 2, 4) == {"post", "invoice", "client", "send", "payload"}


def test_identifiers_skip_strings_comments_and_fall_back_to_regex():
    source = 'x = compute_total(a)  # calls compute_total\nname = "not_an_identifier"\n'
    assert identifiers("m.py", source, 1, 2) == {"compute_total", "name"}
    assert identifiers("setup.cfg", "[tool]\nmax_line_length = 120\nif ab\n", 1, 3) == {"tool", "max_line_length"}


def test_references_skip_definitions_imports_comments():
    assert references("shop/invoice.py", PY, "round_tax") == [13]
    assert references("shop/invoice.py", PY, "Invoice") == [22]
    assert references("a.go", GO, "RoundCents") == [17]
    assert references("a.ts", TS, "roundCents") == [13]
    assert references("notes.txt", "see round_tax\nround_taxes\n", "round_tax") == [1]
