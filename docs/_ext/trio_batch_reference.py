"""Reference pages made from the code itself, so they cannot drift from it.

At ``builder-inited`` this writes, under ``docs/reference/_generated/``:

- ``config.md``: every :class:`trio_batch.Config` field with its type, its default and the
  docstring's line for it (a field the docstring does not describe fails the build);
- ``http.md``: every route of the OpenAPI document, its parameters and its answers.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError


def _config_page() -> str:
    from trio_batch import Config

    doc = Config.__doc__ or ""
    described: dict[str, str] = {}
    for match in re.finditer(r"^    - ``(\w+)``: (.*?)(?=^    - ``|\Z)", doc, re.S | re.M):
        described[match.group(1)] = " ".join(match.group(2).split())
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]

    def _python(value: object) -> str:
        # A size in MiB reads as one: ``16 * 1024 * 1024``, the same value, as Python.
        if type(value) is int and value >= 1 << 20 and value % (1 << 20) == 0:
            return f"{value >> 20} * 1024 * 1024"
        return repr(value)

    for f in dataclasses.fields(Config):
        if f.name not in described:
            raise ExtensionError(f"Config.{f.name} is not described in Config's docstring")
        if f.default is not dataclasses.MISSING:
            default = _python(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = repr(f.default_factory())
        else:
            default = "(required)"
        meaning = _rst_to_md(described[f.name]).replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{f.type}` | `{default}` | {meaning} |")
    return (
        "<!-- Written by docs/_ext/trio_batch_reference.py from trio_batch.Config. -->\n\n"
        + "\n".join(rows)
        + "\n"
    )


def _rst_to_md(text: str) -> str:
    text = re.sub(r":(?:class|meth|func|data|attr|exc):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _http_page() -> str:
    from trio_batch.http._openapi import openapi_document

    doc = openapi_document()
    out = ["<!-- Written by docs/_ext/trio_batch_reference.py from the OpenAPI document. -->", ""]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in {"get", "post", "put", "delete", "patch"}:
                continue
            out.append(f"## `{method.upper()} {path}`")
            out.append("")
            summary = op.get("summary") or op.get("description") or ""
            out.append(" ".join(summary.split()))
            out.append("")
            params = op.get("parameters", [])
            if params:
                out.append("| parameter | in | required | description |")
                out.append("|---|---|---|---|")
                for p in params:
                    desc = " ".join(str(p.get("description", "")).split()).replace("|", "\\|")
                    req = "yes" if p.get("required") else "no"
                    out.append(f"| `{p['name']}` | {p['in']} | {req} | {desc} |")
                out.append("")
            answers: dict[str, Any] = op.get("responses", {})
            if answers:
                out.append("| status | meaning |")
                out.append("|---|---|")
                for code, answer in answers.items():
                    desc = " ".join(str(answer.get("description", "")).split()).replace("|", "\\|")
                    out.append(f"| `{code}` | {desc} |")
                out.append("")
    return "\n".join(out) + "\n"


def _write_generated(app: Sphinx) -> None:
    target = Path(app.srcdir) / "reference" / "_generated"
    target.mkdir(parents=True, exist_ok=True)
    for name, text in (("config.md", _config_page()), ("http.md", _http_page())):
        path = target / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)  # rewritten only on change, so Sphinx rebuilds only then


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the generator with Sphinx."""
    app.connect("builder-inited", _write_generated)
    return {"parallel_read_safe": True, "version": "1"}
