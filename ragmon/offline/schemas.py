"""The record schemas ``ragmon eval`` and ``compare`` read (SPEC §8a): ragmon's own keys, Ragas
(0.1 and 0.2+) and DeepEval test cases, told apart by a file's first record (``--schema`` forces one).

Each schema names the keys that give a record's query, answer, contexts and reference answer;
any schema may also carry ragmon's ``query_id``, ``retrieved_document_ids``,
``relevant_document_ids`` and ``relevance``. A key the schema knows but ragmon does not use, a
key of another schema and an unknown key are ignored, each with one warning per file
(``FieldWarnings``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "COMMON",
    "SCHEMAS",
    "Schema",
    "FieldWarnings",
    "ambiguity",
    "detect",
    "schema_named",
]

COMMON: Final = ("query_id", "retrieved_document_ids", "relevant_document_ids", "relevance")
"""ragmon's id and label keys, read in a file of any schema."""

_MEANING: Final = {
    "query": "the query",
    "answer": "the generated answer",
    "contexts": "the contexts given to the generator",
    "reference_answer": "the reference answer",
    "reference_answers": "the reference answers",
}


@dataclass(frozen=True, slots=True)
class Schema:
    """A record schema: ``fields`` maps a key to what it gives ragmon (``query``, ``answer``,
    ``contexts``, ``reference_answer``, or ``reference_answers``: a list of reference answers);
    ``unused`` maps a key the schema defines but ragmon's metrics do not use to what it means."""

    name: str
    fields: Mapping[str, str]
    unused: Mapping[str, str]

    def meaning(self, key: str) -> str | None:
        """What ``key`` means in this schema, if it is one of its keys."""
        if key in self.fields:
            return _MEANING[self.fields[key]]
        return self.unused.get(key)

    @property
    def structured(self) -> frozenset[str]:
        """The keys whose values are lists or objects (JSON text in a CSV cell)."""
        lists = (key for key, target in self.fields.items() if target in ("contexts", "reference_answers"))
        return frozenset({*lists, "retrieved_document_ids", "relevant_document_ids", "relevance"})


RAGMON: Final = Schema(
    "ragmon",
    {"query": "query", "answer": "answer", "contexts": "contexts", "reference_answer": "reference_answer"},
    {},
)
RAGAS: Final = Schema(
    "ragas",
    {
        # Ragas 0.1 (a Hugging Face dataset's columns)
        "question": "query", "answer": "answer", "contexts": "contexts",
        "ground_truth": "reference_answer", "ground_truths": "reference_answers",
        # Ragas 0.2+ (SingleTurnSample)
        "user_input": "query", "response": "answer", "retrieved_contexts": "contexts",
        "reference": "reference_answer",
    },
    {
        "reference_contexts": "the contexts the reference answer was written from (Ragas's context "
        "recall and precision against a reference); ragmon's metrics do not use them",
        "multi_responses": "several answers to the query (Ragas); ragmon judges one answer",
        "rubrics": "scoring rubrics (Ragas); ragmon's judge has its own",
    },
)
DEEPEVAL: Final = Schema(
    "deepeval",
    {
        "input": "query", "actual_output": "answer", "retrieval_context": "contexts",
        "expected_output": "reference_answer",
    },
    {
        "context": "the ideal, ground-truth context (DeepEval's contextual recall and hallucination); "
        "ragmon's metrics do not use it",
        "tools_called": "the tools the application called (DeepEval's tool correctness); not used",
        "expected_tools": "the tools it should have called (DeepEval's tool correctness); not used",
    },
)
SCHEMAS: Final = (RAGMON, RAGAS, DEEPEVAL)


def schema_named(name: str) -> Schema:
    """The schema called ``name`` (one of ``SCHEMAS``); ``KeyError`` otherwise."""
    for schema in SCHEMAS:
        if schema.name == name:
            return schema
    raise KeyError(name)


def _keys(schema: Schema) -> set[str]:
    return {*schema.fields, *schema.unused}


def _exclusive(schema: Schema) -> set[str]:
    """Keys only ``schema`` has: what tells its files apart."""
    others = set().union(*(_keys(s) for s in SCHEMAS if s is not schema))
    return _keys(schema) - others


def _known() -> str:
    return "; ".join(f"{s.name} ({', '.join(sorted(_keys(s) | set(COMMON)))})" for s in SCHEMAS)


def ambiguity(keys: Iterable[str]) -> dict[str, list[str]]:
    """Per schema, the keys of ``keys`` that only it has (schemas with none left out)."""
    present = set(keys)
    found = {s.name: sorted(present & _exclusive(s)) for s in SCHEMAS}
    return {name: found_keys for name, found_keys in found.items() if found_keys}


def detect(keys: Iterable[str]) -> Schema:
    """The schema of a file whose first record has ``keys``: the one schema whose own keys it
    has; ragmon's when it has none of any schema's own keys but some of ragmon's (``answer``
    and ``contexts`` mean the same in Ragas 0.1). ``ValueError`` naming the keys and the
    schemas when the keys fit several schemas or none."""
    present = sorted(set(keys))
    hits = ambiguity(present)
    if len(hits) == 1:
        return schema_named(next(iter(hits)))
    if len(hits) > 1:
        which = ", ".join(f"{name} ({', '.join(found)})" for name, found in hits.items())
        raise ValueError(
            f"the keys fit more than one schema: {which}; say which with --schema ragmon|ragas|deepeval"
        )
    if set(present) & (_keys(RAGMON) | set(COMMON)):
        return RAGMON
    listed = ", ".join(present) if present else "none"
    raise ValueError(
        f"no key of a known schema (keys found: {listed:.300}); the schemas read are {_known()}; "
        "say which with --schema ragmon|ragas|deepeval"
    )


def _elsewhere(key: str, schema: Schema) -> str | None:
    """What ``key`` means in the schemas other than ``schema`` that have it, if any."""
    others = [s for s in SCHEMAS if s is not schema and s.meaning(key) is not None]
    if not others:
        return None
    meaning = others[0].meaning(key)
    return f"in a {' or '.join(s.name for s in others)} file it is {meaning}"


class FieldWarnings:
    """The keys a file's records carry that ragmon ignores: one warning per file and key,
    through ``warn`` (the first record that has it decides)."""

    def __init__(self, path: str, schema: Schema, warn: Callable[[str], None] | None) -> None:
        self._path = path
        self._schema = schema
        self._warn = warn
        self._seen: set[str] = set()

    def check(self, obj: Mapping[str, Any]) -> None:
        """Warn once about each key of ``obj`` the schema does not read (null values too:
        an empty column is still a column)."""
        for key in obj:
            if key in self._seen or key in COMMON or key in self._schema.fields or key == "":
                continue
            self._seen.add(key)
            if self._warn is not None:
                self._warn(self.message(key))

    def message(self, key: str) -> str:
        """Why ``key`` is ignored and what it would mean."""
        schema = self._schema
        shown = f'{self._path}: "{key:.100}" is ignored'
        unused = schema.unused.get(key)
        if unused is not None:
            return f"{shown}: {unused}"
        elsewhere = _elsewhere(key, schema)
        if elsewhere is not None:
            return f"{shown}: {elsewhere}, and this file is read as {schema.name} (--schema to change it)"
        return f"{shown}: not a key of the {schema.name} schema"
