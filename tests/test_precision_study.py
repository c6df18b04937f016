"""The precision study of notebooks 05 and 07: a case whose f32 text is known is not read again."""

from __future__ import annotations

from types import SimpleNamespace

from utils.evaluation.compare import precision_study


class _Pipeline:
    """Writes fixed tokens and counts its reads."""

    def __init__(self, tokens):
        self.tokens, self.reads = list(tokens), 0

    def generate(self, image, prompt, *, max_new_tokens):
        self.reads += 1
        return SimpleNamespace(tokens=list(self.tokens))


def test_known_f32_texts_are_not_read_again_and_agreement_is_reported_per_case():
    exact = _Pipeline([1, 2, 3])
    alone, speculative = _Pipeline([1, 2, 3]), _Pipeline([1, 2, 3])
    cases = [("known", None, "p"), ("unknown", None, "p")]
    rows = precision_study({"default": (alone, speculative)}, exact, cases, exact_tokens={"known": [1, 2, 3]})
    assert exact.reads == 1 and alone.reads == 2 and speculative.reads == 2
    assert [(r["case"], r["identical"], r["target as at f32"]) for r in rows] == [("known", True, True),
                                                                                  ("unknown", True, True)]
    rows = precision_study({"default": (alone, speculative)}, exact, cases[:1], exact_tokens={"known": [1, 2, 4]})
    assert rows[0]["identical"] and not rows[0]["target as at f32"]
