"""Bearer-token checks shared by the ingest receivers and the metrics server."""

from __future__ import annotations

import hmac

__all__ = ["bearer_token_matches"]


def bearer_token_matches(header: str | bytes | None, token: str) -> bool:
    """True when an ``Authorization`` header value carries ``token`` as a bearer credential.

    The scheme is case-insensitive (RFC 7235 §2.1); surrounding whitespace is ignored; the
    credential is compared in constant time. Any header value is safe to pass, including
    bytes that are not UTF-8 (a header aiohttp decoded with escapes) or ``None``.
    """
    if header is None:
        return False
    if isinstance(header, str):
        header = header.encode("utf-8", "surrogatepass")
    scheme, _, credential = header.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(credential.strip(), token.encode("utf-8"))
