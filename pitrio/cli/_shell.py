"""Bash commands as the policy sees them: the simple commands inside a command line.

The policy file's ``bash`` patterns are matched against argument vectors, not against
the command string, so this module reads command lines two ways:

- :func:`plain_argv`, for ``allow`` rules: the argument vector of a command line that is
  *one plain simple command* (literal words only: no operator, redirection,
  substitution, expansion, glob, assignment or comment), or ``None``. A strict lexer of
  our own decides, and tree-sitter-bash must read the same words (a cross-check); then
  :func:`runs_other_code` rules out the programs that run other code (``eval``,
  ``sudo``, ``bash -c``, ``xargs``, ``find -exec``, ``git -c`` ...). Without the parser
  (the ``cli`` extra) nothing is plain: allow rules for bash fail closed.
- :func:`simple_commands`, for ``deny`` rules: every simple command a command line can
  run, over-approximated. It walks the tree-sitter-bash parse (every ``command`` node,
  inside lists, pipelines, substitutions, here-documents, functions ...), adds what a
  quote-aware splitter of our own finds (a second opinion against parser differences,
  and the only one without the parser), and unwraps programs that run other commands
  (``sudo rm``, ``xargs rm``, ``bash -c "..."`` parsed again, ``find -exec``). Words it
  cannot know (``$VAR``, ``$(...)``, globs) are :data:`ONE` or :data:`MANY`, which match
  any word(s); code it cannot see (``eval "$x"``, ``sh`` reading stdin, an unparseable
  line) makes the result *opaque*: every deny rule then matches.

Why tree-sitter-bash and not bashlex: bashlex is GPL-3.0 (pitrio is MIT), has had no
release since January 2023, and raises ``NotImplementedError`` or ``ParsingError`` on
``case``, ``[[ ]]``, ``$((...))``, ``time`` and ``coproc``; tree-sitter-bash is MIT, kept
by the tree-sitter organisation, and reads all of them. It is error-tolerant, so a tree
with an error node counts as unparseable here.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final, final

import attrs

__all__ = [
    "INSTALL_HINT",
    "MANY",
    "ONE",
    "Argv",
    "Commands",
    "Dynamic",
    "parser_available",
    "plain_argv",
    "runs_other_code",
    "simple_commands",
]

INSTALL_HINT: Final = (
    "the shell parser tree-sitter-bash is not installed (pip install 'pitrio[cli]')"
)


class Dynamic(enum.Enum):
    """A word whose value is only known when the shell runs."""

    ONE = "one word"
    MANY = "any number of words"


ONE: Final = Dynamic.ONE
MANY: Final = Dynamic.MANY

Word = str | Dynamic
Argv = tuple[Word, ...]


@final
@attrs.frozen
class Commands:
    """The simple commands a command line may run; ``opaque`` says why more may run."""

    argvs: tuple[Argv, ...]
    opaque: str | None = None


_MAX_DEPTH: Final = 6

SHELLS: Final = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "mksh", "yash", "ash", "fish", "csh", "tcsh", "rbash"}
)
"""Shells: ``-c`` code is parsed again; one without a script reads code from stdin."""

WRAPPERS: Final = frozenset(
    {
        "sudo", "doas", "su", "pkexec", "runuser", "nohup", "nice", "ionice", "timeout",
        "stdbuf", "setsid", "chroot", "unshare", "nsenter", "flock", "chrt", "taskset",
        "strace", "ltrace", "fakeroot", "env", "command", "builtin", "exec", "time",
        "watch", "xargs", "parallel", "busybox", "script", "nix-shell", "systemd-run",
        "unbuffer", "caffeinate", "catchsegv", "valgrind", "torsocks", "proxychains",
        "proxychains4", "firejail", "bwrap", "sg", "newgrp", "expect",
    }
)  # fmt: skip
"""Programs that run the command in their arguments."""

_CODE_ARGS: Final = frozenset({"eval", "trap", "bind", "complete", "compgen", "mapfile"})
"""Builtins whose arguments are shell code (``trap 'rm x' EXIT``, ``complete -C cmd``)."""

_EVAL_LIKE: Final = frozenset(
    {
        "source", ".", "alias", "unalias", "let", "declare", "typeset", "local", "export",
        "readonly", "unset", "read", "readarray", "getopts", "fc", "hash", "enable",
        "shopt", "set", "coproc", "caller", "function", "select", "history", "[[", "((",
        "jobs", "wait",
    }
)  # fmt: skip
"""Builtins that run code (``jobs -x``), read variable names (``a[$(cmd)]`` runs
``cmd``: ``read``, ``wait -p``) or change how later commands are found."""

NEVER_ALLOWED: Final = SHELLS | WRAPPERS | _CODE_ARGS | _EVAL_LIKE
"""Programs an ``allow`` rule never covers, whatever it says."""

SYSTEM_BIN_DIRS: Final = ("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin")


def parser_available() -> bool:
    """Whether tree-sitter-bash can be imported (the ``cli`` extra)."""
    return _parser() is not None


@functools.cache
def _parser() -> Any:
    try:
        import tree_sitter
        import tree_sitter_bash
    except ImportError:
        return None
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def program_name(word: str) -> str:
    """``rm`` for ``/usr/bin/rm``, ``./rm`` or ``rm``."""
    return word.rsplit("/", 1)[-1] if "/" in word else word


# --------------------------------------------------------------------------------------
# allow: one plain simple command


_PLAIN_UNQUOTED: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-^~#"
)


def plain_argv(command: str) -> tuple[str, ...] | None:
    """The words of ``command`` if it is one plain simple command, else ``None``.

    Plain: words of letters, digits and ``_@%+=:,./-^~#`` (``~`` and ``#`` not first in
    a word or after ``=``/``:``, no ``=`` in the first word), ``'single-quoted'`` text,
    ``"double-quoted"`` text without ``$`` or backticks, and backslash escapes, separated
    by spaces or tabs.
    tree-sitter-bash must read the same single command; without it, ``None``.
    """
    words = _strict_words(command)
    if not words or "=" in words[0]:
        return None
    parser = _parser()
    if parser is None:
        return None
    tree = parser.parse(command.encode())
    root = tree.root_node
    if root.has_error or len(root.children) != 1 or root.children[0].type != "command":
        return None
    node = root.children[0]
    parsed: list[Word] = []
    for child in node.named_children:
        if child.type == "command_name":
            parsed.append(_word(child.named_children[0]) if child.named_children else MANY)
        elif node.field_name_for_named_child(node.named_children.index(child)) == "argument":
            parsed.append(_word(child))
        else:
            return None
    argv = tuple(words)
    return argv if tuple(parsed) == argv else None


def _strict_words(command: str) -> list[str] | None:
    """The words of a plain command (see :func:`plain_argv`), or ``None``."""
    words: list[str] = []
    current: list[str] = []
    in_word = False
    i, n = 0, len(command)
    while i < n:
        c = command[i]
        if c in " \t":
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
            i += 1
        elif c == "'":
            end = command.find(c, i + 1)
            if end < 0:
                return None
            current.append(command[i + 1 : end])
            in_word = True
            i = end + 1
        elif c == '"':
            i += 1
            while i < n and command[i] != '"':
                d = command[i]
                if d in "$`":
                    return None
                if d == "\\" and i + 1 < n:
                    following = command[i + 1]
                    if following == "\n":
                        return None
                    # only these four are escaped in double quotes; else \ is literal
                    current.append(following if following in '$`"\\' else d + following)
                    i += 2
                    continue
                current.append(d)
                i += 1
            if i >= n:
                return None
            in_word = True
            i += 1
        elif c == "\\":
            if i + 1 >= n or command[i + 1] == "\n":
                return None
            current.append(command[i + 1])
            in_word = True
            i += 2
        elif c in _PLAIN_UNQUOTED:
            # ~ expands at a word's start and after = or :, # starts a comment
            if c in "~#" and not (current and current[-1][-1:].isalnum()):
                return None
            current.append(c)
            in_word = True
            i += 1
        else:
            return None
    if in_word:
        words.append("".join(current))
    return words


def runs_other_code(argv: Sequence[str]) -> str | None:
    """Why an allow rule may not cover ``argv`` (it runs other code), or ``None``."""
    name = program_name(argv[0])
    args = argv[1:]
    if name in NEVER_ALLOWED:
        return f"{name} runs other commands or code"
    if name == "find" and any(
        a in {"-exec", "-execdir", "-ok", "-okdir", "-delete"}
        or a.startswith("-fprint")
        or a == "-fls"
        for a in args
    ):
        return "find -exec/-delete/-fprint runs commands or changes files"
    if name == "git" and any(
        a in {"-c", "--exec-path"} or a.startswith(("--config-env", "--exec-path="))
        for a in _git_global_options(args)
    ):
        return "git -c/--config-env/--exec-path can run configured commands"
    if name in {"test", "["} and any(a in {"-v", "-R"} for a in args):
        return "test -v evaluates array subscripts, which can run commands"
    if name == "printf" and "-v" in args:
        return "printf -v evaluates array subscripts, which can run commands"
    return None


def _git_global_options(args: Sequence[str]) -> Iterator[str]:
    """git's options before its subcommand."""
    takes_value = {"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--exec-path"}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        yield args[i]
        i += 2 if args[i] in takes_value - {"--exec-path"} else 1


