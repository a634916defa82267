"""The demo's synthetic knowledge base: documents, questions with their relevant documents, a
lexical retriever, a reranker and a generator. Pure and seeded: the same seed, the same answers.

Twelve products, each with four facts (warranty, battery, weight, price): 48 documents, one
question per fact. A question's relevant document is its fact's; the retriever ranks by shared
words with a little seeded noise, so that retrieval is good, not perfect. A *degraded* index
(the regression the demo injects: think of a re-embedded corpus) ranks mostly by noise.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Corpus", "Document", "Generated", "Question", "build_corpus", "generate", "rerank", "retrieve"]

_PRODUCTS = (
    "Aurora kettle", "Basalt blender", "Cobalt toaster", "Dune heater", "Ember lamp", "Fjord fan",
    "Glacier fridge", "Harbor speaker", "Iris camera", "Juniper router", "Kestrel drone", "Lumen projector",
)
_FACTS = {
    "warranty": ("What is the warranty of the {p}?", "The {p} comes with a {n} year warranty covering parts and labour."),
    "battery": ("How long does the battery of the {p} last?", "The {p} battery lasts {n} hours on a full charge."),
    "weight": ("How much does the {p} weigh?", "The {p} weighs {n} hundred grams without its stand."),
    "price": ("What does the {p} cost?", "The {p} costs {n}9 euros in the standard edition."),
}
_FABRICATIONS = (
    "It also includes a free lifetime subscription to premium support.",
    "Owners report it survives being submerged for several days.",
    "The manufacturer recalled every unit sold before last spring.",
    "It doubles as a wireless charger for electric scooters.",
)
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an and the of is what how does do long much for on in its it with to".split())


@dataclass(frozen=True, slots=True)
class Document:
    """One fact of one product."""

    id: str
    text: str


@dataclass(frozen=True, slots=True)
class Question:
    """A user question and the id of the one document that answers it."""

    text: str
    relevant: str


@dataclass(frozen=True, slots=True)
class Corpus:
    """The documents, the questions, and each document's content words (for ranking)."""

    documents: tuple[Document, ...]
    questions: tuple[Question, ...]
    words: tuple[frozenset[str], ...]


@dataclass(frozen=True, slots=True)
class Generated:
    """A generated answer; ``grounded`` is False when it states something no context says."""

    text: str
    grounded: bool


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP)


def build_corpus(seed: int = 7) -> Corpus:
    """The demo's 48 documents and 48 questions (numbers in the facts drawn from ``seed``)."""
    rng = random.Random(seed)
    documents, questions = [], []
    for i, product in enumerate(_PRODUCTS):
        for fact, (question, statement) in _FACTS.items():
            doc_id = f"doc-{i:02d}-{fact}"
            documents.append(Document(doc_id, statement.format(p=product, n=rng.randint(2, 9))))
            questions.append(Question(question.format(p=product), doc_id))
    return Corpus(tuple(documents), tuple(questions), tuple(_words(d.text) for d in documents))


def retrieve(corpus: Corpus, query: str, k: int, rng: random.Random, *, degraded: bool = False) -> list[tuple[Document, float]]:
    """The top ``k`` documents for ``query`` with their scores: shared content words plus noise
    (much more noise when ``degraded``)."""
    terms = _words(query)
    noise = 30.0 if degraded else 0.8
    scored = [(len(terms & words) + rng.random() * noise, i) for i, words in enumerate(corpus.words)]
    scored.sort(reverse=True)
    return [(corpus.documents[i], round(score, 4)) for score, i in scored[:k]]


def rerank(query: str, retrieved: Sequence[tuple[Document, float]], keep: int) -> list[tuple[Document, float]]:
    """The ``keep`` best of ``retrieved`` by the share of the query's words each contains (ties
    keep the retriever's order)."""
    terms = _words(query)
    scored = [(len(terms & _words(d.text)) / max(1, len(terms)), -i, d) for i, (d, _) in enumerate(retrieved)]
    scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [(d, round(share, 4)) for share, _, d in scored[:keep]]


def generate(contexts: Sequence[Document], rng: random.Random, unfaithful: float) -> Generated:
    """An answer from the first context; with probability ``unfaithful`` it adds a sentence
    that no context supports."""
    base = contexts[0].text if contexts else "I could not find that in the documentation."
    if rng.random() < unfaithful:
        return Generated(f"{base} {rng.choice(_FABRICATIONS)}", False)
    return Generated(base, True)
