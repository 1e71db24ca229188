"""Who a request comes from: bearer tokens (:class:`TokenAuth`) or a gateway's header
(:class:`HeaderAuth`), each naming a :class:`Caller`."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .._errors import InvalidRequest
from .._files import read_bounded
from .._model import check_caller

__all__ = ["DEFAULT_CALLER_CLASS", "MIN_TOKEN_LENGTH", "Auth", "Caller", "HeaderAuth", "TokenAuth"]

#: The caller class of a caller whose credentials name none.
DEFAULT_CALLER_CLASS = "default"
#: Largest tokens file read (bytes): room for thousands of tokens.
MAX_TOKENS_FILE = 1024 * 1024
#: Shortest bearer token a tokens file may hold.
MIN_TOKEN_LENGTH = 16
#: What a bearer token may hold: printable ASCII, what every client sends as it is.
_TOKEN = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a request: the caller name jobs are owned by, and its caller class."""

    name: str
    caller_class: str = DEFAULT_CALLER_CLASS


class TokenAuth:
    """Bearer-token authentication: each token maps to a :class:`Caller`.

    Tokens are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest`
    against every known token (no early exit), so timing does not tell how much of a guess was
    right. Tokens are never logged or echoed in errors.
    """

    def __init__(self, tokens: Mapping[str, Caller]) -> None:
        if not tokens:
            raise ValueError("TokenAuth needs at least one token")
        self._entries = [(_digest(token), caller) for token, caller in tokens.items()]

    def __repr__(self) -> str:
        return f"TokenAuth(<{len(self._entries)} tokens>)"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TokenAuth:
        """Read a tokens file: one ``TOKEN CALLER [CLASS]`` per line, ``#`` starts a comment.

        Tokens must be at least ``MIN_TOKEN_LENGTH`` characters of printable ASCII (what a
        client sends as it is) and distinct (generate one with
        ``python -c 'import secrets; print(secrets.token_urlsafe(32))'``). Raises ValueError
        naming the line, never the token, for a malformed file, for one that is not a regular
        file or holds more than ``MAX_TOKENS_FILE`` bytes.
        """
        tokens: dict[str, Caller] = {}
        text = read_bounded(path, MAX_TOKENS_FILE).decode("utf-8")  # ValueError: not a file
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            where = f"{os.fspath(path)} line {lineno}"
            if len(fields) not in (2, 3):
                raise ValueError(f"{where}: expected 'TOKEN CALLER [CLASS]'")
            token, name = fields[0], fields[1]
            klass = fields[2] if len(fields) == 3 else DEFAULT_CALLER_CLASS
            if len(token) < MIN_TOKEN_LENGTH:
                raise ValueError(
                    f"{where}: the token is shorter than {MIN_TOKEN_LENGTH} characters"
                )
            if _TOKEN.fullmatch(token) is None:
                # A client sends it as ASCII bytes (RFC 6750), which the server hands over as
                # Latin-1: "é" would never match, and the service would start regardless.
                raise ValueError(
                    f"{where}: the token holds a character other than printable ASCII; "
                    "generate one with python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))'"
                )
            if token in tokens:
                raise ValueError(f"{where}: the token repeats an earlier line's")
            try:
                tokens[token] = Caller(check_caller(name), check_caller(klass, "caller class"))
            except InvalidRequest as exc:
                raise ValueError(f"{where}: {exc}") from None
        if not tokens:
            raise ValueError(f"{os.fspath(path)} holds no token")
        return cls(tokens)

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller a request's ``Authorization: Bearer`` header names, or None."""
        scheme, _, token = headers.get("authorization", "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        digest = _digest(token)
        found: Caller | None = None
        for known, caller in self._entries:
            if hmac.compare_digest(digest, known):
                found = caller
        return found

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` value sent with a 401."""
        return 'Bearer realm="trio-batch"'


class HeaderAuth:
    """Caller identity from a request header set by a trusted gateway in front of the service.

    Only safe when nothing but the gateway can reach the service (bind it to loopback or a
    private interface): the service believes the header as it is. The caller class is the one
    the request body names, or ``DEFAULT_CALLER_CLASS``.
    """

    def __init__(self, header: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", header):
            raise ValueError(f"{header!r} is not a valid header name")
        self.header = header.lower()

    def __repr__(self) -> str:
        return f"HeaderAuth({self.header!r})"

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller the header names (its bytes read as UTF-8), or None if it is missing, not
        UTF-8 or not a valid caller name."""
        value = headers.get(self.header)
        if value is None:
            return None
        try:
            # The server hands header bytes over as Latin-1; a gateway writes a name as UTF-8
            # (what every other front end stores): "josé" must not become "josÃ©", nor "…"
            # (whose bytes read as a C1 control) be refused.
            name = value.encode("latin-1").decode("utf-8")
            return Caller(check_caller(name.strip()), "")
        except (UnicodeError, InvalidRequest):
            return None

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` value sent with a 401."""
        return f'Header realm="trio-batch", header="{self.header}"'


Auth = TokenAuth | HeaderAuth


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