# --------------------------------------------------------------------------------------
# deny: every simple command, over-approximated


def simple_commands(command: str) -> Commands:
    """Every simple command ``command`` may run (see the module docstring)."""
    out = _Found()
    _collect(command, out, 0)
    return Commands(tuple(out.argvs), out.opaque[0] if out.opaque else None)


_BUDGET: Final = 2000
"""Lines and commands looked at for one command line; more is opaque (no blow-up from
``sudo sudo sudo ...`` or deeply nested quoting)."""


@final
class _Found:
    """What :func:`simple_commands` has found so far."""

    __slots__ = ("argvs", "opaque", "seen", "work")

    def __init__(self) -> None:
        self.argvs: dict[Argv, None] = {}
        self.opaque: list[str] = []
        self.seen: set[object] = set()
        self.work = 0

    def add(self, argv: Argv) -> None:
        if argv:
            self.argvs.setdefault(argv)

    def first_visit(self, key: object) -> bool:
        """``False`` for something looked at before, or once the budget is spent."""
        if key in self.seen:
            return False
        self.seen.add(key)
        self.work += 1
        if self.work > _BUDGET:
            if self.work == _BUDGET + 1:
                self.opaque.append("the command is too complex to check")
            return False
        return True


def _collect(code: str, out: _Found, depth: int, *, strict: bool = True) -> None:
    """Add the commands of ``code``; ``strict``: it is surely code, so a line that does
    not parse is opaque (else, text that may be code, read as far as it goes)."""
    if depth > _MAX_DEPTH:
        out.opaque.append("commands nested too deeply to check")
        return
    if not out.first_visit(("code", code)):
        return
    parser = _parser()
    argvs: list[Argv] = []
    if parser is not None:
        tree = parser.parse(code.encode())
        if tree.root_node.has_error and strict:
            out.opaque.append("the shell parser cannot read the command")
        _walk(tree.root_node, argvs, out, depth)
    fallback = _split_commands(code)
    if fallback is None:
        if parser is None and strict:  # (with the parser, its tree is what counts)
            out.opaque.append("the command has an unterminated quote or substitution")
    elif parser is None:
        argvs.extend(fallback)
    else:  # a second opinion on the programs; their dynamic names are the parser's call
        argvs.extend(a for a in fallback if isinstance(a[0], str))
    for argv in argvs:
        _unwrap(argv, out, depth)


