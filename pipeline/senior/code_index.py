"""Tree-sitter code index: definitions, enclosing scopes, identifiers and references in one source file."""

from __future__ import annotations

import builtins
import functools
import keyword
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.errors import InfrastructureFault

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

_EXTENSIONS = {".py": "python", ".go": "go", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
               ".jsx": "javascript", ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx"}

_IDENTIFIER_TYPES = {"identifier", "field_identifier", "property_identifier", "type_identifier",
                     "shorthand_property_identifier", "shorthand_property_identifier_pattern",
                     "private_property_identifier", "package_identifier"}
_IMPORT_TYPES = {"import_statement", "import_from_statement", "future_import_statement", "import_declaration",
                 "import_spec", "import_clause"}

_JS_NOISE = set("""break case catch class const continue debugger default delete do else export extends finally for
function if import in instanceof new return super switch this throw try typeof var void while with yield let static
enum await implements package protected interface private public async get set of null undefined true false NaN
Infinity any boolean number string symbol never unknown object type namespace declare readonly abstract keyof infer
is as from constructor console window document globalThis Object Array Promise JSON Math String Number Boolean Error
TypeError Date Map Set Symbol RegExp require module exports prototype length""".split())
_GO_NOISE = set("""break case chan const continue default defer else fallthrough for func go goto if import interface
map package range return select struct switch type var any bool byte comparable complex64 complex128 error float32
float64 int int8 int16 int32 int64 rune string uint uint8 uint16 uint32 uint64 uintptr true false iota nil append cap
clear close complex copy delete imag len make max min new panic print println real recover""".split())
_PY_NOISE = set(keyword.kwlist) | set(keyword.softkwlist) | {n for n in dir(builtins) if not n.startswith("_")} | {
    "self", "cls"}
# Keywords and well-known builtins: names that never lead to a project definition.
NOISE = {"python": _PY_NOISE, "go": _GO_NOISE, "javascript": _JS_NOISE, "typescript": _JS_NOISE, "tsx": _JS_NOISE}
_ANY_NOISE = _PY_NOISE | _GO_NOISE | _JS_NOISE
_WORD = re.compile(r"[A-Za-z_$][\w$]*")


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str  # function, method, class, struct, interface, type, enum, variable
    start_line: int  # 1-based, inclusive, decorators and `export` included
    end_line: int
    parent: str | None  # enclosing class (receiver type for Go methods) or definition


def language_for(path: str) -> str | None:
    dot = path.rfind(".")
    return _EXTENSIONS.get(path[dot:].lower()) if dot > path.rfind("/") else None


@functools.cache
def _parser(language: str) -> Parser:
    from tree_sitter import Language, Parser

    if language == "python":
        import tree_sitter_python

        return Parser(Language(tree_sitter_python.language()))
    if language == "go":
        import tree_sitter_go

        return Parser(Language(tree_sitter_go.language()))
    if language == "javascript":
        import tree_sitter_javascript

        return Parser(Language(tree_sitter_javascript.language()))
    import tree_sitter_typescript

    typescript = tree_sitter_typescript
    return Parser(Language(typescript.language_tsx() if language == "tsx" else typescript.language_typescript()))


def _parse(language: str, source: str) -> Node:
    return _parser(language).parse(source.encode("utf-8", "surrogatepass")).root_node


def _text(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def _lines(node: Node) -> tuple[int, int]:
    return node.start_point[0] + 1, node.end_point[0] + 1


def definitions(path: str, source: str) -> list[Definition]:
    """Every definition in the file, nested ones included, ordered by start line; [] when unparsable."""
    language = language_for(path)
    if language is None:
        return []
    definer = {"python": _python_definition, "go": _go_definition}.get(language, _js_definition)
    try:
        found = []
        stack: list[tuple[Node, Definition | None]] = [(_parse(language, source), None)]
        while stack:
            node, parent = stack.pop()
            made = definer(node, parent)
            if made is not None:
                found.append(made)
                parent = made
            stack.extend((child, parent) for child in reversed(node.named_children))
        return sorted(found, key=lambda d: (d.start_line, -d.end_line, d.name))
    except InfrastructureFault:
        raise
    except Exception:
        return []


def _make(name_node: Node | None, kind: str, span_node: Node, parent: Definition | None,
          parent_name: str | None = None) -> Definition | None:
    name = _text(name_node)
    if not name:
        return None
    start, end = _lines(span_node)
    if parent_name is None and parent is not None:
        parent_name = parent.name
    return Definition(name, kind, start, end, parent_name)


def _python_definition(node: Node, parent: Definition | None) -> Definition | None:
    outer = node.parent if node.parent is not None and node.parent.type == "decorated_definition" else node
    if node.type == "function_definition":
        kind = "method" if parent is not None and parent.kind == "class" else "function"
        return _make(node.child_by_field_name("name"), kind, outer, parent)
    if node.type == "class_definition":
        return _make(node.child_by_field_name("name"), "class", outer, parent)
    statement = node.parent
    if node.type == "assignment" and statement is not None and statement.type == "expression_statement" and \
            statement.parent is not None and statement.parent.type == "module":
        left = node.child_by_field_name("left")
        if left is not None and left.type == "identifier":
            return _make(left, "variable", statement, parent)
    return None


def _go_definition(node: Node, parent: Definition | None) -> Definition | None:
    if node.type == "function_declaration":
        return _make(node.child_by_field_name("name"), "function", node, parent)
    if node.type == "method_declaration":
        receiver = _first(node.child_by_field_name("receiver"), "type_identifier")
        return _make(node.child_by_field_name("name"), "method", node, parent, _text(receiver) or None)
    if node.type in ("type_spec", "type_alias"):
        declaration = node.parent
        single = declaration is not None and declaration.type == "type_declaration" and \
            sum(c.type in ("type_spec", "type_alias") for c in declaration.named_children) == 1
        kind = {"struct_type": "struct", "interface_type": "interface"}.get(
            getattr(node.child_by_field_name("type"), "type", ""), "type")
        return _make(node.child_by_field_name("name"), kind,
                     declaration if single and declaration is not None else node, parent)
    return None


_JS_FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "generator_function"}
_JS_KINDS = {"function_declaration": "function", "generator_function_declaration": "function",
             "class_declaration": "class", "abstract_class_declaration": "class",
             "interface_declaration": "interface", "type_alias_declaration": "type", "enum_declaration": "enum",
             "method_definition": "method", "abstract_method_signature": "method"}


def _js_definition(node: Node, parent: Definition | None) -> Definition | None:
    kind = _JS_KINDS.get(node.type)
    if kind is not None:
        if kind == "method" and getattr(node.parent, "type", "") != "class_body":
            kind = "function"  # a method of an object literal
        return _make(node.child_by_field_name("name"), kind, _exported(node), parent)
    if node.type in ("field_definition", "public_field_definition"):
        value = node.child_by_field_name("value")
        if value is not None and value.type in _JS_FUNCTION_VALUES:
            name = node.child_by_field_name("name") or node.child_by_field_name("property")
            return _make(name, "method", node, parent)
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        name = node.child_by_field_name("name")
        if value is not None and name is not None and name.type == "identifier" and \
                (value.type in _JS_FUNCTION_VALUES or value.type == "class"):
            declaration = node.parent
            single = declaration is not None and len(
                [c for c in declaration.named_children if c.type == "variable_declarator"]) == 1
            return _make(name, "variable",
                         _exported(declaration) if single and declaration is not None else node, parent)
    if node.type == "assignment_expression" and node.parent is not None and \
            node.parent.type == "expression_statement":  # exports.f = function ..., A.prototype.m = () => ...
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is not None and left.type == "member_expression" and right is not None and \
                right.type in _JS_FUNCTION_VALUES:
            return _make(left.child_by_field_name("property"), "function", node.parent, parent)
    return None


def _exported(node: Node) -> Node:
    return node.parent if node.parent is not None and node.parent.type == "export_statement" else node


def _first(node: Node | None, node_type: str) -> Node | None:
    stack = [node] if node is not None else []
    while stack:
        current = stack.pop()
        if current.type == node_type:
            return current
        stack.extend(reversed(current.named_children))
    return None


def enclosing(defs: list[Definition], line: int) -> Definition | None:
    """The innermost definition containing ``line``."""
    containing = [d for d in defs if d.start_line <= line <= d.end_line]
    return min(containing, key=lambda d: (d.end_line - d.start_line, -d.start_line), default=None)


def identifiers(path: str, source: str, start_line: int, end_line: int) -> set[str]:
    """Names used in the line range (calls, attributes, types), without keywords, builtins and 1-2 letter names."""
    language = language_for(path)
    if language is not None:
        try:
            names = {_text(n).lstrip("#") for n in _identifier_nodes(_parse(language, source), start_line, end_line)}
            return {n for n in names if len(n) > 2 and n not in NOISE[language]}
        except InfrastructureFault:
            raise
        except Exception:
            pass
    lines = source.split("\n")[max(start_line - 1, 0):max(end_line, 0)]
    return {w for w in _WORD.findall("\n".join(lines)) if len(w) > 2 and w not in _ANY_NOISE}


def _identifier_nodes(root: Node, start_line: int, end_line: int) -> Iterator[Node]:
    stack = [root]
    while stack:
        node = stack.pop()
        first, last = _lines(node)
        if last < start_line or first > end_line:
            continue
        if node.type in _IDENTIFIER_TYPES and start_line <= first <= end_line:
            yield node
        stack.extend(reversed(node.named_children))


def references(path: str, source: str, name: str) -> list[int]:
    """Lines that use ``name`` in code: not where it is defined or imported, nor in comments and strings.

    Files without a parser fall back to whole-word matches.
    """
    language = language_for(path)
    lines = source.split("\n")
    if language is not None:
        try:
            found = {_lines(n)[0] for n in _identifier_nodes(_parse(language, source), 1, len(lines))
                     if _text(n) == name and not _defines_or_imports(n)}
            return sorted(found)
        except InfrastructureFault:
            raise
        except Exception:
            pass
    word = re.compile(rf"(?<![\w$]){re.escape(name)}(?![\w$])")
    return [number for number, text in enumerate(lines, 1) if word.search(text)]


def _defines_or_imports(node: Node) -> bool:
    parent = node.parent
    if parent is not None and parent.child_by_field_name("name") == node and (
            parent.type.endswith(("definition", "declaration", "declarator", "spec", "signature")) or
            parent.type in ("type_alias", "method_elem", "method_spec")):
        return True
    while parent is not None:
        if parent.type in _IMPORT_TYPES:
            return True
        parent = parent.parent
    return False
