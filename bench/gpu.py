"""`memloop bench gpu`: one command that measures the engine on a GPU (or TPU) host, written for a device run
of minutes (docs/engine-serving.md, "On a GPU").

In order of value, each step timed and written to `<out>/gpu-bench.json` as it finishes (bench/gpu_plan.py
plans them against `--budget-s` first):

1. random-initialised bf16 checkpoints built by transformers in the shapes that matter (Qwen2.5-1.5B,
   Llama-3.1-8B) with a tokenizer from a model the project installs (random weights time like trained ones);
2. correctness against transformers on the same device and checkpoint: last-position logits (relative L2),
   and greedy tokens through the served engine with the platform's kernel (`attention: auto`) and through
   the gather path -- how many agree, the first divergence, transformers' logit gap there;
3. decode tokens/s at batch 1, 16, 64, 256, short and 4k context, each as a share of the HBM bound;
   prefill tokens/s and MFU at 2k and 8k; time to first token at 4k; compile seconds;
4. transformers' own decode (bf16, SDPA, static cache) at batch 1 and 64, the peer of the same run;
5. the papers'-shape prefix workload (bench/prefix.py) at 32 and 256 loops;
6. a JAX profile of one decode and one prefill call, its ten most expensive kernels.

`--tiny` runs every step on toy shapes (on CPU the Pallas GPU kernel runs in Pallas' interpreter), so the
default test suite proves each step still runs under both JAX versions the project supports.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from memloop.bench.gpu_measure import (
    PROMPTS,
    Device,
    calibrate,
    correctness,
    decode_figures,
    environment,
    prefill_figures,
    prefix_workload,
    profile,
    transformers_decode,
)
from memloop.bench.gpu_models import (
    SHAPES,
    build_checkpoint,
    kv_bytes_per_token,
    load_bf16,
    load_transformers,
    make_engine,
    params_of,
    tokenizer_dir_default,
)
from memloop.bench.gpu_plan import Record, Runner, Step, Work


@dataclass(frozen=True)
class Scale:
    """The sizes one run measures (`FULL` on a device, `TINY` for the test suite)."""

    models: tuple[str, ...]
    batches: tuple[int, ...]
    contexts: tuple[tuple[str, int], ...]
    decode_steps: int
    prefill: tuple[int, ...]
    ttft: int
    peer_batches: tuple[int, ...]
    prefix_loops: tuple[int, ...]
    prefix_workload: str
    prefix_steps: int | None
    greedy_tokens: int
    prefill_chunk: int
    timed_passes: int
    calibration_n: int  # side of the calibration's square matrix product
    key_batch: int  # the decode batch the goal is held against (64; its toy stand-in is 4)
    name: str


FULL = Scale(
    models=("qwen2.5-1.5b", "llama-3.1-8b"),
    batches=(1, 16, 64, 256),
    contexts=(("short", 128), ("4k", 4096)),
    decode_steps=64,
    prefill=(2048, 8192),
    ttft=4096,
    peer_batches=(1, 64),
    prefix_loops=(32, 256),
    prefix_workload="papers",
    prefix_steps=None,
    greedy_tokens=32,
    prefill_chunk=2048,
    timed_passes=2,
    calibration_n=8192,
    key_batch=64,
    name="full",
)
TINY = Scale(
    models=("tiny-qwen2", "tiny-llama"),
    batches=(1, 2, 4, 8),
    contexts=(("short", 16), ("4k", 96)),
    decode_steps=4,
    prefill=(64, 256),
    ttft=128,
    peer_batches=(1, 4),
    prefix_loops=(2, 4),
    prefix_workload="short",
    prefix_steps=2,
    greedy_tokens=6,
    prefill_chunk=64,
    timed_passes=1,
    calibration_n=256,
    key_batch=4,
    name="tiny",
)


# ---------------------------------------------------------------------------------------------- the steps


@dataclass
class ModelState:
    """What the steps of one model share: its checkpoint, memloop's model and engines, transformers' model."""

    name: str
    path: Path | None = None
    lm: Any = None
    engines: dict[str, Any] = field(default_factory=dict)
    hf: Any = None


class GpuBench:
    def __init__(
        self,
        out: Path,
        scale: Scale,
        budget_s: float,
        tokenizer_dir: Path | None,
        log: Callable[[str], None] = print,
        work_dir: Path | None = None,
    ) -> None:
        self.out, self.scale, self.budget_s, self.log = out, scale, budget_s, log
        # A work dir the bench made itself (checkpoints, traces: ~100 MB a run) goes when the run ends.
        self.own_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="memloop-bench-gpu-"))
        self.tokenizer_dir = tokenizer_dir or tokenizer_dir_default(self.work_dir)
        self.dev = Device.here()
        self.record = Record(out / "gpu-bench.json")
        self.models = {name: ModelState(name) for name in scale.models}
        self.runner: Runner | None = None

    # -- setups
    def _checkpoint(self, m: ModelState) -> dict[str, Any]:
        m.path = build_checkpoint(m.name, self.work_dir / m.name, self.tokenizer_dir, self.dev.torch_device)
        return {"path": str(m.path), "params": params_of(SHAPES[m.name])}

    def _release_others(self, keep: ModelState) -> None:
        """One model on the device at a time: the other's engines, weights and transformers copy go (and are
        loaded again if a later step needs them)."""
        for m in self.models.values():
            if m is keep or (m.lm is None and m.hf is None):
                continue
            for engine in m.engines.values():
                engine.shutdown()
            m.engines.clear()
            m.lm = m.hf = None
            if self.runner is not None:
                self.runner.done.difference_update({f"{m.name}:load", f"{m.name}:transformers"})
        gc.collect()
        if self.dev.torch_device == "cuda":
            import torch

            torch.cuda.empty_cache()

    def _load(self, m: ModelState) -> dict[str, Any]:
        self._release_others(m)
        m.lm = load_bf16(m.path)
        s = self.scale
        pages = self._pages(m)
        m.engines["kernel"] = make_engine(
            m.lm, self.dev.attention, self.dev.interpret, max(s.batches), s.prefill_chunk, pages=pages
        )
        return {
            "kv_pages": m.engines["kernel"].pool.capacity,
            "attention": self.dev.attention,
            "backend": m.engines["kernel"].attention.kind,
        }

    def _pages(self, m: ModelState) -> int | None:
        """On CPU a page count for the toy scale; on a device None: `kv_budget` 0.4 of its memory (transformers
        and the weights share the rest)."""
        if self.dev.platform != "cpu":
            return None
        s = self.scale
        longest = max(max(c for _, c in s.contexts) + s.decode_steps + 2, max(s.prefill), s.ttft)
        return max(s.batches) * (max(c for _, c in s.contexts) + s.decode_steps + 32) // 16 + longest // 16 + 64

    def _hf(self, m: ModelState) -> dict[str, Any]:
        self._release_others(m)
        m.hf = load_transformers(m.path, self.dev.torch_device)
        return {"torch_device": self.dev.torch_device}

    def steps(self) -> tuple[list[Step], dict[str, Step]]:
        s, setups, steps = self.scale, {}, []
        key = s.key_batch
        later: list[Step] = []
        for name, m in self.models.items():
            shape = SHAPES[name]
            p, kvt = params_of(shape), kv_bytes_per_token(shape)
            setups[f"{name}:checkpoint"] = Step(
                f"{name}:checkpoint",
                lambda p=p: Work(bytes=8 * p, fixed_s=2 + p / 2e9),
                lambda m=m: self._checkpoint(m),
            )
            setups[f"{name}:load"] = Step(
                f"{name}:load",
                lambda p=p: Work(bytes=12 * p, fixed_s=2 + p / 1e9),
                lambda m=m: self._load(m),
                needs=(f"{name}:checkpoint",),
            )
            setups[f"{name}:transformers"] = Step(
                f"{name}:transformers",
                lambda p=p: Work(bytes=6 * p, fixed_s=2 + p / 2e9),
                lambda m=m: self._hf(m),
                needs=(f"{name}:checkpoint",),
            )
            base = (f"{name}:checkpoint", f"{name}:load")

            def dec_work(b: int, c: int, p=p, kvt=kvt) -> Work:
                runs = (s.timed_passes + 1) * 2
                return Work(
                    flops=runs * 2 * p * b * (c + s.decode_steps),
                    bytes=runs * (s.decode_steps * 2 * p + b * kvt * (c + s.decode_steps) * s.decode_steps),
                    iterations=runs * (s.decode_steps + 2),
                    compiles=3,
                )

            def pre_work(t: int, p=p) -> Work:
                return Work(
                    flops=(s.timed_passes + 1)
                    * (2 * p * t + 4 * shape["num_hidden_layers"] * shape["hidden_size"] * t * t / 2),
                    iterations=(s.timed_passes + 1) * (t // s.prefill_chunk + 1),
                    compiles=2,
                )

            steps.append(
                Step(
                    f"{name}:correctness",
                    lambda p=p: Work(
                        flops=2 * p * 200 * (s.greedy_tokens + 64),
                        bytes=4 * p * s.greedy_tokens * 4,
                        iterations=12 * s.greedy_tokens,
                        compiles=6,
                    ),
                    lambda m=m: self._correctness(m),
                    needs=base + (f"{name}:transformers",),
                )
            )
            for label, c in s.contexts:
                steps.append(
                    Step(
                        f"{name}:decode_b{key}_{label}",
                        lambda c=c: dec_work(key, c),
                        lambda m=m, c=c: self._decode(m, key, c),
                        needs=base,
                    )
                )
            steps.append(
                Step(
                    f"{name}:prefill_{max(s.prefill)}",
                    lambda: pre_work(max(s.prefill)),
                    lambda m=m: prefill_figures(m.engines["kernel"], self.dev, max(s.prefill), s.timed_passes),
                    needs=base,
                )
            )
            rest = [
                Step(
                    f"{name}:transformers_decode_b{b}",
                    # transformers compiles the static cache's graphs on a GPU (a minute, not measured here)
                    lambda b=b, p=p: Work(
                        flops=6 * 2 * p * b * (128 + s.decode_steps),
                        bytes=6 * s.decode_steps * 2 * p,
                        iterations=6 * s.decode_steps,
                        compiles=2,
                        fixed_s=0 if self.dev.interpret else 60,
                    ),
                    lambda m=m, b=b: self._peer(m, b),
                    needs=base + (f"{name}:transformers",),
                )
                for b in s.peer_batches
            ]
            rest += [
                Step(
                    f"{name}:decode_b{b}_{label}",
                    lambda b=b, c=c: dec_work(b, c),
                    lambda m=m, b=b, c=c: self._decode(m, b, c),
                    needs=base,
                )
                for b in s.batches
                if b != key
                for label, c in s.contexts
            ]
            rest += [
                Step(
                    f"{name}:prefill_{t}",
                    lambda t=t: pre_work(t),
                    lambda m=m, t=t: prefill_figures(m.engines["kernel"], self.dev, t, s.timed_passes),
                    needs=base,
                )
                for t in s.prefill
                if t != max(s.prefill)
            ]
            rest.append(Step(f"{name}:ttft_{s.ttft}", lambda: pre_work(s.ttft), lambda m=m: self._ttft(m), needs=base))
            for loops in s.prefix_loops:
                rest.append(
                    Step(
                        f"{name}:prefix_{loops}_loops",
                        lambda loops=loops, p=p: self._prefix_work(p, loops),
                        lambda m=m, loops=loops: prefix_workload(
                            m.engines["kernel"], s.prefix_workload, loops, s.prefix_steps
                        ),
                        needs=base,
                    )
                )
            rest.append(
                Step(
                    f"{name}:profile",
                    lambda: dec_work(key, 128) + pre_work(max(s.prefill) // 4),
                    lambda m=m: profile(
                        m.engines["kernel"], key, min(c for _, c in s.contexts), max(s.prefill) // 4, self.work_dir
                    ),
                    needs=base,
                )
            )
            later.extend(rest)
        return steps + later, setups

    def _prefix_work(self, p: float, loops: int) -> Work:
        from memloop.bench.prefix import workload_settings

        ws = workload_settings(self.scale.prefix_workload, samples=loops, steps=self.scale.prefix_steps)
        prompt_tokens = loops * ws["steps"] * (ws["chunk_words"] * 1.4 + 600 + 40 * ws["revisions"] * ws["steps"] / 2)
        decoded = loops * ws["steps"] * ws["max_tokens"]
        return Work(
            flops=2 * p * (0.6 * prompt_tokens + decoded),
            bytes=2 * p * ws["steps"] * ws["max_tokens"],
            iterations=ws["steps"] * (ws["max_tokens"] + 8) * max(1, loops // 256),
            compiles=6,
        )

    def _correctness(self, m: ModelState) -> dict[str, Any]:
        if "gather" not in m.engines:
            m.engines["gather"] = make_engine(m.lm, "gather", False, len(PROMPTS), self.scale.prefill_chunk, pages=256)
        try:
            return correctness(
                m.lm,
                {"kernel": m.engines["kernel"], "gather": m.engines["gather"]},
                m.hf,
                self.dev.torch_device,
                self.scale.greedy_tokens,
            )
        finally:
            m.engines.pop("gather").shutdown()

    def _decode(self, m: ModelState, batch: int, context: int) -> dict[str, Any]:
        engine = m.engines["kernel"]
        need = batch * -(-(context + self.scale.decode_steps + 2) // engine.pool.page_size)
        if need > engine.pool.capacity:
            return {
                "batch": batch,
                "context": context,
                "tokens_per_s": None,
                "hbm_fraction": None,
                "note": f"needs {need} KV pages, the engine has {engine.pool.capacity}: does not fit this device",
            }
        return decode_figures(engine, self.dev, batch, context, self.scale.decode_steps, self.scale.timed_passes)

    def _peer(self, m: ModelState, batch: int) -> dict[str, Any]:
        ctx = min(c for _, c in self.scale.contexts)
        return transformers_decode(m.hf, m.lm.tokenizer, self.dev.torch_device, batch, ctx, self.scale.decode_steps)

    def _ttft(self, m: ModelState) -> dict[str, Any]:
        figures = prefill_figures(m.engines["kernel"], self.dev, self.scale.ttft, self.scale.timed_passes)
        return {"tokens": self.scale.ttft, "ttft_s": figures["seconds"], "compile_s": figures["compile_s"]}

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            if self.own_work_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)

    def _run(self) -> dict[str, Any]:
        started = time.perf_counter()
        data = self.record.data
        data.update(
            bench="memloop bench gpu",
            scale=self.scale.name,
            environment=environment(),
            device={
                "platform": self.dev.platform,
                "kind": self.dev.kind,
                "spec": self.dev.spec,
                "torch_device": self.dev.torch_device,
                "attention": self.dev.attention,
            },
        )
        self.record.write()
        t0 = time.perf_counter()
        rates, calibration = calibrate(self.dev, self.scale.calibration_n, self.tokenizer_dir, self.work_dir)
        data["calibration"] = {**calibration, "seconds": time.perf_counter() - t0}
        self.log(f"calibration: {json.dumps(data['calibration'])}")
        steps, setups = self.steps()
        runner = self.runner = Runner(self.record, rates, self.budget_s, setups, self.log, started=started)
        try:
            runner.run(steps)
        finally:
            for m in self.models.values():
                for engine in m.engines.values():
                    engine.shutdown()
        data["summary"] = summary(data, self.scale)
        data["failed_steps"] = runner.failed
        data["wall_s"] = time.perf_counter() - started
        self.record.write()
        return data


def summary(data: dict[str, Any], scale: Scale) -> dict[str, Any]:
    """The figures the goals are held against, per model: decode at the key batch as a share of the HBM
    bound, prefill MFU at the longest prompt, decode at the key batch against transformers'."""
    steps, key, out = data.get("steps", {}), scale.key_batch, {}
    for name in scale.models:
        get = lambda step, field: (steps.get(f"{name}:{step}") or {}).get(field)  # noqa: E731
        ours = get(f"decode_b{key}_short", "tokens_per_s")
        peer = get(f"transformers_decode_b{key}", "tokens_per_s")
        out[name] = {
            f"decode_b{key}_hbm_fraction": get(f"decode_b{key}_short", "hbm_fraction"),
            f"decode_b{key}_4k_hbm_fraction": get(f"decode_b{key}_4k", "hbm_fraction"),
            f"prefill_{max(scale.prefill)}_mfu": get(f"prefill_{max(scale.prefill)}", "mfu"),
            f"ratio_decode_b{key}_vs_transformers": ours / peer if ours and peer else None,
            "logits_rel_l2_max": get("correctness", "logits_rel_l2_max"),
        }
    return out


