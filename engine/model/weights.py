"""Read Llama/Qwen2/Qwen3/Mistral/Gemma 2/Gemma 3 weights from a GGUF file or a Hugging Face directory into one
parameter layout.

The layout (numpy arrays; matrices output-major [out, in], as GGUF and Hugging Face store them, so
loading never transposes and `memloop.engine.model.decoder.matmul` computes x @ w.T; on XLA:CPU this orientation
also ran batch-32 layer matmuls 18% faster than input-major):

    embed       (vocab, hidden)
    final_norm  (hidden,)
    lm_head     (vocab, hidden)          only when the output head is not tied to `embed`
    layers/     every per-layer tensor stacked on a leading `num_layers` axis:
      attn_norm (L, hidden)      wq (L, heads*hd, hidden)   wk, wv (L, kv_heads*hd, hidden)
      wo        (L, hidden, heads*hd)    mlp_norm (L, hidden)
      w_gate, w_up (L, ffn, hidden)      w_down (L, hidden, ffn)
      bq (L, heads*hd)   bk, bv (L, kv_heads*hd)   only with q/k/v biases (Qwen2: ModelConfig.attention_bias)
      q_norm, k_norm (L, hd)                        only with per-head q/k RMSNorm (Qwen3, Gemma 3: ModelConfig.qk_norm)
      post_attn_norm, post_mlp_norm (L, hidden)     only with Family.sandwich_norms (Gemma)

Norm weights are kept as the checkpoint's transformers layout stores them: Gemma's are w in a
(1 + w) scale; llama.cpp's converter writes 1 + w into Gemma GGUFs, so the GGUF loader subtracts the
1 again (as transformers' GGUF loader does) and one RMSNorm (`memloop.engine.model.decoder.rms_norm`) reads both.

GGUF de-quantisation uses the `gguf` package's reference numpy kernels (Q4_0/Q4_1/Q8_0/Q4_K/Q6_K/
F16/F32 and the rest it implements). llama.cpp stores a Llama's Q and K rows permuted for its
interleaved rotary kernel; they are permuted back here so one rotate-half RoPE serves both sources
(Qwen2/Qwen3 GGUFs are not permuted: llama.cpp runs them with NEOX rotary, `Family.gguf_qk_permuted`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np
from memloop.engine.errors import ModelFormatError, ModelNotFoundError
from memloop.engine.model.blocks import BLOCK, BlockMatrix, from_gguf_rows, has_block_form, nonfinite_blocks, row_bytes
from memloop.engine.model.config import FAMILIES, ModelConfig, config_from_gguf, config_from_hf

Params = dict[str, Any]
log = logging.getLogger(__name__)

SUPPORTED_QUANTS = (
    "F32",
    "F16",
    "BF16",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
)

_GGUF_LAYER = {  # GGUF per-block tensor -> (our name, is a matrix)
    "attn_norm": ("attn_norm", False),
    "attn_q": ("wq", True),
    "attn_k": ("wk", True),
    "attn_v": ("wv", True),
    "attn_output": ("wo", True),
    "ffn_norm": ("mlp_norm", False),
    "ffn_gate": ("w_gate", True),
    "ffn_up": ("w_up", True),
    "ffn_down": ("w_down", True),
}
# q/k/v biases (Qwen2): (our name, is a matrix); the key is the tensor name's per-layer suffix.
_GGUF_BIAS = {"attn_q.bias": ("bq", False), "attn_k.bias": ("bk", False), "attn_v.bias": ("bv", False)}
_HF_BIAS = {
    "self_attn.q_proj.bias": ("bq", False),
    "self_attn.k_proj.bias": ("bk", False),
    "self_attn.v_proj.bias": ("bv", False),
}
# per-head q/k RMSNorm weights (Qwen3), keyed like the biases.
_GGUF_QK_NORM = {"attn_q_norm": ("q_norm", False), "attn_k_norm": ("k_norm", False)}
_HF_QK_NORM = {"self_attn.q_norm": ("q_norm", False), "self_attn.k_norm": ("k_norm", False)}
# Gemma's norms after attention and around the MLP. Its HF `post_attention_layernorm` is the norm of the
# attention *output* (Llama's of that name is the MLP's input norm), so Gemma maps its four norms apart.
_GGUF_SANDWICH = {"post_attention_norm": ("post_attn_norm", False), "post_ffw_norm": ("post_mlp_norm", False)}
_HF_GEMMA_NORMS = {
    "post_attention_layernorm": ("post_attn_norm", False),
    "pre_feedforward_layernorm": ("mlp_norm", False),
    "post_feedforward_layernorm": ("post_mlp_norm", False),
}
_HF_LAYER = {
    "input_layernorm": ("attn_norm", False),
    "self_attn.q_proj": ("wq", True),
    "self_attn.k_proj": ("wk", True),
    "self_attn.v_proj": ("wv", True),
    "self_attn.o_proj": ("wo", True),
    "post_attention_layernorm": ("mlp_norm", False),
    "mlp.gate_proj": ("w_gate", True),
    "mlp.up_proj": ("w_up", True),
    "mlp.down_proj": ("w_down", True),
}


def layer_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Per-layer shapes of the stacked tensors (without the leading layer axis); matrices [out, in]."""
    d, f, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    bias = {"bq": (cfg.num_heads * hd,), "bk": (cfg.num_kv_heads * hd,), "bv": (cfg.num_kv_heads * hd,)}
    norms = {"q_norm": (hd,), "k_norm": (hd,)}
    sandwich = {"post_attn_norm": (d,), "post_mlp_norm": (d,)}
    return (
        (bias if cfg.attention_bias else {})
        | (norms if cfg.qk_norm else {})
        | (sandwich if cfg.family.sandwich_norms else {})
        | {
            "attn_norm": (d,),
            "wq": (cfg.num_heads * hd, d),
            "wk": (cfg.num_kv_heads * hd, d),
            "wv": (cfg.num_kv_heads * hd, d),
            "wo": (d, cfg.num_heads * hd),
            "mlp_norm": (d,),
            "w_gate": (f, d),
            "w_up": (f, d),
            "w_down": (d, f),
        }
    )


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (rows are outputs: n_heads * head_dim)."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


