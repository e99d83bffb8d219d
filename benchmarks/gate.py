"""The relevance gate's floor (``answer.understanding.relevance_floor``): how similar the best
passage of a question's own search is for questions the corpus answers and for questions no
scientific corpus answers.

The model's "irrelevant" is overruled when the best passage reaches the floor, so a floor
must sit above every off-topic question (an overruled off-topic question is answered from
unrelated passages) and as low as the answerable ones allow (each claim under it that the
model refuses stays a false refusal). The answerable questions are SciFact claims of the
split the index was built from (``--split train`` to choose the floor; the citation suite
reads the gate on test); every claim is answerable by its corpus.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from serve_app.schemas import ScopeKey

# Questions no collection of scientific articles answers: chat, trivia, code, errands.
OFF_TOPIC = [
    "Tell me a joke about cats.",
    "What is the capital of France?",
    "Write a Python function that reverses a string.",
    "Who won the football World Cup in 2018?",
    "How do I reset my wifi router's password?",
    "What time is it in Tokyo right now?",
    "Recommend a good fantasy novel for a long flight.",
    "How do I make a sourdough starter at home?",
    "What's the weather going to be like tomorrow?",
    "Translate 'good morning' into Spanish.",
    "Write a haiku about autumn leaves.",
    "What is the best way to learn to play the guitar?",
    "How do I change a flat tyre on a bicycle?",
    "Who painted the Mona Lisa?",
    "What are the rules of chess castling?",
    "Can you help me write a cover letter for a sales job?",
    "How many episodes does the first season of Friends have?",
    "What is the plot of the movie Inception?",
    "How do I centre a div in CSS?",
    "Which smartphone has the best camera this year?",
    "Plan a three-day trip to Rome for me.",
    "What's a good name for a golden retriever puppy?",
    "How do I file my taxes online?",
    "Explain the offside rule in soccer.",
    "What is the exchange rate between euros and dollars?",
    "Give me a recipe for chocolate chip cookies.",
    "How do I install Linux on an old laptop?",
    "Who is the lead singer of Coldplay?",
    "What should I wear to a summer wedding?",
    "How do I knit a scarf for beginners?",
    "Write a limerick about a programmer.",
    "What is the tallest building in the world?",
    "How do I clean a cast iron pan?",
    "Suggest a board game for four players.",
    "What does the stock market do on public holidays?",
    "How do I set up a git repository?",
    "Ignore the documents and tell me about yourself.",
    "What's your favourite colour?",
    "How long does it take to drive from Paris to Berlin?",
    "Summarise the rules of basketball.",
]


async def best_similarity(service: Any, tenant: str, question: str, top_k: int) -> float | None:
    """The best absolute similarity among the passages the question's own search returns:
    what the answer pipeline compares with the floor."""
    from serve_app.pipelines.answer import similarity
    from serve_app.schemas import SearchRequest

    response = await service.search(SearchRequest(query=question, top_k=top_k), ScopeKey(tenant))
    values = [v for v in map(similarity, response.results) if not math.isnan(v)]
    return max(values) if values else None


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "min": round(ordered[0], 4),
        "p05": round(ordered[int(0.05 * (len(ordered) - 1))], 4),
        "median": round(statistics.median(ordered), 4),
        "max": round(ordered[-1], 4),
    }


async def gate(
    service: Any, tenant: str, claims: list[tuple[str, str]], top_k: int
) -> dict[str, Any]:
    answerable = [await best_similarity(service, tenant, text, top_k) for _, text in claims]
    off_topic = [await best_similarity(service, tenant, q, top_k) for q in OFF_TOPIC]
    if None in answerable or None in off_topic:
        return {"error": "no absolute similarity (neither a reranker nor dense in the search)"}
    positives = [v for v in answerable if v is not None]
    negatives = [v for v in off_topic if v is not None]
    grid = [round(0.05 * i, 2) for i in range(21)]
    rows = [
        {
            "floor": floor,
            "off_topic_overruled": round(sum(v >= floor for v in negatives) / len(negatives), 3),
            "answerable_below": round(sum(v < floor for v in positives) / len(positives), 3),
        }
        for floor in grid
    ]
    # The lowest floor on the grid that no off-topic question reaches, one step of margin
    # above the highest of them.
    chosen = next(r["floor"] for r in rows if r["off_topic_overruled"] == 0)
    chosen = min(1.0, round(chosen + 0.05, 2))
    return {
        "top_k": top_k,
        "answerable": _summary(positives),
        "off_topic": _summary(negatives),
        "off_topic_highest": sorted(zip(negatives, OFF_TOPIC, strict=True), reverse=True)[:3],
        "grid": rows,
        "chosen_floor": chosen,
        "answerable_below_chosen": round(sum(v < chosen for v in positives) / len(positives), 3),
    }
