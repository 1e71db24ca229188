"""One kept response of a snapshot (see ``_snapshots``): what a :class:`Body` needs to be made
again, when it was fetched, and the name of its file."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ._body import Body

__all__ = ["Entry", "url_key"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One target's response as kept: what :class:`Body` needs, and when it was fetched."""

    url: str  # the target's URL, as requested
    final_url: str
    status: int | None
    reason: str
    http_version: str
    headers: tuple[tuple[str, str], ...]
    content_type: str | None
    charset: str | None
    chain: tuple[str, ...]
    sha256: str
    size: int
    fetched_at: float

    def to_json(self) -> dict[str, Any]:
        """The entry as stored."""
        return {
            "url": self.url,
            "final_url": self.final_url,
            "status": self.status,
            "reason": self.reason,
            "http_version": self.http_version,
            "headers": [list(pair) for pair in self.headers],
            "content_type": self.content_type,
            "charset": self.charset,
            "chain": list(self.chain),
            "sha256": self.sha256,
            "bytes": self.size,
            "fetched_at": self.fetched_at,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Entry:
        """Read what :meth:`to_json` wrote; raises ValueError (or a KeyError, TypeError) for
        anything else."""
        sha = str(obj["sha256"])
        if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
            raise ValueError("not a sha256")
        return cls(
            url=str(obj["url"]),
            final_url=str(obj["final_url"]),
            status=None if obj["status"] is None else int(obj["status"]),
            reason=str(obj["reason"]),
            http_version=str(obj["http_version"]),
            headers=tuple((str(k), str(v)) for k, v in obj["headers"]),
            content_type=None if obj["content_type"] is None else str(obj["content_type"]),
            charset=None if obj["charset"] is None else str(obj["charset"]),
            chain=tuple(str(u) for u in obj["chain"]),
            sha256=sha,
            size=int(obj["bytes"]),
            fetched_at=float(obj["fetched_at"]),
        )

    @classmethod
    def of(cls, url: str, body: Body, fetched_at: float) -> Entry:
        """The entry of ``body``, the response to the target ``url``."""
        return cls(
            url=url,
            final_url=body.url,
            status=body.status_code,
            reason=body.reason,
            http_version=body.http_version,
            headers=body.headers,
            content_type=body.content_type,
            charset=body.charset,
            chain=body.chain,
            sha256=body.sha256(),
            size=len(body.data),
            fetched_at=fetched_at,
        )

    def body(self, data: bytes) -> Body:
        """The :class:`Body` this entry and its bytes ``data`` make."""
        return Body(
            self.final_url,
            self.status,
            self.content_type,
            self.charset,
            data,
            len(self.chain),
            self.chain,
            self.headers,
            self.reason,
            self.http_version,
            self.sha256,  # checked against the bytes when they were read back
        )


def url_key(url: str) -> str:
    """The name of a target's entry: the sha256 of its URL."""
    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()