PACKABLE = ("Q4_0", "Q4_1", "Q8_0")


def unpack_blocks(data: np.ndarray, qname: str, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split Q4_0/Q4_1/Q8_0 rows into int8 codes [rows, cols] and f32 block scale/offset [rows, cols/32],
    such that value = code * scale + offset reproduces the `gguf` de-quantisation exactly."""
    nb = cols // BLOCK
    blocks = np.asarray(data, dtype=np.uint8).reshape(rows, nb, -1)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    if qname == "Q8_0":
        q = blocks[..., 2:].copy().view(np.int8)
        m = np.zeros_like(d)
    else:
        start = 4 if qname == "Q4_1" else 2
        qs = blocks[..., start:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int8)
        if qname == "Q4_1":
            m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        else:
            q = q - 8
            m = np.zeros_like(d)
    return q.reshape(rows, cols), d, m


def check_finite(name: str, source: str, values: np.ndarray, what: str = "values") -> None:
    """Refuse a tensor holding NaN or infinity (e.g. bytes overwritten with 0xFF): once loaded, it would
    turn every answer into NaN logits, which sampling hides as an empty completion."""
    bad = int(values.size - np.count_nonzero(np.isfinite(values)))
    if bad:
        raise ModelFormatError(
            f"tensor {name} in {source} holds {bad} non-finite {what} (NaN or infinity); the "
            "file is corrupt: download or convert it again."
        )


def _field_value(field: Any) -> Any:
    value = field.contents()
    return value


def _open_gguf(path: Path):
    import gguf

    try:
        return gguf.GGUFReader(path)
    except Exception as exc:  # the reader raises ValueError/IndexError/struct errors on bad bytes
        raise ModelFormatError(
            f"{path} is not a readable GGUF file ({type(exc).__name__}: {exc}). It is corrupt or truncated; "
            "download or copy it again."
        ) from exc


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """Scalar/string metadata of a GGUF file (large token arrays skipped)."""
    reader = _open_gguf(path)
    return _scalar_metadata(reader)


def _scalar_metadata(reader: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml.") and key in (
            "tokenizer.ggml.tokens",
            "tokenizer.ggml.token_type",
            "tokenizer.ggml.merges",
            "tokenizer.ggml.scores",
        ):
            continue
        try:
            meta[key] = _field_value(field)
        except Exception:  # a malformed optional field: leave it out, required ones are checked later
            continue
    return meta


def load_gguf(
    path: Path, dtype: Any = np.float32, packed: bool = False, blocks: bool = False
) -> tuple[ModelConfig, Params]:
    """De-quantise a Llama GGUF into the parameter layout above, cast to `dtype`.

    `blocks=True` keeps every Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q5_K/Q6_K matrix (layer matrices, embedding, untied
    head) as its raw GGUF bytes, an `memloop.engine.model.blocks.BlockMatrix`; a layer matrix then becomes a list with
    one entry
    per layer (block types may differ between layers), each a BlockMatrix or a dense array.

    `packed=True` keeps per-layer matrices stored as Q4_0/Q4_1/Q8_0 in every layer as
    {"q": int8 [L,out,in], "d": f32 [L,out,in/32], "m": f32 [L,out,in/32]}: a quarter of the memory
    traffic per decode step, de-quantised inside the jitted step to exactly the same values.
    """
    from gguf.quants import dequantize

    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(f"model file {path} does not exist; check the path in your config.")
    reader = _open_gguf(path)
    meta = _scalar_metadata(reader)
    tensors = {t.name: t for t in reader.tensors}
    # llama.cpp wrote Gemma's norms as 1 + w; the layout keeps w (see the module docstring).
    arch = meta.get("general.architecture")
    norm_offset = FAMILIES[arch].norm_offset if arch in FAMILIES else 0.0
    if "token_embd.weight" not in tensors:
        raise ModelFormatError(f"{path} has no token_embd.weight tensor; it is not a Llama-family GGUF.")

    def read(name: str) -> np.ndarray:
        if name not in tensors:
            raise ModelFormatError(f"{path} lacks tensor {name!r}; the file is incomplete or of another architecture.")
        t = tensors[name]
        qname = t.tensor_type.name
        if qname not in SUPPORTED_QUANTS:
            raise ModelFormatError(
                f"tensor {name} in {path} uses quantisation {qname}, which memloop cannot de-quantise "
                f"(supported: {', '.join(SUPPORTED_QUANTS)}). Re-quantise the model, e.g. to Q8_0 or Q4_K_M."
            )
        expected = int(np.prod([int(x) for x in t.shape]))
        try:
            arr = dequantize(t.data, t.tensor_type)
        except Exception as exc:
            raise ModelFormatError(f"tensor {name} in {path} cannot be decoded ({exc}); the file is corrupt.") from exc
        if arr.size != expected:
            raise ModelFormatError(
                f"tensor {name} in {path} has {arr.size} values, expected {expected}; the file is truncated."
            )
        arr = np.asarray(arr, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
        check_finite(name, str(path), arr)
        return arr - norm_offset if norm_offset and name.endswith("norm.weight") else arr

    factors = tuple(float(x) for x in read("rope_freqs.weight")) if "rope_freqs.weight" in tensors else None
    source = str(path)
    # The vocabulary size from the tensor's shape (GGUF lists dimensions innermost first): a block-form
    # load then never de-quantises the embedding (Qwen2.5's 151k-row tables: a minute and 0.9 GB each).
    vocab = int(tensors["token_embd.weight"].shape[-1])
    cfg = config_from_gguf(meta, vocab, "output.weight" in tensors, factors, source)

    def embed() -> np.ndarray:
        table = read("token_embd.weight")
        if table.shape != (cfg.vocab_size, cfg.hidden_size):
            raise ModelFormatError(
                f"{path}: token_embd has shape {table.shape}, metadata says {(cfg.vocab_size, cfg.hidden_size)}."
            )
        return table

    permuted = cfg.family.gguf_qk_permuted

    def per_layer(i: int, key: str) -> np.ndarray:
        w = read(f"blk.{i}.{key}" if key.endswith(".bias") else f"blk.{i}.{key}.weight")
        if permuted and key in ("attn_q", "attn_q.bias"):
            w = unpermute_qk(w, cfg.num_heads)
        elif permuted and key in ("attn_k", "attn_k.bias"):
            w = unpermute_qk(w, cfg.num_kv_heads)
        return w

    # Per-family extra vectors (q/k/v biases, q/k norms, Gemma's post-norms), loaded like the layer norms.
    biases = (
        (_GGUF_BIAS if cfg.attention_bias else {})
        | (_GGUF_QK_NORM if cfg.qk_norm else {})
        | (_GGUF_SANDWICH if cfg.family.sandwich_norms else {})
    )
    mapping = dict(_GGUF_LAYER) | biases
    packable: dict[str, str] = {}
    if blocks:
        return cfg, _with_blocks(cfg, tensors, embed, read, per_layer, dtype, source, biases)
    if packed:
        for key, (name, matrix) in _GGUF_LAYER.items():
            kinds = {
                tensors.get(f"blk.{i}.{key}.weight").tensor_type.name if f"blk.{i}.{key}.weight" in tensors else None
                for i in range(cfg.num_layers)
            }
            if matrix and len(kinds) == 1 and next(iter(kinds)) in PACKABLE:
                packable[key] = next(iter(kinds))
                del mapping[key]
    params = _assemble(
        cfg,
        dtype,
        embed(),
        read("output_norm.weight"),
        None if cfg.tie_word_embeddings else read("output.weight"),
        per_layer,
        mapping,
        source,
    )
    shapes = layer_shapes(cfg)
    for key, qname in packable.items():
        name = _GGUF_LAYER[key][0]
        d_out, d_in = shapes[name]
        if d_in % BLOCK:
            raise ModelFormatError(f"{source}: {key} input width {d_in} is not a multiple of {BLOCK}.")
        q = np.empty((cfg.num_layers, d_out, d_in), np.int8)
        sc = np.empty((cfg.num_layers, d_out, d_in // BLOCK), np.float32)
        off = np.empty_like(sc)
        heads = {"attn_q": cfg.num_heads, "attn_k": cfg.num_kv_heads}.get(key) if permuted else None
        for i in range(cfg.num_layers):
            t = tensors[f"blk.{i}.{key}.weight"]
            qi, di, mi = unpack_blocks(t.data, qname, d_out, d_in)
            check_finite(t.name, source, di, "block scales")
            check_finite(t.name, source, mi, "block offsets")
            if heads is not None:  # permute whole output rows back, as for dense tensors
                qi, di, mi = (unpermute_qk(a, heads) for a in (qi, di, mi))
            q[i], sc[i], off[i] = qi, di, mi
        params["layers"][name] = {"q": q, "d": sc, "m": off}
    return cfg, params


def _with_blocks(
    cfg: ModelConfig,
    tensors: dict[str, Any],
    embed: Callable[[], np.ndarray],
    read: Callable[[str], np.ndarray],
    per_layer: Callable[[int, str], np.ndarray],
    dtype: Any,
    source: str,
    biases: dict[str, tuple[str, bool]],
) -> Params:
    """The parameter layout with block-form matrices where the file has them (see load_gguf)."""
    shapes = layer_shapes(cfg)
    dense: dict[str, int] = {}  # block types kept dense (no kernel form) -> matrices

    def blocked(name: str, rows: int, cols: int, permute_heads: int | None = None) -> Any:
        t = tensors[name]
        qtype = t.tensor_type.name
        if not has_block_form(qtype, cols):
            dense[qtype] = dense.get(qtype, 0) + 1
            return None
        if int(np.asarray(t.data).size) != rows * row_bytes(qtype, cols):
            raise ModelFormatError(
                f"tensor {name} in {source} has {np.asarray(t.data).size} bytes, expected "
                f"{rows * row_bytes(qtype, cols)}; the file is truncated."
            )
        bm = from_gguf_rows(t.data, qtype, rows, cols)
        bad = nonfinite_blocks(bm.raw, qtype)
        if bad:
            raise ModelFormatError(
                f"tensor {name} in {source} holds {bad} blocks whose scale is not finite (NaN or "
                "infinity); the file is corrupt: download or convert it again."
            )
        if permute_heads is not None:  # whole output rows move, as for dense tensors
            bm = type(bm)(np.ascontiguousarray(unpermute_qk(bm.raw, permute_heads)), bm.qtype, bm.shape)
        return bm

    matrices = {key: name for key, (name, matrix) in _GGUF_LAYER.items() if matrix}
    vocab, hidden = cfg.vocab_size, cfg.hidden_size
    emb = blocked("token_embd.weight", vocab, hidden)  # de-quantised only when it has no block form
    head = None if cfg.tie_word_embeddings else blocked("output.weight", vocab, hidden)
    if head is None and not cfg.tie_word_embeddings:
        head = read("output.weight")
    params = _assemble(
        cfg,
        dtype,
        embed() if emb is None else emb,
        read("output_norm.weight"),
        head,
        per_layer,
        {k: v for k, v in _GGUF_LAYER.items() if k not in matrices} | biases,
        source,
    )
    heads = {"attn_q": cfg.num_heads, "attn_k": cfg.num_kv_heads} if cfg.family.gguf_qk_permuted else {}
    for key, name in matrices.items():
        d_out, d_in = shapes[name]
        per: list[Any] = []
        for i in range(cfg.num_layers):
            tname = f"blk.{i}.{key}.weight"
            if tname not in tensors:
                raise ModelFormatError(
                    f"{source} lacks tensor {tname!r}; the file is incomplete or of another architecture."
                )
            bm = blocked(tname, d_out, d_in, heads.get(key))
            if bm is None:
                w = per_layer(i, key)
                if w.shape != (d_out, d_in):
                    raise ModelFormatError(f"{source}: layer {i} {key} has shape {w.shape}, expected {(d_out, d_in)}.")
                bm = np.asarray(w, dtype=dtype)
            per.append(bm)
        params["layers"][name] = per
    if dense:  # said, not silent: these matrices read 4 bytes per weight at decode
        log.info(
            "%s: %s matrices have no CPU-kernel block form; de-quantised to dense f32 (exact)",
            source,
            ", ".join(f"{n} {q}" for q, n in sorted(dense.items())),
        )
    return params


def _assemble(
    cfg: ModelConfig,
    dtype: Any,
    embed: np.ndarray | BlockMatrix,
    final_norm: np.ndarray,
    head: np.ndarray | BlockMatrix | None,
    per_layer: Callable[[int, str], np.ndarray],
    mapping: dict[str, tuple[str, bool]],
    source: str,
) -> Params:
    """Fill pre-allocated stacked arrays layer by layer (no second full copy of the weights); an
    embedding or head in block form is kept as it is."""
    shapes = layer_shapes(cfg)
    layers = {name: np.empty((cfg.num_layers, *shapes[name]), dtype=dtype) for name, _ in mapping.values()}
    for i in range(cfg.num_layers):
        for key, (name, _matrix) in mapping.items():
            w = per_layer(i, key)
            if w.shape != shapes[name]:
                raise ModelFormatError(f"{source}: layer {i} {key} has shape {w.shape}, expected {shapes[name]}.")
            layers[name][i] = w
    params: Params = {
        "embed": embed if isinstance(embed, BlockMatrix) else np.asarray(embed, dtype=dtype),
        "final_norm": np.asarray(final_norm, dtype=dtype).reshape(cfg.hidden_size),
        "layers": layers,
    }
    if head is not None:
        if head.shape != (cfg.vocab_size, cfg.hidden_size):
            raise ModelFormatError(
                f"{source}: output head has shape {head.shape}, expected {(cfg.vocab_size, cfg.hidden_size)}."
            )
        params["lm_head"] = head if isinstance(head, BlockMatrix) else np.asarray(head, dtype=dtype)
    return params


def _hf_dir(path: Path) -> tuple[ModelConfig, list[Path]]:
    """The config and safetensors files of a Hugging Face model directory, or the error naming what is missing."""
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ModelNotFoundError(
            f"{path} has no config.json; point the model path at a Hugging Face model directory or a .gguf file."
        )
    try:
        hf_cfg = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelFormatError(f"{cfg_file} is not valid JSON ({exc}).") from exc
    cfg = config_from_hf(hf_cfg, str(path))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(f"{path} has no *.safetensors weights; only safetensors checkpoints are supported.")
    return cfg, files


def check_weights(path: Path) -> None:
    """Cheap checks of a model path before anything loads it (a driver runs them before starting
    actors): it exists, a file starts with the GGUF magic, a directory holds a supported config and
    safetensors. Raises the same named errors the loaders raise. A short model
    name (memloop.engine.assets.MODELS) is resolved first, joining its parts on first use."""
    from memloop.engine.assets import resolve_model

    path = resolve_model(path)
    if not path.exists():
        raise ModelNotFoundError(
            f"model path {path} does not exist; give a .gguf file or a Hugging Face model directory."
        )
    if path.is_dir():
        _hf_dir(path)
        return
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelFormatError(
            f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); give a .gguf "
            "file or a Hugging Face model directory."
        )
    # The tensors are not listed here: parsing a GGUF's header reads its whole vocabulary (12 s for
    # Qwen2.5's 151k tokens); the loader in the actor names a missing tensor in one line as well.


def load_hf_dir(path: Path, dtype: Any = np.float32) -> tuple[ModelConfig, Params]:
    """Load a Hugging Face Llama directory: config.json plus one or more *.safetensors files."""
    from safetensors import safe_open

    path = Path(path)
    cfg, files = _hf_dir(path)
    handles: dict[str, Any] = {}
    opened = []
    try:
        for f in files:
            try:
                h = safe_open(str(f), framework="flax")
            except Exception as exc:
                raise ModelFormatError(f"{f} is not a readable safetensors file ({exc}); download it again.") from exc
            opened.append(h)
            for k in h.keys():
                handles[k] = h

        def read(name: str) -> np.ndarray:
            if name not in handles:
                raise ModelFormatError(f"{path} lacks tensor {name!r}; the checkpoint is incomplete or not Llama.")
            try:
                arr = np.asarray(handles[name].get_tensor(name).astype("float32"))
            except Exception as exc:
                raise ModelFormatError(f"tensor {name} in {path} cannot be read ({exc}); the file is corrupt.") from exc
            check_finite(name, str(path), arr)
            return arr

        head = None
        if not cfg.tie_word_embeddings:
            head = read("lm_head.weight")
        mapping = (
            _HF_LAYER
            | (_HF_BIAS if cfg.attention_bias else {})
            | (_HF_QK_NORM if cfg.qk_norm else {})
            | (_HF_GEMMA_NORMS if cfg.family.sandwich_norms else {})
        )
        params = _assemble(
            cfg,
            dtype,
            read("model.embed_tokens.weight"),
            read("model.norm.weight"),
            head,
            lambda i, key: read(f"model.layers.{i}.{key}" + ("" if key.endswith(".bias") else ".weight")),
            mapping,
            str(path),
        )
    finally:
        opened.clear()
    return cfg, params


def load_weights(
    path: Path, dtype: Any = np.float32, packed: bool = False, blocks: bool = False
) -> tuple[ModelConfig, Params]:
    """Dispatch on the path: a `.gguf` file (optionally packed or in block form, see load_gguf) or a
    Hugging Face directory (always dense); or a short model name (memloop.engine.assets.MODELS)."""
    from memloop.engine.assets import resolve_model

    path = resolve_model(path)
    if not path.exists():
        raise ModelNotFoundError(
            f"model path {path} does not exist; give a .gguf file or a Hugging Face model directory."
        )
    if path.is_dir():
        return load_hf_dir(path, dtype)
    return load_gguf(path, dtype, packed, blocks)
