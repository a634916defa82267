"""The LLM judge: prompts and pure scoring of verdicts (``evaluators``), an offline lexical
fallback (``lexical``); the endpoint client lives apart."""
