"""SWE-agent's windowed tools, for a replay: run with python3 inside the task's container (never imported by swepipe;
``windowed`` builds the commands that write and run it). Written from the tools' definitions, not their code:

- generation 0 (SWE-agent 0.x, config/commands/defaults.sh and edit_linting.sh): the window's ``CURRENT_LINE`` is its
  middle line (1-based), kept between half a window from either end; ``edit`` writes every line with a newline
  after it (bash's mapfile and printf); ``create`` writes one empty line, or opens a file that exists.
- generation 1 (SWE-agent 1.x, tools/windowed, windowed_edit_linting, windowed_edit_replace, windowed_edit_rewrite):
  the window's ``FIRST_LINE`` is its top line (0-based), kept between 0 and the file's line count less a window;
  ``goto N`` puts line N a sixth of a window below the top; ``edit`` splits and joins the text at newlines, so a
  file's last newline stays as it was; ``create`` makes an empty file and refuses one that exists.

Both: WINDOW lines shown (100 unless the trajectory's config says), OVERLAP lines kept by a scroll; the open file
and the window kept in a state file between calls, as SWE-agent keeps them between its tools' calls. An edit the
recorded run's linter turned back (its observation says so) is shown and not written: this script runs no linter.

Usage: python3 windowed_tools.py GENERATION WINDOW OVERLAP TOOL [ARGUMENT ...]; text arguments (edit, insert) come
base64-encoded, so file contents reach the file byte for byte; ``--not-applied`` before TOOL marks a turned-back
edit.
"""

import base64
import json
import math
import os
import subprocess
import sys

STATE = os.environ.get("SWEPIPE_WINDOW_STATE", "/tmp/.swepipe-swe-agent-window.json")  # tests keep theirs apart


def load_state():
    try:
        with open(STATE) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def save_state(state):
    with open(STATE, "w") as handle:
        json.dump(state, handle)


def read(path):
    with open(path, newline="") as handle:
        return handle.read()


def write(path, text):
    with open(path, "w", newline="") as handle:
        handle.write(text)


def decoded(argument):
    return base64.b64decode(argument.encode("ascii")).decode("utf-8", "surrogateescape")