def main(
    out: Path,
    tiny: bool = False,
    budget_s: float = 480.0,
    tokenizer: Path | None = None,
    models: tuple[str, ...] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    scale = TINY if tiny else FULL
    if models:
        unknown = [m for m in models if m not in SHAPES]
        if unknown:
            from memloop.engine.errors import EngineError

            raise EngineError(f"unknown model shape(s) {unknown}; choose from {sorted(SHAPES)}")
        scale = replace(scale, models=tuple(models))
    bench = GpuBench(out, scale, budget_s, tokenizer, log)
    return bench.run()


if __name__ == "__main__":  # the device run: `python -m memloop.bench.gpu --out DIR [--budget-s S] [--tokenizer DIR]`
    import argparse

    # JAX must not take the GPU's memory before transformers loads the same checkpoint beside it.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    parser = argparse.ArgumentParser(prog="python -m memloop.bench.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--budget-s", type=float, default=480.0)
    parser.add_argument("--tokenizer", type=Path, default=None)
    parser.add_argument("--models", default="")
    a = parser.parse_args()
    result = main(a.out, a.tiny, a.budget_s, a.tokenizer, tuple(m for m in a.models.split(",") if m) or None)
    from memloop.bench.device_kit import loaded_project_modules, missing_on_device

    # what this run loaded, and any import of it the device image and the kit lack (tests/engine/test_bench_gpu.py)
    record = Record(a.out / "gpu-bench.json", result)
    loaded = sorted({*loaded_project_modules(), "memloop.bench.gpu"})  # this file runs as __main__
    result["modules"] = {"loaded": loaded, "missing_on_device": missing_on_device(loaded)}
    record.write()
    if result["modules"]["missing_on_device"]:
        print(
            f"error: the device image and .device-kit lack {result['modules']['missing_on_device']}; "
            "add them to memloop.bench.device_kit.KIT"
        )
    raise SystemExit(1 if result["failed_steps"] or result["modules"]["missing_on_device"] else 0)