_ARGV_NODES: Final = frozenset({"command", "declaration_command", "unset_command"})


def _walk(node: Any, argvs: list[Argv], out: _Found, depth: int) -> None:
    """Every ``command`` under ``node`` (depth first), and code hidden in strings."""
    stack = [node]
    while stack:
        current = stack.pop()
        kind = current.type
        if kind in _ARGV_NODES:
            argvs.append(_node_argv(current))
        elif kind in {"raw_string", "ansi_c_string", "heredoc_content", "string_content"}:
            value = _word(current) if kind == "ansi_c_string" else current.text.decode()
            if isinstance(value, str) and ("$(" in value or "`" in value):
                # '... $(rm x) ...' may be code for eval, sh -c, or an array subscript
                _collect(value.strip("'"), out, depth + 1, strict=False)
        stack.extend(reversed(current.children))


def _node_argv(node: Any) -> Argv:
    if node.type == "declaration_command" or node.type == "unset_command":
        words: list[Word] = [node.children[0].text.decode()]
        words.extend(_word(c) for c in node.named_children if c.type != "variable_assignment")
        words.extend(
            f"{c.named_children[0].text.decode()}="
            for c in node.named_children
            if c.type == "variable_assignment" and c.named_children
        )
        return tuple(words)
    argv: list[Word] = []
    for index, child in enumerate(node.named_children):
        if child.type == "command_name":
            argv.append(_word(child.named_children[0]) if child.named_children else MANY)
        elif node.field_name_for_named_child(index) == "argument":
            argv.append(_word(child))
    for child in node.children:  # tree-sitter reads $"..." as "$" then a string
        if not child.is_named and child.type == "$":
            argv.append(MANY)
    return tuple(argv)


