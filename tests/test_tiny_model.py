"""Checks on the tiny offline models written by scripts/make_tiny_model.py.

Building them takes ~15 s, so these tests read an existing build: ``$BENCHGATE_TINY_MODELS``
or ``.cache/models`` in the repository (``.venv/bin/python scripts/make_tiny_model.py --out
.cache/models``), and skip when there is none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from _load import load_file

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
np = pytest.importorskip("numpy")

from safetensors import safe_open  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "make_tiny_model.py"
MODELS = Path(os.environ.get("BENCHGATE_TINY_MODELS", ROOT / ".cache" / "models"))
TARGET = MODELS / "tiny-llama"
DRAFT = MODELS / "tiny-llama-draft"
CPU_HEAD_SIZES = {32, 64, 80, 96, 112, 128}

pytestmark = pytest.mark.skipif(
    not ((TARGET / ".complete").is_file() and (DRAFT / ".complete").is_file()),
    reason=f"no tiny models in {MODELS}; run scripts/make_tiny_model.py --out {MODELS}",
)


def _config(path: Path) -> dict[str, Any]:
    return json.loads((path / "config.json").read_text())


def _tensors(path: Path) -> dict[str, Any]:
    with safe_open(str(path / "model.safetensors"), framework="np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118


def test_markers_match_the_generator() -> None:
    module = load_file(SCRIPT, "make_tiny_model")
    digest = module.params_hash()
    assert module.is_complete(TARGET, digest), "stale build: rerun make_tiny_model.py"
    assert module.is_complete(DRAFT, digest), "stale build: rerun make_tiny_model.py"


def test_configs_are_servable_on_cpu() -> None:
    target, draft = _config(TARGET), _config(DRAFT)
    assert target["architectures"] == ["LlamaForCausalLM"]
    assert (target["hidden_size"], target["num_hidden_layers"]) == (128, 4)
    assert draft["num_hidden_layers"] == 2
    assert target["head_dim"] in CPU_HEAD_SIZES
    assert target["max_position_embeddings"] >= 1024
    for key in ("vocab_size", "hidden_size", "head_dim", "bos_token_id", "eos_token_id"):
        assert draft[key] == target[key], key


def test_tokenizer_round_trip_and_chat_template() -> None:
    jinja2 = pytest.importorskip("jinja2")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TARGET / "tokenizer.json"))
    tok_cfg = json.loads((TARGET / "tokenizer_config.json").read_text())
    assert tok.get_vocab_size() == _config(TARGET)["vocab_size"]
    assert tok.token_to_id(tok_cfg["bos_token"]) == _config(TARGET)["bos_token_id"]
    assert tok.token_to_id(tok_cfg["eos_token"]) == _config(TARGET)["eos_token_id"]
    text = "def main():\n    print('héllo, wörld')  # 42\n"
    ids = tok.encode(text).ids
    assert ids[0] == _config(TARGET)["bos_token_id"]
    assert tok.decode(ids, skip_special_tokens=True) == text
    prompt = (
        jinja2.Environment()
        .from_string(tok_cfg["chat_template"])
        .render(
            messages=[{"role": "user", "content": "hi"}],
            add_generation_prompt=True,
            bos_token=tok_cfg["bos_token"],
            eos_token=tok_cfg["eos_token"],
        )
    )
    assert prompt == "<s><|user|>\nhi</s>\n<|assistant|>\n"
    # Role markers are single special tokens, not spelled out byte by byte.
    prompt_ids = tok.encode(prompt, add_special_tokens=False).ids
    for marker in ("<s>", "<|user|>", "</s>", "<|assistant|>"):
        assert tok.token_to_id(marker) in prompt_ids, marker


def test_draft_shares_weights_with_target() -> None:
    target, draft = _tensors(TARGET), _tensors(DRAFT)
    assert set(draft) < set(target)
    for name, tensor in draft.items():
        assert np.array_equal(tensor, target[name]), name
    assert "model.layers.2.self_attn.o_proj.weight" in target
    assert not any(name.startswith("model.layers.2.") for name in draft)