class Window:
    def __init__(self, generation, window, overlap):
        self.generation, self.window, self.overlap = generation, window, overlap
        self.state = load_state()

    # -- the open file ----------------------------------------------------------------------------------------

    def current(self):
        path = self.state.get("file") or ""
        if not path:
            fail("No file open. Use the open command first.")
        return path

    def count_lines(self, path):
        text = read(path)
        if self.generation == 0:  # awk's NR: a last line without its newline counts
            return text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        return len(text.splitlines())

    def set_line(self, value):
        path = self.current()
        total = self.count_lines(path)
        if self.generation == 0:
            half = math.floor(self.window / 2)
            value = max(min(value, total - half), half)
        else:
            value = max(0, min(int(value), total - self.window))
        self.state["line"] = value
        save_state(self.state)

    def line(self):
        default = self.window / 2 if self.generation == 0 else 0
        return self.state.get("line", default)

    def bounds(self, path):
        """The first and last line shown, 0-based and inclusive."""
        total = self.count_lines(path)
        if self.generation == 0:
            last = max(math.floor(self.line() + self.window / 2), math.floor(self.window / 2))
            first = max(last - self.window, 0)
            return first, min(last, total) - 1
        first = int(self.line())
        return first, min(first + self.window - 1, total - 1)

    def show(self):
        path = self.current()
        lines = read(path).split("\n")
        total = self.count_lines(path)
        first, last = self.bounds(path)
        print("[File: %s (%d lines total)]" % (path, total))
        if first > 0:
            print("(%d more lines above)" % first)
        for number in range(first, last + 1):
            if number < len(lines):
                print("%d:%s" % (number + 1, lines[number]))
        if last < total - 1:
            print("(%d more lines below)" % (total - last - 1))

    def goto_line(self, number):
        """The window moved to show 1-based line ``number`` as the generation's goto does."""
        if self.generation == 0:
            self.set_line(max(math.floor(number + self.window / 2 - math.floor(self.window / 6)), 1))
        else:
            self.set_line(int((number - 1) - self.window / 6))

    # -- the tools ----------------------------------------------------------------------------------------------

    def open(self, path=None, number=None):
        if path is None:
            self.show()
            return
        if os.path.isdir(path):
            fail("Error: %s is a directory. You can only open files. Use cd or ls to navigate directories." % path)
        if not os.path.exists(path):
            fail("File %s not found" % path if self.generation == 0 else "Error: File %s not found" % path)
        self.state["file"] = os.path.realpath(path)
        save_state(self.state)
        total = self.count_lines(path)
        if number is not None:
            wanted = int(number)
            if wanted > total:
                wanted = total
            elif wanted < 1:
                wanted = 1
            elif self.generation == 0:
                self.goto_line(wanted)
                self.show()
                return
            if self.generation == 0:
                self.set_line(wanted)
            else:
                self.goto_line(wanted)
        elif self.generation == 0:
            self.set_line(self.window / 2)
        else:
            self.set_line(self.line())  # the window's top as it was, kept within this file
            self.goto_line(int(self.line()))
        self.show()

    def goto(self, number):
        total = self.count_lines(self.current())
        if int(number) > total:
            fail("Error: <line> must be less than or equal to %d" % total)
        self.goto_line(int(number))
        self.show()

    def scroll(self, direction):
        step = self.window - self.overlap
        self.set_line(self.line() + direction * step)
        self.show()

    def create(self, path):
        if os.path.exists(path):
            if self.generation == 0:
                print("Error: File '%s' already exists." % path)
                self.open(path)
                return
            fail("Warning: File '%s' already exists." % path)
        parent = os.path.dirname(path)
        if parent and self.generation == 1:
            os.makedirs(parent, exist_ok=True)
        write(path, "\n" if self.generation == 0 else "")
        self.open(path)
        if self.generation == 1:
            self.set_line(0)

    def edit_range(self, start, end, text, applied):
        """Lines ``start`` to ``end`` (1-based, inclusive) replaced by the lines of ``text`` (each ended by a newline,
        as the heredoc held them); generation 1 joins them and splits again, so one empty line is none."""
        path = self.current()
        replacement = text.split("\n")[:-1] if text else []
        if self.generation == 1:
            joined = "\n".join(replacement)
            replacement = joined.split("\n") if joined else []
        old = read(path)
        if self.generation == 0:  # mapfile's lines, each written back with a newline
            lines = old.split("\n")
            if old.endswith("\n"):
                lines.pop()
            new_lines = lines[:max(start - 1, 0)] + replacement + lines[end:]
            new = "".join(line + "\n" for line in new_lines) or "\n"
        else:
            lines = old.split("\n")
            lines[start - 1:end] = replacement
            new = "\n".join(lines)
        self.finish_edit(path, new, applied, start - 1)

    def edit_replace(self, search, replace, replace_all, applied):
        path = self.current()
        old = read(path)
        if search == replace:
            fail("Your search and replace strings are the same. No changes were made.")
        if replace_all:
            if search not in old:
                fail("Your edit was not applied (file not modified): Text %r not found." % search)
            self.finish_edit(path, old.replace(search, replace), applied, len(old[:old.index(search)].split("\n")))
            return
        lines = old.split("\n")
        first, last = self.bounds(path)
        shown = "\n".join(lines[first:last + 1])
        if shown.count(search) > 1:
            fail("Your edit was not applied (file not modified): Found more than one occurrence of %r in the "
                 "currently displayed lines." % search)
        index = shown.find(search)
        if index == -1:
            fail("Your edit was not applied (file not modified): Text %r not found in displayed lines." % search)
        changed = shown.replace(search, replace)
        lines[first:last + 1] = changed.split("\n") if changed else []
        self.finish_edit(path, "\n".join(lines), applied, first + len(shown[:index].split("\n")) - 1)

    def edit_rewrite(self, text, applied):
        path = self.current()
        lines = read(path).split("\n")
        first, last = self.bounds(path)
        lines[first:last + 1] = text.split("\n") if text else []
        self.finish_edit(path, "\n".join(lines), applied, None)

    def insert(self, text, number, applied):
        path = self.current()
        old = read(path)
        if not text:
            self.show()
            return
        text = text[:-1] if text.endswith("\n") else text
        if number is None:
            new = text if not old else (old[:-1] if old.endswith("\n") else old) + "\n" + text
            at = self.count_lines(path)
        elif number < 0:
            new = text if not old else text + "\n" + (old[1:] if old.startswith("\n") else old)
            at = 0
        else:
            lines = old.split("\n")
            lines.insert(number, text)
            new, at = "\n".join(lines), number
        self.finish_edit(path, new, applied, at)

    def finish_edit(self, path, new, applied, top):
        """Write the edit (unless the recorded run's linter turned it back) and move the window as the tool does:
        generation 0 to the edit's first line as its middle, generation 1 a sixth of a window above it."""
        if not applied:
            print("This edit was not applied in the recorded run (its linter turned it back): not applied here.")
            self.show()
            return
        write(path, new)
        if top is not None:
            if self.generation == 0:
                self.set_line(top)
            else:
                self.set_line(int(top - self.window / 6))
        print("File updated.")
        self.show()