_GLOB: Final = re.compile(r"(?<!\\)[*?\[]")


def _word(node: Any) -> Word:
    """A word node's value after quote removal, or how it is dynamic."""
    kind = node.type
    text: str = node.text.decode()
    if kind == "word" or kind == "number":
        if _GLOB.search(text) or text.startswith("~") or "{" in text:
            return MANY
        return _unescape(text)
    if kind == "raw_string":
        return text[1:-1]
    if kind == "ansi_c_string":
        return _ansi_c(text[2:-1])
    if kind in {"string", "translated_string"}:
        parts: list[str] = []
        for child in node.named_children:
            if child.type != "string_content":
                return MANY  # "$@" and "${a[@]}" are many words, quotes or not
            parts.append(_unescape_double(child.text.decode()))
        return "".join(parts)
    if kind == "concatenation":
        values = [_word(c) for c in node.named_children]
        if any(isinstance(v, Dynamic) for v in values):
            return MANY
        return "".join(v for v in values if isinstance(v, str))
    if kind in {"simple_expansion", "expansion", "command_substitution"}:
        return MANY
    return ONE if kind == "process_substitution" else MANY


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _unescape_double(text: str) -> str:
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m[1] == "\n" else m[1], text)


_ANSI_SIMPLE: Final = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
    "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip
_ANSI_ESCAPE: Final = re.compile(
    r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL
)


def _ansi_c(body: str) -> Word:
    """The value of ``$'...'`` (bash's escapes); ``ONE`` for one it does not know."""
    unknown = False

    def one(m: re.Match[str]) -> str:
        nonlocal unknown
        esc = m[1]
        if esc[0] in "xuU" and len(esc) > 1:
            try:
                return chr(int(esc[1:], 16))
            except (ValueError, OverflowError):
                unknown = True
                return ""
        if esc[0] in "01234567":
            return chr(int(esc, 8) & 0xFF)
        if esc in _ANSI_SIMPLE:
            return _ANSI_SIMPLE[esc]
        unknown = True
        return ""

    value = _ANSI_ESCAPE.sub(one, body)
    return ONE if unknown else value


# --------------------------------------------------------------------------------------
# the splitter (a second opinion, and the only one without tree-sitter)

_OPERATORS: Final = frozenset(";&|(){}\n")
_KEYWORDS: Final = frozenset(
    {
        "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "in",
        "case", "esac", "select", "function", "time", "coproc", "!", "{", "}", "[[", "]]",
    }
)  # fmt: skip


_HEADERS: Final = frozenset({"case", "for", "select", "[["})
"""Keywords whose segment is no command (``for x in ...``, ``[[ ... ]]``)."""
_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")


