"""Sentence segmentation of the arXiv dataset's single-line articles (Cohan et al., 2018, as served
by the hub's `document` configuration: sentences joined by a space).

The text is lowercased and tokenised: every period stands apart ("shown in fig . ( [ f1 ] )",
"smith et al . ( 2004 )", "we set @xmath2 = 1 . next , we ..."). We run NLTK's Punkt (the algorithm
the release's own sentence lists come from is not published; Punkt is the standard one) with two
adaptations, and no downloaded model:
- a detached period is read as attached to the token before it, so Punkt's abbreviation rule sees
  "fig." and "al."; the returned sentences are slices of the original text (nothing rewritten);
- arXiv's abbreviations ("fig", "eq", "al", "ref", "sec", ...) are given explicitly, and every word
  may begin a sentence in lowercase, so a number or a single letter before a period still ends a
  sentence when the next word is lowercase (untrained Punkt would join them).
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache

from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

# Abbreviations of arXiv prose (lowercased; Punkt compares without the final period).
ARXIV_ABBREVIATIONS = frozenset(
    "fig figs eq eqs eqn eqns ref refs sec secs tab tabs al e.g i.e cf vs viz resp approx etc ch chap app "
    "no nos vol pp p ed eds dr mr prof ph.d st".split()
)
_DETACHED = re.compile(r"\s+(?=[.!?](?:\s|$))")
_ORTHO_BEG_LC = 1 << 4  # nltk.tokenize.punkt._ORTHO_BEG_LC: the type occurs lowercase at a sentence start


@lru_cache(maxsize=1)
def _tokenizer() -> PunktSentenceTokenizer:
    params = PunktParameters()
    params.abbrev_types = set(ARXIV_ABBREVIATIONS)
    # lowercased text: any word may start a sentence, so the orthographic rule never joins across "1 . next"
    params.ortho_context = defaultdict(lambda: _ORTHO_BEG_LC)
    return PunktSentenceTokenizer(params)


def split_arxiv_sentences(text: str) -> list[str]:
    """The sentences of one line of lowercased, tokenised arXiv text, as slices of `text`, stripped."""
    kept: list[int] = []  # original offset of each character of the joined text
    pieces: list[str] = []
    pos = 0
    for m in _DETACHED.finditer(text):
        pieces.append(text[pos : m.start()])
        kept.extend(range(pos, m.start()))
        pos = m.end()
    pieces.append(text[pos:])
    kept.extend(range(pos, len(text)))
    joined = "".join(pieces)
    out = []
    for a, b in _tokenizer().span_tokenize(joined):
        sentence = text[kept[a] : kept[b - 1] + 1].strip() if b > a else ""
        if sentence:
            out.append(sentence)
    return out
