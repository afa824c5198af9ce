"""The documentation against the binary (issue 36): README.md and doc/*.md.

- Every `docfs SUBCOMMAND ... --option` they show (in fenced code blocks and in inline code)
  names a subcommand `docfs --help` lists and options its `--help` documents; the options
  table of `docfs mount` (a table headed `| Option | Meaning |`) holds only options of
  `docfs mount`, and every mount option given with `-o` (or on an fstab line of type
  fuse.docfs) is one of its long options or a mount option docfs passes on or ignores.
- Every relative link leads to a file that exists (and to a heading that exists, for a link
  with a `#fragment` into a Markdown file).
- Every fenced example marked with the line `<!-- runs against the demo store -->` right
  before its fence runs with bash, exit status 0, against a real mount of the demo store
  (`Tests/support/make-demo-store.py`) served by `docfs serve`, with `Mount` standing for the
  mount point and `docfs` for the binary under test.
- The README stays short: at most 170 lines.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, docfs_bin

DOCS = [REPO / "README.md", *sorted((REPO / "doc").glob("*.md"))]
MARKER = "<!-- runs against the demo store -->"
README_MAX_LINES = 170

# Mount options that are not long options of `docfs mount`: what mount(8), fstab, systemd and
# libfuse take, which docfs passes on to FUSE or ignores (see doc/configuration.md).
PASSED_ON_OR_IGNORED = {
    "ro", "rw", "allow_root", "nosuid", "suid", "nodev", "dev", "noexec", "exec", "noatime", "atime",
    "relatime", "norelatime", "strictatime", "nostrictatime", "nodiratime", "diratime", "lazytime",
    "fsname", "subtype", "noauto", "auto", "_netdev", "nofail", "user", "users", "nouser", "owner",
    "comment", "setuid", "defaults", "sync", "async", "default_permissions",
}


# --- reading the Markdown ------------------------------------------------------------------

@dataclasses.dataclass
class Fence:
    doc: Path
    line: int          # 1-based line of the opening fence
    info: str          # what follows the opening backticks (sh, ini, ...)
    text: str          # the content, dedented by the fence's own indentation
    runs: bool         # marked `<!-- runs against the demo store -->`


@dataclasses.dataclass
class Doc:
    path: Path
    fences: list[Fence]
    prose: str         # everything outside fences, fences blanked out (line numbers kept)

    @property
    def name(self) -> str:
        return str(self.path.relative_to(REPO))

    def inline_code(self) -> list[tuple[int, str]]:
        """(line, text) of every inline code span of the prose, a span's line breaks as spaces."""
        spans = []
        for m in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", self.prose, re.DOTALL):
            if "\n\n" in m.group(2):
                continue  # not a span: an unmatched backtick ran into the next paragraph
            spans.append((self.prose.count("\n", 0, m.start()) + 1, " ".join(m.group(2).split())))
        return spans


