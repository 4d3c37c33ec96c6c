"""What an installed vLLM release can be configured with, read from its source.

Runs on the target host (the ``vllm_facts`` module imports it from the client
venv), so it keeps to the standard library and Python 3.9. It never imports
vLLM: the release's ``SpeculativeConfig`` source is parsed with :mod:`ast`,
so reading a release costs no GPU, no import time and no side effects.

* :func:`speculative_config_fields` lists the annotated fields of
  ``SpeculativeConfig``: the keys ``--speculative-config`` takes. Current
  releases keep the class in ``vllm/config/speculative.py``; vLLM 0.6 to 0.9
  kept it in ``vllm/config.py`` (before 0.8 it was a plain class whose
  settings were ``__init__`` arguments, so it declares no fields).
* :func:`batch_size_schedule_support` says whether the release can draft by
  batch size (``num_speculative_tokens_per_batch_size``, vLLM 0.31.0 and
  0.32.0), and why in plain words.

The client venv's Python may be older than the release's (a 3.9 client beside
a 3.12 vLLM): when the whole file does not parse here, the class's field
declarations are parsed alone, without its methods.
"""

from __future__ import annotations

import ast
import glob
import os
import sys
import textwrap
from typing import Any

__all__ = [
    "SCHEDULE_KEY",
    "batch_size_schedule_support",
    "release_facts",
    "speculative_config_fields",
]

#: vLLM's batch-size schedule of the draft length; the same string as
#: ``benchgate.ab.SCHEDULE_KEY`` (not imported: this module stays standard-library only).
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

CLASS_NAME = "SpeculativeConfig"
# Where the class lives in a release venv, newest layout first.
_SOURCES = ("vllm/config/speculative.py", "vllm/config.py")
# Annotations that declare no dataclass field.
_NOT_FIELDS = frozenset({"ClassVar", "InitVar"})


def _site_packages(release_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(release_dir, "lib", "python3*", "site-packages")))


def _annotation_name(node: ast.expr) -> str | None:
    """``ClassVar`` of ``ClassVar[int]``, ``typing.ClassVar[int]`` or a bare ``ClassVar``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _fields_of(cls: ast.ClassDef) -> set[str]:
    return {
        stmt.target.id
        for stmt in cls.body
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and _annotation_name(stmt.annotation) not in _NOT_FIELDS
    }


def _find_class(tree: ast.AST) -> ast.ClassDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == CLASS_NAME:
            return node
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _class_declarations(text: str) -> str | None:
    """The class's header and body without its methods and nested classes, or None
    when the file has no top-level ``class SpeculativeConfig``.

    For a file that this Python cannot parse as a whole: field declarations use
    the oldest syntax (names, annotations, defaults), methods may not.
    """
    lines = text.splitlines()
    start = next(
        (
            i
            for i, line in enumerate(lines)
            if line.startswith(f"class {CLASS_NAME}(") or line.startswith(f"class {CLASS_NAME}:")
        ),
        None,
    )
    if start is None:
        return None
    out = [f"class {CLASS_NAME}:"]
    i = start
    # The header may run over several lines (its bases); it ends with the colon.
    while i + 1 < len(lines) and not lines[i].split("#")[0].rstrip().endswith(":"):
        i += 1
    body_indent: int | None = None
    skipping = False
    for line in lines[i + 1 :]:
        if not line.strip():
            out.append("")
            continue
        indent = _indent(line)
        if indent == 0 and not line.startswith(("#", ")", "]", '"""', "'''")):
            break  # the next top-level statement
        if body_indent is None:
            body_indent = indent
        word = line.strip()
        if indent == body_indent and word.startswith(("def ", "async def ", "class ", "@")):
            skipping = True
        elif indent == body_indent and skipping and word[0] in ")]":
            pass  # the end of a signature written over several lines
        elif indent <= body_indent:
            skipping = False
        if not skipping:
            out.append(line)
    out.append(" " * (body_indent or 4) + "pass")
    return "\n".join(out) + "\n"


def _parse_fields(path: str) -> set[str] | None:
    """The fields of ``SpeculativeConfig`` in the file at ``path``; None when it has no such class.

    Raises ValueError when the file cannot be read or parsed.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as whole:
        declarations = _class_declarations(text)
        if declarations is None:
            raise ValueError(
                f"cannot parse {path} with Python {_python()}: {whole.msg} (line {whole.lineno})"
            ) from whole
        try:
            tree = ast.parse(textwrap.dedent(declarations), filename=path)
        except SyntaxError as part:
            raise ValueError(
                f"cannot parse {CLASS_NAME} in {path} with Python {_python()}: {part.msg}"
            ) from part
    cls = _find_class(tree)
    return None if cls is None else _fields_of(cls)


def _python() -> str:
    return ".".join(map(str, sys.version_info[:2]))


def _read(resolved: str) -> tuple[str | None, set[str] | None]:
    """(the source's path inside site-packages, the class's fields), or (None, None)."""
    for site in _site_packages(resolved):
        for relative in _SOURCES:
            path = os.path.join(site, *relative.split("/"))
            if not os.path.isfile(path):
                continue
            fields = _parse_fields(path)
            if fields is not None:
                return relative, fields
    return None, None


def speculative_config_fields(release_dir: str) -> set[str] | None:
    """The annotated fields of ``SpeculativeConfig`` in the vLLM release venv at
    ``release_dir`` (a release folder or the ``current`` link; links are resolved).

    None when no ``vllm/config/speculative.py`` (nor an older ``vllm/config.py``)
    declares the class. Raises ValueError when the file is there but cannot be
    read or parsed.
    """
    return _read(os.path.realpath(release_dir))[1]


def release_facts(release_dir: str) -> dict[str, Any]:
    """What the ``vllm_facts`` module returns as ``vllm_release``: ``path`` (resolved),
    ``speculative_fields`` (sorted, or None), ``batch_size_schedule`` and ``reason``.

    Never raises: a source that cannot be read or parsed gives no fields and
    says why.
    """
    resolved = os.path.realpath(release_dir)
    try:
        relative, fields = _read(resolved)
    except ValueError as exc:
        relative, fields = None, None
        reason = f"{exc}: cannot tell whether this release can draft by batch size"
    else:
        if fields is None:
            reason = f"no vLLM {CLASS_NAME} source found under {resolved}"
        elif SCHEDULE_KEY in fields:
            reason = f"{relative} of {resolved} declares {SCHEDULE_KEY}"
        else:
            reason = (
                f"{relative} of {resolved} has no field {SCHEDULE_KEY}: "
                "this release cannot draft by batch size"
            )
    return {
        "path": resolved,
        "speculative_fields": None if fields is None else sorted(fields),
        "batch_size_schedule": fields is not None and SCHEDULE_KEY in fields,
        "reason": reason,
    }


def batch_size_schedule_support(release_dir: str) -> dict[str, Any]:
    """``{"supported": bool, "reason": str}``: whether the release at ``release_dir``
    takes ``num_speculative_tokens_per_batch_size`` in ``--speculative-config``."""
    facts = release_facts(release_dir)
    return {"supported": facts["batch_size_schedule"], "reason": facts["reason"]}