def _split_commands(code: str) -> list[Argv] | None:
    """Quote-aware segments of ``code`` between operators, as words; ``None`` for an
    unterminated quote or substitution.

    Over-approximate by design: every ``;``, ``&``, ``|``, parenthesis, brace and newline
    ends a segment, a ``$(...)`` or backtick substitution (also inside double quotes) is
    split on its own and is :data:`MANY` in its word, redirection targets and leading
    assignments are dropped, leading keywords (``if``, ``do``, ``!`` ...) are skipped
    (``for``/``case``/``select`` headers and ``[[ ]]`` dropped), and a word with ``$``, a
    glob or a leading ``~`` in it is :data:`MANY`.
    """
    segments: list[Argv] = []
    words: list[Word] = []
    current: list[str] = []
    dynamic = False
    bracket = False  # an unquoted [, a glob if a ] follows
    in_word = False
    drop_next = False

    def end_word() -> None:
        nonlocal current, dynamic, bracket, in_word, drop_next
        if in_word:
            text = "".join(current)
            if bracket and "]" in text[text.find("[") :]:
                dynamic = True
            if drop_next:
                drop_next = False
            elif _ASSIGNMENT.match(text) and all(w in _KEYWORDS for w in words):
                pass  # VAR=value before the command
            else:
                words.append(MANY if dynamic else text)
        current, dynamic, bracket, in_word = [], False, False, False

    def end_segment() -> None:
        nonlocal words
        end_word()
        while words and words[0] in _KEYWORDS:
            words = [] if words[0] in _HEADERS else words[1:]
        if words:
            segments.append(tuple(words))
        words = []

    i, n = 0, len(code)
    in_double = False
    pending: list[tuple[str, bool, bool]] = []  # here-documents whose body comes next
    while i < n:
        c = code[i]
        if c == "`" or code.startswith("$(", i):
            close = _substitution_end(code, i)
            if close < 0:
                return None
            inner = _split_commands(code[i + (1 if c == "`" else 2) : close])
            if inner is None:
                return None
            segments.extend(inner)
            dynamic = in_word = True
            i = close + 1
            continue
        if in_double:
            if c == '"':
                in_double = False
            elif c == "\\" and i + 1 < n:
                current.append(code[i + 1])
                i += 1
            elif c == "$":
                dynamic = True
            else:
                current.append(c)
            i += 1
            continue
        if c in " \t":
            end_word()
        elif c == "'":
            end = code.find("'", i + 1)
            if end < 0:
                return None
            current.append(code[i + 1 : end])
            in_word = True
            i = end
        elif c == '"':
            in_double = in_word = True
        elif c == "\\":
            if i + 1 < n and code[i + 1] != "\n":
                current.append(code[i + 1])
                in_word = True
            i += 1
        elif c == "#" and not in_word:
            newline = code.find("\n", i)
            i = n if newline < 0 else newline
            continue
        elif code.startswith("<<", i) and not code.startswith("<<<", i):
            end_word()
            i, heredoc = _heredoc_operator(code, i)
            pending.append(heredoc)
            continue
        elif c == "\n" and pending:
            end_segment()
            for delimiter, quoted, strip in pending:
                i, body = _heredoc_body(code, i + 1, delimiter, strip)
                inner = [] if quoted else _substitutions(body)
                if inner is None:
                    return None
                segments.extend(inner)
            pending.clear()
            continue
        elif c in "<>":
            if in_word and ("".join(current).isdigit() or current == ["&"]):
                current, in_word = [], False  # 2>file: the 2 is no word
            end_word()
            while i + 1 < n and code[i + 1] in "<>&|":
                i += 1
            drop_next = True
        elif c in _OPERATORS:
            end_segment()
            drop_next = False
        else:
            if c in "$*?" or (c == "~" and not in_word):
                dynamic = True
            bracket = bracket or c == "["
            current.append(c)
            in_word = True
        i += 1
    if in_double:
        return None
    end_segment()
    return segments


def _heredoc_operator(code: str, i: int) -> tuple[int, tuple[str, bool, bool]]:
    """After ``<<`` or ``<<-`` and its delimiter word: the index, and ``(delimiter,
    quoted, strip_tabs)``."""
    i += 2
    strip = code.startswith("-", i)
    i += 1 if strip else 0
    while i < len(code) and code[i] in " \t":
        i += 1
    start = i
    while i < len(code) and code[i] not in " \t\n;&|<>()":
        i += 1
    word = code[start:i]
    quoted = any(q in word for q in "'\"\\")
    return i, (re.sub(r"[\\'\"]", "", word), quoted, strip)