@functools.lru_cache(maxsize=None)
def read_doc(path: Path) -> Doc:
    lines = path.read_text(encoding="utf-8").splitlines()
    fences: list[Fence] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(`{3,}|~{3,})(.*)$", lines[i])
        if not opening:
            prose.append(lines[i])
            i += 1
            continue
        indent, marker, info = opening.group(1), opening.group(2), opening.group(3).strip()
        start = i
        body = []
        i += 1
        while i < len(lines) and not re.match(rf"^\s*{re.escape(marker[0])}{{{len(marker)},}}\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        assert i < len(lines), f"{path.name}:{start + 1}: a fence that is never closed"
        i += 1
        runs = start > 0 and lines[start - 1].strip() == MARKER
        fences.append(Fence(path, start + 1, info, "\n".join(body) + "\n", runs))
        prose.extend([""] * (i - start))
    return Doc(path, fences, "\n".join(prose))


def all_docs() -> list[Doc]:
    return [read_doc(path) for path in DOCS]


# --- what the binary says ------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def help_text(*command: str) -> str:
    result = subprocess.run([docfs_bin(), *command, "--help"], capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"docfs {' '.join(command)} --help exited {result.returncode}: {result.stderr}"
    return result.stdout


@functools.lru_cache(maxsize=None)
def subcommands() -> frozenset[str]:
    text = help_text()
    section = text.split("SUBCOMMANDS:", 1)[1]
    names = re.findall(r"^  ([a-z][a-z-]*)\s", section, re.MULTILINE)
    assert names, f"no subcommands found in `docfs --help`:\n{text}"
    return frozenset(names)


def documents(help: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help) is not None


def long_options_of_mount() -> set[str]:
    return set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", help_text("mount")))


# --- commands and options named in the docs ------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Mention:
    where: str         # doc:line
    subcommand: str    # "" for `docfs --help`
    options: tuple[str, ...]
    text: str


COMMAND = re.compile(r"(?<![\w.-])docfs[ \t]+(\S.*)")


def without_comment(line: str) -> str:
    return re.sub(r"(^|\s)(#|//).*$", "", line)


def mentions_in(text: str, where: str) -> list[Mention]:
    """The docfs commands in one line of a code block or one inline code span."""
    found = []
    for m in COMMAND.finditer(text):
        tokens = []
        for token in m.group(1).split():
            if token in ("|", "||", "&&", ";", ">", "<", "2>&1"):
                break
            tokens.append(token)
            if token.endswith(";"):
                break
        if not tokens:
            continue
        first = tokens[0]
        if first.startswith("-"):
            subcommand, rest = "", tokens
        elif re.fullmatch(r"[A-Z][A-Z_]*", first):
            subcommand, rest = "mount", tokens[1:]      # mount(8)'s form: docfs STORE MOUNTPOINT -o ...
        else:
            subcommand, rest = first.rstrip(";,:.)"), tokens[1:]
        options = []
        for token in rest:
            token = token.strip("[](),;'\"`")
            if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", token):
                options.append(token.split("=", 1)[0])
            elif re.fullmatch(r"-[a-zA-Z]", token):
                options.append(token)
        found.append(Mention(where, subcommand, tuple(options), m.group(0).strip()))
    return found


def all_mentions() -> list[Mention]:
    mentions = []
    for doc in all_docs():
        for fence in doc.fences:
            if fence.info == "text":
                continue  # a diagram or an output, not commands
            for n, line in enumerate(fence.text.splitlines()):
                mentions += mentions_in(without_comment(line), f"{doc.name}:{fence.line + 1 + n}")
        for line, span in doc.inline_code():
            mentions += mentions_in(span, f"{doc.name}:{line}")
    return mentions


def options_tables() -> list[tuple[str, list[tuple[str, str]]]]:
    """The tables of `docfs mount`'s options (headed `| Option | Meaning |`): (where, rows)."""
    tables = []
    for doc in all_docs():
        lines = doc.prose.splitlines()
        for i, line in enumerate(lines):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells == ["Option", "Meaning"]:
                rows = []
                for row in lines[i + 2:]:
                    if not row.startswith("|"):
                        break
                    first, _, meaning = row.strip().strip("|").partition("|")
                    rows.append((first, meaning))
                tables.append((f"{doc.name}:{i + 1}", rows))
    return tables


def mount_option_lists() -> list[tuple[str, str]]:
    """(where, "a,b=c,...") for every `-o LIST` in the docs and every fstab line of docfs."""
    lists = []
    for doc in all_docs():
        texts = [(f"{doc.name}:{line}", span) for line, span in doc.inline_code()]
        for fence in doc.fences:
            for n, line in enumerate(fence.text.splitlines()):
                where = f"{doc.name}:{fence.line + 1 + n}"
                fields = without_comment(line).split()
                if fence.info == "" and len(fields) in (4, 5, 6) and fields[2] in ("fuse.docfs", "docfs"):
                    lists.append((where, fields[3]))
                texts.append((where, without_comment(line)))
        for where, text in texts:
            for m in re.finditer(r"(?<![\w-])-o[ \t]+([^\s`]+)", text):
                lists.append((where, m.group(1)))
    return lists


# --- the tests -----------------------------------------------------------------------------

def test_the_docs_are_there():
    names = {path.name for path in DOCS}
    for name in ("README.md", "semantics.md", "configuration.md", "servers.md", "desktop.md",
                 "performance.md", "architecture.md"):
        assert name in names, f"{name} is missing (looked at {sorted(names)})"


def test_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {README_MAX_LINES}: move the details to doc/")


def test_every_command_and_option_shown_exists():
    mentions = all_mentions()
    assert len(mentions) >= 30, f"only {len(mentions)} docfs commands found in the docs: is the parser blind?"
    seen = {m.subcommand for m in mentions}
    for subcommand in ("mount", "unmount", "serve", "status", "pin", "unpin", "evict"):
        assert subcommand in seen, f"no doc shows `docfs {subcommand}`"
    problems = []
    for mention in mentions:
        if mention.subcommand and mention.subcommand not in subcommands():
            problems.append(f"{mention.where}: `{mention.text}`: docfs has no subcommand "
                            f"{mention.subcommand!r} (it has {', '.join(sorted(subcommands()))})")
            continue
        command = (mention.subcommand,) if mention.subcommand else ()
        for option in mention.options:
            if not documents(help_text(*command), option):
                problems.append(f"{mention.where}: `{mention.text}`: `docfs {' '.join(command)} --help` "
                                f"does not document {option}")
    assert not problems, "\n".join(problems)


def test_the_options_table_holds_options_of_docfs_mount():
    tables = options_tables()
    assert tables, "no table headed `| Option | Meaning |` in the docs"
    help = help_text("mount")
    problems = []
    count = 0
    for where, rows in tables:
        for first, meaning in rows:
            named = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])", first)
            assert named, f"{where}: a row of the options table names no option: {first}"
            in_meaning = [m.group(1) for m in re.finditer(r"`(--[a-z][a-z0-9-]*)[^`]*`", meaning)]
            for option in named + in_meaning:
                count += 1
                if not documents(help, option):
                    problems.append(f"{where}: {option} is in the options table but not in `docfs mount --help`")
    assert count >= 30, f"only {count} options found in the options table"
    # and every option of `docfs mount` is in the table
    table_options = {o.lstrip("-") for _, rows in tables for first, _ in rows
                     for o in re.findall(r"--([a-z][a-z0-9-]*)", first)}
    missing = long_options_of_mount() - table_options - {"help", "version"}
    problems += [f"`docfs mount --{name}` is missing from the options table" for name in sorted(missing)]
    assert not problems, "\n".join(problems)


