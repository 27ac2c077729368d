"""The official BooookScore chunking algorithm, restated independently from its description, for tests."""

from __future__ import annotations


def reference_chunks(paragraphs: list[str], limit: int, count) -> list[str]:
    """The official algorithm restated independently from its description (character scan, index lists)."""

    def cut_points(text: str, with_commas: bool) -> list[int]:
        marks = ".?!," if with_commas else ".?!"
        found = []
        for i, ch in enumerate(text):
            if ch in marks or (ch in "\"'" and i > 0 and text[i - 1] in ".?!"):
                found.append(i)
        return found

    def split_off(text: str) -> tuple[str, str]:
        keep = len(text)
        while count(text[:keep]) > limit:
            points = cut_points(text[:keep], False)
            if len(points) < 2:
                points = cut_points(text[:keep], True)
            assert len(points) >= 2, "the reference only covers texts with cut points"
            keep = points[-2] + 1
        return text[:keep], text[keep:]

    if count("\n".join(paragraphs)) <= limit:
        return ["\n".join(paragraphs)]
    out: list[str] = []
    pending = ""
    for para in paragraphs:
        merged = para if not pending else pending + "\n" + para
        if count(para) > limit:
            rest = merged
            while True:
                head, rest = split_off(rest)
                out.append(head)
                if count(rest) <= limit:
                    break
            pending = rest
        elif count(merged) <= limit:
            pending = merged
        else:
            out.append(pending)
            pending = para
    if pending:
        out.append(pending)
    return out