def search_dir(term, folder="./"):
    if not os.path.isdir(folder):
        fail("Directory %s not found" % folder)
    folder = os.path.realpath(folder)
    found = subprocess.run(["sh", "-c", 'find "$1" -type f ! -path "*/.*" -exec grep -nIH -- "$2" {} + | cut -d: -f1 '
                            '| sort | uniq -c', "search_dir", folder, term], stdout=subprocess.PIPE,
                           universal_newlines=True).stdout
    if not found.strip():
        print('No matches found for "%s" in %s' % (term, folder))
        return
    print('Matches for "%s" in %s:' % (term, folder))
    print(found, end="")


def search_file(window, term, path=None):
    if path is not None and not os.path.isfile(path):
        fail("Error: File name %s not found. Please provide a valid file name." % path)
    path = os.path.realpath(path if path is not None else window.current())
    found = subprocess.run(["grep", "-nH", "--", term, path], stdout=subprocess.PIPE,
                           universal_newlines=True).stdout
    print(found if found.strip() else 'No matches found for "%s" in %s' % (term, path), end="\n")


def find_file(name, folder="./"):
    if not os.path.isdir(folder):
        fail("Directory %s not found" % folder)
    folder = os.path.realpath(folder)
    found = subprocess.run(["find", folder, "-type", "f", "-name", name], stdout=subprocess.PIPE,
                           universal_newlines=True).stdout
    print(found if found.strip() else 'No matches found for "%s" in %s' % (name, folder), end="\n")


def fail(message):
    print(message)
    sys.exit(1)


def main(arguments):
    applied = "--not-applied" not in arguments
    arguments = [argument for argument in arguments if argument != "--not-applied"]
    generation, window_size, overlap, tool, rest = (int(arguments[0]), int(arguments[1]), int(arguments[2]),
                                                    arguments[3], arguments[4:])
    window = Window(generation, window_size, overlap)
    if tool == "open":
        window.open(*rest[:2])
    elif tool == "goto":
        window.goto(rest[0])
    elif tool in ("scroll_up", "scroll_down"):
        window.scroll(-1 if tool == "scroll_up" else 1)
    elif tool == "create":
        window.create(rest[0])
    elif tool == "edit_range":
        window.edit_range(int(rest[0]), int(rest[1]), decoded(rest[2]), applied)
    elif tool == "edit_replace":
        window.edit_replace(decoded(rest[0]), decoded(rest[1]), rest[2] == "1", applied)
    elif tool == "edit_rewrite":
        window.edit_rewrite(decoded(rest[0]), applied)
    elif tool == "insert":
        window.insert(decoded(rest[0]), int(rest[1]) if len(rest) > 1 else None, applied)
    elif tool == "search_dir":
        search_dir(*rest[:2])
    elif tool == "search_file":
        search_file(window, *rest[:2])
    elif tool == "find_file":
        find_file(*rest[:2])
    else:
        fail("unknown tool %s" % tool)


if __name__ == "__main__":
    main(sys.argv[1:])