def test_every_mount_option_maps_to_a_long_option():
    lists = mount_option_lists()
    in_table = [(where, value) for where, value in lists if "cache_dir" in value]
    assert in_table, "the options table's `-o` example (`-o cache_dir=DIR,...`) was not found"
    long_options = long_options_of_mount()
    problems = []
    for where, value in lists:
        for option in value.split(","):
            name = option.split("=", 1)[0]
            if not name or re.fullmatch(r"[A-Z][A-Z_]*", name) or name.rstrip(".") == "":
                continue  # a placeholder (OPTIONS) or an ellipsis
            if name in PASSED_ON_OR_IGNORED or name.startswith("x-systemd."):
                continue
            if name.replace("_", "-") not in long_options:
                problems.append(f"{where}: mount option {name!r} (in {value!r}) is no long option of `docfs mount`")
    assert not problems, "\n".join(problems)


def heading_anchors(doc: Doc) -> set[str]:
    """The anchors GitHub makes of a document's headings."""
    anchors: set[str] = set()
    for line in doc.prose.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = m.group(1).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in anchors:
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def test_every_relative_link_leads_somewhere():
    problems = []
    count = 0
    for doc in all_docs():
        for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", doc.prose):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            count += 1
            line = doc.prose.count("\n", 0, m.start()) + 1
            file_part, _, fragment = target.partition("#")
            path = (doc.path.parent / file_part).resolve() if file_part else doc.path
            if not path.exists():
                problems.append(f"{doc.name}:{line}: link to {target}: {path} does not exist")
                continue
            if fragment and path.suffix == ".md" and fragment not in heading_anchors(read_doc(path)):
                problems.append(f"{doc.name}:{line}: link to {target}: {path.name} has no heading #{fragment}")
    assert count >= 20, f"only {count} relative links found in the docs"
    assert not problems, "\n".join(problems)


def runnable_fences() -> list[Fence]:
    return [fence for doc in all_docs() for fence in doc.fences if fence.runs]


def test_marked_examples_are_shell():
    fences = runnable_fences()
    assert len(fences) >= 3, f"only {len(fences)} examples are marked {MARKER!r}"
    assert any(f.doc.name == "README.md" for f in fences), "no example of the README is marked to run"
    for fence in fences:
        assert fence.info in ("", "sh", "bash", "shell"), f"{fence.doc.name}:{fence.line}: a marked example is {fence.info!r}, not shell"


@pytest.mark.fuse
def test_marked_examples_run_against_the_demo_store(tmp_path, xdg, docfs_serve, mount):
    store = tmp_path / "demo-store"
    subprocess.run([sys.executable, str(REPO / "Tests" / "support" / "make-demo-store.py"), str(store)],
                   check=True, capture_output=True, timeout=60)
    server = docfs_serve(store)
    m = mount(server.url)

    # `docfs` in an example is the binary under test.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docfs").symlink_to(docfs_bin())
    env = dict(xdg.env, PATH=f"{bin_dir}{os.pathsep}{xdg.env.get('PATH', '/usr/bin:/bin')}", TERM="dumb")

    failures = []
    fences = runnable_fences()
    assert fences, f"no example is marked {MARKER!r}"
    for fence in fences:
        script = re.sub(r"\bMount\b", lambda _: shlex.quote(str(m.path)), fence.text)
        try:
            result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], capture_output=True, text=True,
                                    env=env, cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            failures.append(f"{fence.doc.name}:{fence.line}: did not finish within 60 s:\n{script}")
            continue
        print(f"--- {fence.doc.name}:{fence.line}\n{script}{result.stdout}{result.stderr}")
        if result.returncode != 0:
            failures.append(f"{fence.doc.name}:{fence.line}: exited {result.returncode}\n{script}"
                            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    assert not failures, "\n\n".join(failures) + f"\n\ndocfs log:\n{m.log_tail()}"
