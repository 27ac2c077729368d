"""Who ran and who judged: the model under test and the judge model of a run's latest invocation as the
tables name them, whether the run judged itself, and the JSON methods' decoding settings."""

from __future__ import annotations

from typing import Any

from memloop.jobs.results.run_data import RunData, run_config


def models_of(d: RunData) -> dict[str, Any]:
    """The model under test and the judge model of the run's latest invocation, and whether they are one."""
    cfg = run_config(d)
    if not cfg:
        return {}
    under_test = model_name(cfg.get("model") or {})
    jm = d.judge_model or cfg.get("judge_model") or {"kind": "engine"}  # a re-judging's own, where it has one
    judge = under_test if jm.get("kind", "engine") == "engine" and not jm.get("weights") else model_name(jm)
    out = {"model": under_test, "judge": judge, "self_judged": judge == under_test, "decoding": decoding_of(cfg)}
    # seed 001's graph extraction: its own setting, the run's graph_model (else the judge model) unless a
    # kg-retrieval says "self"
    kg = [m for m in cfg.get("methods") or () if m.get("name") == "kg-retrieval"]
    if kg:
        gm = cfg.get("graph_model")
        extractor = (
            judge
            if not gm
            else (under_test if gm.get("kind", "engine") == "engine" and not gm.get("weights") else model_name(gm))
        )
        settings = {(m.get("options") or {}).get("extraction_model", "judge") for m in kg}
        out["graph_extraction"] = ", ".join(sorted(extractor if s == "judge" else under_test for s in settings))
    return out


def decoding_of(cfg: dict[str, Any]) -> dict[str, str]:
    """{method label: its `decoding` setting} for the config's methods that have one (the JSON formats'
    free or schema-held output), the method's default where the config leaves it out."""
    from memloop.eval.methods import method_class

    out = {}
    for m in cfg.get("methods") or ():
        try:
            cls = method_class(m["name"])
        except Exception:  # a method removed since the run: nothing to say about its decoding
            continue
        default = getattr(cls.Settings, "decoding", None)
        if default is not None and getattr(cls, "fmt", "json") != "text":  # text summaries have no schema
            out[m.get("label") or m["name"]] = str((m.get("options") or {}).get("decoding", default))
    return out


def model_name(spec: dict[str, Any]) -> str:
    """A model spec as the tables name it: the endpoint's model, or the engine's weights (file name)."""
    if spec.get("kind") == "openai":
        ep = spec.get("endpoint") or {}
        return f"{ep.get('model')} at {ep.get('base_url')}"
    weights = spec.get("weights")
    if not weights:
        from memloop.engine.assets import default_model_path

        return f"{default_model_path().name} (the bundled default)"
    return str(weights).rsplit("/", 1)[-1]
