"""Where the judge calls and what a call returns: plain values, so that wiring the judge
(``JudgeStage``, ``ragmon demo``) does not import the ``openai`` client (about 13 MB a process)
unless an endpoint is configured; ``ragmon.judge.client`` makes the calls."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ragmon.config import JudgeConfig, check_http_url

__all__ = ["Completion", "JudgeEndpoint", "PLACEHOLDER_KEY", "endpoint_from_config", "mask_credentials"]

PLACEHOLDER_KEY: Final = "ragmon-no-key"
"""Sent as the key to a configured ``base_url`` when no key is set (local servers need none)."""
OPENAI_URL: Final = "https://api.openai.com/v1"
"""Where the ``openai`` client calls without a base URL."""
_CREDENTIALS: Final = re.compile(r"(://[^\s/@:]*):[^\s/@]*@")
"""The password of a URL's ``user:password@``."""


def mask_credentials(text: str) -> str:
    """``text`` with every URL's password replaced by ``***``."""
    return _CREDENTIALS.sub(r"\1:***@", text)


@dataclass(frozen=True, slots=True)
class JudgeEndpoint:
    """Where the judge calls: ``base_url`` (``None``: OpenAI's) and the key (never printed)."""

    base_url: str | None
    api_key: str = field(repr=False)

    @property
    def shown(self) -> str:
        """The URL called, as printed (a password in it masked)."""
        return mask_credentials(self.base_url or OPENAI_URL)


def endpoint_from_config(config: JudgeConfig, environ: Mapping[str, str]) -> JudgeEndpoint | None:
    """The endpoint ``[judge]`` describes, or ``None`` when the judge is off.

    ``base_url``: the config's, else ``OPENAI_BASE_URL``. Key: ``environ[config.api_key_env]``.
    ``enabled`` True/False forces the judge on/off; ``None`` turns it on iff a key or a base URL
    is set. A base URL without a key gets ``PLACEHOLDER_KEY`` (local servers need none).
    ``ValueError`` when ``OPENAI_BASE_URL`` is not an http(s) URL with a host (the file's
    ``base_url`` was checked with the configuration).
    """
    if config.enabled is False:
        return None
    base_url = config.base_url.strip() or environ.get("OPENAI_BASE_URL", "").strip() or None
    if base_url is not None and not config.base_url.strip():
        try:
            check_http_url(base_url)
        except ValueError as exc:
            raise ValueError(f"OPENAI_BASE_URL: {exc}") from None
    key = environ.get(config.api_key_env, "").strip() or None
    if config.enabled is None and key is None and base_url is None:
        return None
    return JudgeEndpoint(base_url, key or PLACEHOLDER_KEY)


@dataclass(frozen=True, slots=True)
class Completion:
    """The judge's reply text, its token usage as the server reports it (``None``: not
    reported, or not a plausible count), the model it names and why it stopped."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    model: str
    finish_reason: str | None = None
    """``"length"``: cut at ``max_tokens`` (the verdict is incomplete)."""