def _heredoc_body(code: str, i: int, delimiter: str, strip: bool) -> tuple[int, str]:
    """The here-document body starting at ``i``, and the index after its last line."""
    lines: list[str] = []
    while i < len(code):
        newline = code.find("\n", i)
        end = len(code) if newline < 0 else newline
        line = code[i:end]
        i = end + 1
        if (line.lstrip("\t") if strip else line) == delimiter:
            return i - 1, "\n".join(lines)
        lines.append(line)
    return len(code), "\n".join(lines)


def _substitutions(text: str) -> list[Argv] | None:
    """The commands of the ``$(...)`` and backtick substitutions in ``text`` (a
    here-document body, which expands them)."""
    segments: list[Argv] = []
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "`" or text.startswith("$(", i):
            close = _substitution_end(text, i)
            inner = (
                None
                if close < 0
                else _split_commands(text[i + (1 if text[i] == "`" else 2) : close])
            )
            if inner is None:
                return None
            segments.extend(inner)
            i = close
        i += 1
    return segments


def _substitution_end(code: str, start: int) -> int:
    """Index of the backtick or parenthesis closing the substitution at ``start``."""
    if code[start] == "`":
        i = start + 1
        while i < len(code):
            if code[i] == "\\":
                i += 2
                continue
            if code[i] == "`":
                return i
            i += 1
        return -1
    depth, i, in_double = 1, start + 2, False
    while i < len(code):
        c = code[i]
        if c == "\\":
            i += 2
            continue
        if in_double:
            in_double = c != '"'
        elif c == '"':
            in_double = True
        elif c == "'":
            i = code.find("'", i + 1)
            if i < 0:
                return -1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


# --------------------------------------------------------------------------------------
# programs that run other commands


_CODE_OPTIONS: Final = frozenset({"-c", "--command", "-S", "--split-string", "-e"})
"""A wrapper's options whose value is a command line (``su -c``, ``env -S``)."""

_STREAMS: Final = ("/dev/", "/proc/")
"""Files that are a stream (``bash /dev/stdin <<< ...``), not a script on disk."""


def _unwrap(argv: Argv, out: _Found, depth: int) -> None:
    """Add ``argv``, with its program's name shortened, and the commands it runs."""
    if not argv or not out.first_visit(("argv", argv)):
        return
    first = argv[0]
    out.add(argv)
    if not isinstance(first, str):
        return  # a dynamic program name: ONE/MANY match any deny pattern already
    name = program_name(first)
    if name != first:
        out.add((name, *argv[1:]))
    args = argv[1:]
    literal = [a for a in args if isinstance(a, str)]
    if depth >= _MAX_DEPTH:
        out.opaque.append("commands nested too deeply to check")
        return
    if name in SHELLS:
        _unwrap_shell(name, args, out, depth)
    elif name == "eval" or name in _CODE_ARGS:
        if len(literal) != len(args):
            out.opaque.append(f"{name} runs code that is only known when it runs")
        _collect(" ".join(literal), out, depth + 1)
        for a in literal:
            _collect(a, out, depth + 1, strict=False)
    elif name in {"source", "."}:
        if len(literal) != len(args) or any(a.startswith(_STREAMS) for a in literal):
            out.opaque.append(f"{name} runs a file that is only known when it runs")
    elif name == "alias":
        for a in literal:
            _collect(a.partition("=")[2], out, depth + 1)
    elif name in WRAPPERS:
        if _starts_a_shell(name, literal):
            out.opaque.append(f"{name} starts a shell that reads its commands from its input")
        extend: Argv = ()
        if name in {"xargs", "parallel"}:  # the words it reads are appended or put in
            extend = (MANY,)
            args = _replaced(args, _replace_strings(name, args))
        for i in range(len(args)):
            _unwrap((*args[i:], *extend), out, depth + 1)
        for i, word in enumerate(args):
            if isinstance(word, str) and re.search(r"[\s;&|`$()<>]", word):
                code = name == "watch" or (i > 0 and args[i - 1] in _CODE_OPTIONS)
                _collect(word, out, depth + 1, strict=code)
    elif name == "find":
        _unwrap_find(args, out, depth)
    elif name == "git":
        for i, arg in enumerate(args):
            if arg == "-c" and i + 1 < len(args):
                value = args[i + 1]
                if not isinstance(value, str):
                    out.opaque.append("git -c sets configuration only known when it runs")
                else:
                    setting = value.partition("=")[2]
                    _collect(setting.lstrip("!"), out, depth + 1, strict=setting[:1] == "!")
            elif isinstance(arg, str) and arg.startswith("--config-env"):
                out.opaque.append("git --config-env takes configuration from the environment")


