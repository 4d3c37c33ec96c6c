#!/usr/bin/env python3
"""Write random-weight Qwen3-shaped model folders for `vllm serve --load-format dummy`.

No model hub on the device machine: each folder holds a Qwen3 config with the
real shapes (so step times are real) and a word-level tokenizer whose
vocabulary is the synthetic-prompt words of benchgate's workloads padded to
the model's 151936 ids (every word one token, so benchgate fits prompts to
exact token counts, and every id the random model emits detokenizes).

    python3 lab/gpu/make_models.py /tmp/bg/models

Needs transformers and tokenizers (the device image has both).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# name: hidden, layers, heads, kv heads, intermediate, tied embeddings (from the
# released Qwen3 configs)
SHAPES = {
    "qwen3-14b": (5120, 40, 40, 8, 17408, False),
    "qwen3-4b": (2560, 36, 32, 8, 9728, True),
    "qwen3-0.6b": (1024, 28, 16, 8, 3072, True),
}
# Folders written as pre-quantised checkpoints: the shape they take and the
# quantization_config of the released Qwen3-4B-FP8 (block-wise FP8, dynamic
# activations), so that vLLM loads them as FP8 without being asked (issue 34,
# point 4: vLLM 0.24.0-0.26.0 cannot quantize a draft online). With
# --load-format dummy the FP8 weights and their scales are random too.
QUANTISED = {
    "qwen3-4b-fp8": (
        "qwen3-4b",
        {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
        },
    ),
}
VOCAB = 151936
SPECIALS = ["<|endoftext|>", "[UNK]"]


def words() -> list[str]:
    from benchgate.workload import SYNTHETIC_WORDS

    out: list[str] = []
    for word in SYNTHETIC_WORDS:
        if word not in out:
            out.append(word)
    return out


def tokenizer_files(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab: dict[str, int] = {}
    for tok in SPECIALS + words() + [",", ".", ":", ";", "?", "!", "-", "'", '"']:
        vocab.setdefault(tok, len(vocab))
    i = 0
    while len(vocab) < VOCAB:
        vocab.setdefault(f"w{i}", len(vocab))
        i += 1
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|endoftext|>",
                "unk_token": "[UNK]",
                "pad_token": "<|endoftext|>",
                "model_max_length": 4096,
                "clean_up_tokenization_spaces": False,
            },
            indent=1,
        )
    )
    (folder / "special_tokens_map.json").write_text(
        json.dumps(
            {"eos_token": "<|endoftext|>", "unk_token": "[UNK]", "pad_token": "<|endoftext|>"}
        )
    )


def config(name: str, folder: Path) -> None:
    from transformers import Qwen3Config

    shape, quantization = QUANTISED.get(name, (name, None))
    hidden, layers, heads, kv, inter, tied = SHAPES[shape]
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=128,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        architectures=["Qwen3ForCausalLM"],
        torch_dtype="bfloat16",
    )
    cfg.save_pretrained(str(folder))
    if quantization:
        written = json.loads((folder / "config.json").read_text())
        written["quantization_config"] = quantization
        (folder / "config.json").write_text(json.dumps(written, indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))


def main(out: str) -> int:
    root = Path(out)
    for name in [*SHAPES, *QUANTISED]:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        config(name, folder)
        tokenizer_files(folder)
        print("wrote", folder, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/bg/models"))
