"""The paper's prefix reuse counted by hand (seed 002, section 4.2), for the tests that check the report's
figure against it: the tokens each prompt shares from its start with the prompt before it."""

from __future__ import annotations


def shared_prefix_tokens(ids: list[list[int]]) -> tuple[int, int]:
    """(tokens of all the prompts, tokens each shares from its start with the one before it) for the token ids
    of a sample's prompts in order."""
    shared = 0
    for a, b in zip(ids, ids[1:]):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        shared += n
    return sum(map(len, ids)), shared