_SHELL_OPTION_ARGS: Final = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


def _unwrap_shell(name: str, args: Argv, out: _Found, depth: int) -> None:
    """``bash -c CODE [ARG0 ARGS]`` (CODE parsed again), ``bash SCRIPT [ARGS]``, or a shell
    reading its commands from its input (opaque)."""
    code = False
    i = 0
    while i < len(args):
        word = args[i]
        if not isinstance(word, str):
            break
        if word == "--" or word == "-":
            i += 1 if word == "--" else 0
            break
        if not word.startswith(("-", "+")):
            break
        code = code or re.fullmatch(r"-[A-Za-z]*c[A-Za-z]*", word) is not None
        if word == "-s" or (re.fullmatch(r"-[A-Za-z]+", word) and "s" in word):
            out.opaque.append(f"{name} reads the commands it runs from its input")
        i += 2 if word in _SHELL_OPTION_ARGS else 1
    if i >= len(args) or args[i] == "-":
        if not code:
            out.opaque.append(f"{name} reads the commands it runs from its input")
        return
    first = args[i]
    if not isinstance(first, str):
        out.opaque.append(f"{name} runs code that is only known when it runs")
    elif not code and first.startswith(_STREAMS):
        out.opaque.append(f"{name} reads the commands it runs from its input")
    else:  # the code (strictly), or a script's name
        _collect(first, out, depth + 1, strict=code)
    for word in args[i + 1 :]:  # $0, $1 ... for the code or script: words, maybe code
        if isinstance(word, str):
            _collect(word, out, depth + 1, strict=False)


def _replace_strings(name: str, args: Argv) -> list[str]:
    """What ``xargs -I X`` / ``-i`` / ``parallel`` replace by the words they read."""
    found = (
        ["{}"]
        if name == "parallel"
        or any(isinstance(a, str) and (a == "-i" or a.startswith("--replace")) for a in args)
        else []
    )
    for i, a in enumerate(args):
        if a == "-I" and i + 1 < len(args) and isinstance(args[i + 1], str):
            found.append(str(args[i + 1]))
        elif isinstance(a, str) and a.startswith("-I") and len(a) > 2:
            found.append(a[2:])
        elif isinstance(a, str) and a.startswith(("-i", "--replace=")) and "=" in a:
            found.append(a.partition("=")[2] or "{}")
    return [f for f in found if f]


def _replaced(args: Argv, marks: list[str]) -> Argv:
    if not marks:
        return args
    return tuple(MANY if isinstance(a, str) and any(m in a for m in marks) else a for a in args)


def _starts_a_shell(name: str, args: Sequence[str]) -> bool:
    """``sudo -s``, ``sudo -i``, ``doas -s``, ``su`` without ``-c``: an interactive shell
    (reading stdin)."""
    if name in {"sudo", "doas"}:
        return any(
            a in {"-s", "-i", "--shell", "--login"}
            or (_CLUSTER_SHORT.fullmatch(a) is not None and bool({"s", "i"} & set(a[1:])))
            for a in args
        )
    if name in {"su", "runuser"}:
        return not any(a in {"-c", "--command", "--session-command"} for a in args)
    return False


_CLUSTER_SHORT: Final = re.compile(r"-[A-Za-z]+")


def _unwrap_find(args: Argv, out: _Found, depth: int) -> None:
    i = 0
    while i < len(args):
        a = args[i]
        if a in {"-exec", "-execdir", "-ok", "-okdir"}:
            inner: list[Word] = []
            i += 1
            while i < len(args) and args[i] not in {";", "+"}:
                inner.append(MANY if args[i] == "{}" else args[i])
                i += 1
            _unwrap(tuple(inner), out, depth + 1)
        elif a == "-delete":
            out.add(("rm", "-rf", MANY))  # what find -delete amounts to
        i += 1
