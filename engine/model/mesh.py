"""Device meshes and the tensor-parallel layout of the decoder's parameters and KV cache.

One mesh axis, `tp`. The layout is Megatron-style: column-parallel Q/K/V and gate/up projections,
row-parallel output and down projections (XLA inserts the all-reduce), vocabulary-parallel
embedding and head. An axis is only sharded when the device count divides it; otherwise that
tensor is replicated. SmolLM2-135M has 9 query and 3 KV heads, so on 4 devices its attention
weights and KV cache are replicated while the MLP intermediate (1536) and vocabulary (49152) are
split; on 8 TPU chips a Llama with 32/8 heads splits everything.

Activations carry `with_sharding_constraint` annotations through `constrain`, which is a no-op
unless a mesh with a `tp` axis is active (`with jax.set_mesh(mesh):`), so the same model code runs
on one device and on a mesh.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from memloop.engine.errors import EngineError, RequestError
from memloop.engine.model.config import ModelConfig

AXIS = "tp"


def make_mesh(devices: Sequence[Any] | int | None = None) -> Mesh:
    """A 1-D `tp` mesh over the given devices, the first `n` devices, or all of them."""
    available = jax.devices()
    if devices is None:
        chosen = available
    elif isinstance(devices, int):
        if not 1 <= devices <= len(available):
            raise EngineError(
                f"asked for a mesh of {devices} devices but {len(available)} are visible; on CPU set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={devices} before importing jax."
            )
        chosen = available[:devices]
    else:
        chosen = list(devices)
    return Mesh(np.asarray(chosen), (AXIS,))


def _split(dim: int, mesh: Mesh) -> str | None:
    return AXIS if dim % mesh.shape[AXIS] == 0 else None


def param_specs(cfg: ModelConfig, mesh: Mesh, has_lm_head: bool) -> dict[str, Any]:
    """PartitionSpecs for the parameter pytree of memloop.engine.model.weights (same structure)."""
    q = _split(cfg.num_heads, mesh)
    kv = _split(cfg.num_kv_heads, mesh)
    f = _split(cfg.intermediate_size, mesh)
    v = _split(cfg.vocab_size, mesh)
    specs: dict[str, Any] = {  # matrices are [L, out, in]
        "embed": P(v, None),
        "final_norm": P(),
        "layers": {
            "attn_norm": P(),
            "wq": P(None, q, None),
            "wk": P(None, kv, None),
            "wv": P(None, kv, None),
            "wo": P(None, None, q),
            "mlp_norm": P(),
            "w_gate": P(None, f, None),
            "w_up": P(None, f, None),
            "w_down": P(None, None, f),
        },
    }
    if cfg.attention_bias:  # [L, out], split like the rows of their matrices
        specs["layers"].update({"bq": P(None, q), "bk": P(None, kv), "bv": P(None, kv)})
    if cfg.qk_norm:  # [L, head_dim]: shared by every head, replicated
        specs["layers"].update({"q_norm": P(), "k_norm": P()})
    if cfg.family.sandwich_norms:  # [L, hidden] (Gemma), like the other norms
        specs["layers"].update({"post_attn_norm": P(), "post_mlp_norm": P()})
    if has_lm_head:
        specs["lm_head"] = P(v, None)
    return specs


def cache_spec(cfg: ModelConfig, mesh: Mesh) -> P:
    """KV cache [layers, kv_heads, batch or pages, slots, head_dim]: split on KV heads when they divide."""
    return P(None, _split(cfg.num_kv_heads, mesh), None, None, None)


def _fit(spec: P, shape: tuple[int, ...], mesh: Mesh) -> P:
    """Drop the split on any axis the device count does not divide (e.g. packed block scales)."""
    return P(*(a if a is None or shape[i] % mesh.shape[AXIS] == 0 else None for i, a in enumerate(spec)))


def shard_params(params: dict[str, Any], cfg: ModelConfig, mesh: Mesh) -> dict[str, Any]:
    """Place the parameter pytree on the mesh; a packed matrix's codes and scales follow its spec."""
    from memloop.engine.model.blocks import BlockMatrix

    if any(isinstance(x, BlockMatrix) for x in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, BlockMatrix))):
        raise RequestError(
            "block-form (GGUF) weights run on one CPU device only; load the model with "
            "blocks=False to place it on a mesh."
        )
    specs = param_specs(cfg, mesh, "lm_head" in params)
    if isinstance(params["layers"], (list, tuple)):  # unrolled: each layer's spec without the layer axis
        one = {k: P(*s[1:]) if len(s) else s for k, s in specs["layers"].items()}
        specs["layers"] = [one] * len(params["layers"])

    def put(spec: P, x: Any) -> Any:
        if isinstance(x, dict):
            return {k: put(spec, v) for k, v in x.items()}
        return jax.device_put(x, NamedSharding(mesh, _fit(spec, x.shape, mesh)))

    return jax.tree.map(put, specs, params, is_leaf=lambda s: isinstance(s, P))


def shard_cache(cache: Any, cfg: ModelConfig, mesh: Mesh) -> Any:
    """Stacked [L, ...] caches use `cache_spec`; per-layer arrays the same spec without the layer axis;
    an int8 cache's scales (memloop.engine.cache.kv_pages, the pools' shape without head_dim) the same without its
    last."""
    spec = cache_spec(cfg, mesh)

    def put(name: str, x: jax.Array) -> jax.Array:
        full = spec if name in ("k", "v") else P(*spec[:-1])
        stacked = x.ndim == len(full)
        return jax.device_put(x, NamedSharding(mesh, full if stacked else P(*full[1:])))

    return {name: jax.tree.map(lambda x, n=name: put(n, x), arrays) for name, arrays in cache.items()}


def constrain(x: jax.Array, *spec: str | None) -> jax.Array:
    """Annotate an activation's layout when a `tp` mesh is active; dims not divisible stay whole."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or AXIS not in mesh.axis_names:
        return x
    n = mesh.shape[AXIS]
    fixed = tuple(s if s is None or x.shape[i] % n == 0 else None for i, s in enumerate(spec))
    return jax.lax.with_sharding_constraint(x, P(*fixed))
