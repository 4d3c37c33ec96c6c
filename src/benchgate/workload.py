"""Named, versioned benchmark workloads.

A workload file (YAML, in ``workloads/``) fixes everything that decides what a
benchmark measures: prompt source and lengths, sampling, concurrency or
request rate, requests per trial, warm-up and number of trials.  Its
``hash`` (sha256 of the canonical JSON of the parsed workload) is recorded in
every result, so two results are only compared when they measured the same
thing.

A workload may carry ``stages``: a list of named load points run in order
(single stream, a fixed concurrency, a request rate with SLOs, ...). Each
stage is the top-level workload with the keys it names replaced
(``STAGE_KEYS``), and may carry a ``gate`` block (its own limit, metrics,
critical metrics and latency statistic) that the judge reads
(``benchgate.stages``). A workload without ``stages`` is one stage and
hashes exactly as before stages existed; the gate blocks are left out of
the hash (they decide how a result is judged, not what is measured)::

    stages:
      - name: single
        concurrency: 1
      - name: busy
        concurrency: 4
        gate: {max_regression_pct: 10, critical: [output_tokens_per_s, ttft_ms]}

Target-side code: keep it Python 3.9 compatible.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

WORKLOAD_SCHEMA = "benchgate.workload/1"
APIS = ("completions", "chat")
PROMPT_SOURCES = ("synthetic", "file", "sharegpt", "jsonl")
# Where each request's max_tokens comes from: the workload's output_len, or the
# length of the sample's own answer (sources that have answers).
OUTPUT_LENGTHS = ("workload", "sample")
SAMPLE_SOURCES = ("sharegpt", "jsonl")

# Overrides accepted from the CLI and the Ansible module.
OVERRIDABLE = (
    "concurrency",
    "num_requests",
    "trials",
    "input_len",
    "output_len",
    "warmup",
    "request_rate",
    "timeout_s",
    "slo",
)
# Per-request service-level objectives (ms) a workload may set; goodput counts
# the completed requests that meet all of them.
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")
# Keys a stage may replace: the load, its length and what a trial tolerates.
# The prompt source, API and sampling stay those of the whole workload.
STAGE_KEYS = (*OVERRIDABLE, "burstiness", "max_error_rate")
# Keys of a stage's ``gate`` block (read by benchgate.stages, not hashed).
STAGE_GATE_KEYS = ("max_regression_pct", "metrics", "critical", "thresholds", "latency_stat")
# Same as benchgate.rules.LATENCY_STATS (not imported: this module runs on the target).
LATENCY_STATS = ("median", "mean", "p50", "p90", "p95", "p99")
# A stage name: it appears in trial records, ledger rows and ``rule: stage:<name>``.
STAGE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


class WorkloadError(ValueError):
    """A workload file or dict is malformed; ``field`` names the offending key."""

    def __init__(self, field_name: str, message: str, source: str | None = None) -> None:
        self.field = field_name
        self.source = source
        self.detail = message
        where = f"{source}: " if source else ""
        super().__init__(f"{where}workload field '{field_name}': {message}")


@dataclass(frozen=True)
class PromptSource:
    """Where prompts come from.

    * ``synthetic``: seeded random words, fitted to exactly ``input_len`` tokens
      with the served model's tokenizer (``benchgate.tokenfit``) before load
      is sent; about ``input_len`` tokens where the server has no tokenizer
      endpoint.
    * ``file``: a text file (prompts separated by blank lines) or a JSON list
      of strings; ``path`` is relative to the workload file.
    * ``sharegpt``: a ShareGPT-style JSON list of ``{"conversations": [...]}``;
      the first human turn of each conversation is the prompt, the turn that
      answers it its answer.
    * ``jsonl``: one JSON object per line, either ``{"prompt": ..., ...}``
      (answer in ``completion`` or ``response``, or its length in
      ``output_tokens``) or ``{"messages": [...]}`` (OpenAI chat format: the
      first user message is the prompt, the assistant message after it the
      answer).

    ``output_lengths``: ``workload`` (every request asks for the workload's
    ``output_len`` tokens) or ``sample`` (``sharegpt``/``jsonl`` only: each
    request asks for as many tokens as its sample's answer has, about 4
    characters a token, at most ``output_len``; samples without an answer
    ask for ``output_len``).
    """

    source: str = "synthetic"
    seed: int = 0
    path: str | None = None
    output_lengths: str = "workload"


@dataclass(frozen=True)
class Stage:
    """One named load point of a staged workload.

    ``overrides``: the keys of ``STAGE_KEYS`` this stage replaces (a ``None``
    value clears an optional key, e.g. ``request_rate: null``); ``gate``: the
    stage's judge settings (``STAGE_GATE_KEYS``), None for the judge's own.
    """

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, **self.overrides}
        if self.gate is not None:
            data["gate"] = dict(self.gate)
        return data


@dataclass(frozen=True)
class Workload:
    name: str
    version: int
    input_len: int
    output_len: int
    concurrency: int
    num_requests: int
    trials: int
    warmup: int = 0
    api: str = "completions"
    ignore_eos: bool = True
    temperature: float = 0.0
    max_error_rate: float = 0.0
    request_rate: float | None = None
    burstiness: float = 1.0
    timeout_s: float = 300.0
    prompts: PromptSource = field(default_factory=PromptSource)
    # {"ttft_ms": 500, "tpot_ms": 50}; None = no goodput figure.
    slo: dict[str, float] | None = None
    description: str = ""
    # Named load points run in order; () = the workload is one stage.
    stages: tuple[Stage, ...] = ()
    # Directory the workload was loaded from (resolves relative prompt paths).
    # Not part of the identity of the workload, so not hashed.
    base_dir: str | None = field(default=None, compare=False)

    def params(self) -> dict[str, Any]:
        """The parameters that define the measurement (what is hashed)."""
        data = dataclasses.asdict(self)
        data.pop("base_dir", None)
        data.pop("description", None)
        if data.get("slo") is None:
            # Absent, not null: workloads without an SLO keep the hash they had.
            data.pop("slo", None)
        if data["prompts"].get("output_lengths") == "workload":
            data["prompts"].pop("output_lengths")  # the default: the hash it had
        # Absent when unstaged, for the same reason.
        data.pop("stages", None)
        if self.stages:
            data["stages"] = [stage.to_dict() for stage in self.stages]
        return data

    @property
    def staged(self) -> bool:
        return bool(self.stages)

    @property
    def stage_names(self) -> list[str]:
        return [stage.name for stage in self.stages]

    def stage_workloads(self) -> list[tuple[str | None, Workload]]:
        """Every stage as a plain workload, in order: ``[(name, workload), ...]``.

        An unstaged workload is one stage: ``[(None, self)]``. A stage's
        workload has no stages of its own; it is validated like any workload.
        """
        if not self.stages:
            return [(None, self)]
        return [(stage.name, self._stage_workload(stage)) for stage in self.stages]

    def stage_workload(self, name: str) -> Workload:
        for stage in self.stages:
            if stage.name == name:
                return self._stage_workload(stage)
        raise KeyError(name)

    def _stage_workload(self, stage: Stage) -> Workload:
        data = self.params()
        data.pop("stages", None)
        data.update(stage.overrides)
        data["prompts"] = dataclasses.asdict(self.prompts)
        data["description"] = f"{self.description} (stage {stage.name})".strip()
        return parse_workload(data, base_dir=self.base_dir)

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON of what is measured.

        ``timeout_s`` is left out: it decides when to give up, not what is
        measured; so are the stages' ``gate`` blocks and their ``timeout_s``.
        """
        identity = self.params()
        identity.pop("timeout_s", None)
        for stage in identity.get("stages", []):
            stage.pop("gate", None)
            stage.pop("timeout_s", None)
        canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def with_overrides(self, **overrides: Any) -> Workload:
        """A copy with the given parameters replaced (``None`` values ignored).

        The result is validated again, so ``concurrency=0`` is an error naming
        ``concurrency``.  A changed workload gets a different ``hash``.  In a
        staged workload an override replaces the key in every stage too
        (``--trials 2`` means two trials per stage).
        """
        changes = {k: v for k, v in overrides.items() if v is not None}
        unknown = sorted(set(changes) - set(OVERRIDABLE))
        if unknown:
            raise WorkloadError(unknown[0], "cannot be overridden")
        if not changes:
            return self
        data = self.params()
        data.update(changes)
        for stage in data.get("stages", []):
            for key in changes:
                stage.pop(key, None)
        data["prompts"] = dataclasses.asdict(self.prompts)
        data["description"] = self.description
        return parse_workload(data, base_dir=self.base_dir)

    def to_dict(self) -> dict[str, Any]:
        data = self.params()
        data["description"] = self.description
        return data


# --------------------------------------------------------------------------- parsing


_INT_FIELDS = {
    "version": 1,
    "input_len": 1,
    "output_len": 1,
    "concurrency": 1,
    "num_requests": 1,
    "trials": 1,
    "warmup": 0,
}
_KNOWN = {f.name for f in dataclasses.fields(Workload)} - {"base_dir"} | {"schema"}
_STAGE_KNOWN = {"name", "gate", *STAGE_KEYS}


def _int(data: Mapping[str, Any], key: str, minimum: int, source: str | None) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(key, f"must be an integer, got {value!r}", source)
    if value < minimum:
        raise WorkloadError(key, f"must be >= {minimum}, got {value}", source)
    return value


def _float(
    data: Mapping[str, Any],
    key: str,
    default: float,
    source: str | None,
    minimum: float = 0.0,
    maximum: float | None = None,
    strict_min: bool = False,
    name: str | None = None,
) -> float:
    label = name or key
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WorkloadError(label, f"must be a number, got {value!r}", source)
    value = float(value)
    if not math.isfinite(value):
        # YAML's .nan/.inf are floats; NaN compares false with every limit.
        raise WorkloadError(label, f"must be a finite number, got {value}", source)
    if value < minimum or (strict_min and value == minimum):
        op = ">" if strict_min else ">="
        raise WorkloadError(label, f"must be {op} {minimum}, got {value}", source)
    if maximum is not None and value > maximum:
        raise WorkloadError(label, f"must be <= {maximum}, got {value}", source)
    return value


def _prompt_source(raw: Any, source: str | None) -> PromptSource:
    if raw is None:
        return PromptSource()
    if not isinstance(raw, Mapping):
        raise WorkloadError("prompts", f"must be a mapping, got {type(raw).__name__}", source)
    unknown = sorted(set(raw) - {"source", "seed", "path", "output_lengths"})
    if unknown:
        raise WorkloadError(f"prompts.{unknown[0]}", "unknown key", source)
    kind = raw.get("source", "synthetic")
    if kind not in PROMPT_SOURCES:
        raise WorkloadError(
            "prompts.source", f"must be one of {', '.join(PROMPT_SOURCES)}, got {kind!r}", source
        )
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise WorkloadError("prompts.seed", f"must be an integer, got {seed!r}", source)
    path = raw.get("path")
    if kind != "synthetic":
        if not isinstance(path, str) or not path:
            raise WorkloadError("prompts.path", f"is required for source {kind!r}", source)
    elif path is not None:
        raise WorkloadError("prompts.path", "is not valid for source 'synthetic'", source)
    lengths = raw.get("output_lengths", "workload")
    if lengths not in OUTPUT_LENGTHS:
        raise WorkloadError(
            "prompts.output_lengths",
            f"must be one of {', '.join(OUTPUT_LENGTHS)}, got {lengths!r}",
            source,
        )
    if lengths == "sample" and kind not in SAMPLE_SOURCES:
        raise WorkloadError(
            "prompts.output_lengths",
            f"'sample' needs a source with answers ({', '.join(SAMPLE_SOURCES)}), got {kind!r}",
            source,
        )
    return PromptSource(source=kind, seed=seed, path=path, output_lengths=lengths)


def _slo(raw: Any, source: str | None) -> dict[str, float] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise WorkloadError("slo", f"must be a mapping, got {type(raw).__name__}", source)
    unknown = sorted(set(raw) - set(SLO_KEYS))
    if unknown:
        known = ", ".join(SLO_KEYS)
        raise WorkloadError(f"slo.{unknown[0]}", f"unknown key (one of {known})", source)
    if not raw:
        raise WorkloadError("slo", f"needs at least one of {', '.join(SLO_KEYS)}", source)
    out = {}
    for key in SLO_KEYS:
        if key in raw:
            out[key] = _float(raw, key, 0.0, source, strict_min=True, name=f"slo.{key}")
    return out


def _stage_gate(raw: Any, where: str, source: str | None) -> dict[str, Any] | None:
    """A stage's ``gate`` block, checked for shape (metric names are the judge's to check)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise WorkloadError(where, f"must be a mapping, got {type(raw).__name__}", source)
    unknown = sorted(set(raw) - set(STAGE_GATE_KEYS))
    if unknown:
        known = ", ".join(STAGE_GATE_KEYS)
        raise WorkloadError(f"{where}.{unknown[0]}", f"unknown key (one of {known})", source)
    gate: dict[str, Any] = {}
    if "max_regression_pct" in raw:
        gate["max_regression_pct"] = _float(
            raw, "max_regression_pct", 0.0, source, name=f"{where}.max_regression_pct"
        )
    for key in ("metrics", "critical"):
        if key in raw:
            names = raw[key]
            if (
                not isinstance(names, list)
                or not names
                or not all(isinstance(n, str) and n.strip() for n in names)
            ):
                raise WorkloadError(
                    f"{where}.{key}",
                    f"must be a non-empty list of metric names, got {names!r}",
                    source,
                )
            gate[key] = [n.strip() for n in names]
    if "thresholds" in raw:
        limits = raw["thresholds"]
        if not isinstance(limits, Mapping) or not limits:
            raise WorkloadError(
                f"{where}.thresholds",
                f"must be a mapping of metric: percent, got {limits!r}",
                source,
            )
        gate["thresholds"] = {
            str(metric): _float(limits, metric, 0.0, source, name=f"{where}.thresholds.{metric}")
            for metric in limits
        }
    if "latency_stat" in raw:
        stat = raw["latency_stat"]
        if stat not in LATENCY_STATS:
            raise WorkloadError(
                f"{where}.latency_stat",
                f"must be one of {', '.join(LATENCY_STATS)}, got {stat!r}",
                source,
            )
        gate["latency_stat"] = stat
    return gate


def _stages(raw: Any, top: Mapping[str, Any], source: str | None) -> tuple[Stage, ...]:
    """Parse ``stages``; every stage is validated as the workload it makes.

    Errors name the stage by position, e.g. ``stages[1].concurrency``.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise WorkloadError("stages", "must be a non-empty list of stages", source)
    stages: list[Stage] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"stages[{i}]"
        if not isinstance(entry, Mapping):
            raise WorkloadError(where, f"must be a mapping, got {type(entry).__name__}", source)
        unknown = sorted(set(entry) - _STAGE_KNOWN)
        if unknown:
            known = ", ".join(("name", "gate", *STAGE_KEYS))
            raise WorkloadError(f"{where}.{unknown[0]}", f"unknown key (one of {known})", source)
        name = entry.get("name")
        if not isinstance(name, str) or not STAGE_NAME.fullmatch(name):
            raise WorkloadError(
                f"{where}.name",
                f"must be a letter then letters, digits, '_' or '-' (at most 32), got {name!r}",
                source,
            )
        if name in seen:
            raise WorkloadError(f"{where}.name", f"{name!r} names another stage too", source)
        seen.add(name)
        overrides = {k: entry[k] for k in STAGE_KEYS if k in entry}
        merged = {k: v for k, v in top.items() if k not in ("stages", "description")}
        merged.update(overrides)
        try:
            checked = parse_workload(merged, source=source)
        except WorkloadError as exc:
            if exc.field.split(".")[0] not in overrides:
                raise
            raise WorkloadError(f"{where}.{exc.field}", exc.detail, source) from exc
        # Keep the values as parsed (e.g. slo as floats), so the hash is canonical.
        normalized = {k: getattr(checked, k) for k in overrides}
        gate = _stage_gate(entry.get("gate"), f"{where}.gate", source)
        stages.append(Stage(name=name, overrides=normalized, gate=gate))
    return tuple(stages)


def parse_workload(data: Any, base_dir: str | None = None, source: str | None = None) -> Workload:
    """Validate a parsed workload mapping; errors name the field."""
    if not isinstance(data, Mapping):
        raise WorkloadError("<root>", f"must be a mapping, got {type(data).__name__}", source)
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        raise WorkloadError(unknown[0], "unknown key", source)
    schema = data.get("schema", WORKLOAD_SCHEMA)
    if schema != WORKLOAD_SCHEMA:
        raise WorkloadError("schema", f"must be {WORKLOAD_SCHEMA!r}, got {schema!r}", source)
    for key in (
        "name",
        "version",
        "input_len",
        "output_len",
        "concurrency",
        "num_requests",
        "trials",
    ):
        if key not in data or data[key] is None:
            raise WorkloadError(key, "is required", source)
    name = data["name"]
    if not isinstance(name, str) or not name.strip():
        raise WorkloadError("name", "must be a non-empty string", source)
    ints = {
        key: _int(data, key, minimum, source)
        for key, minimum in _INT_FIELDS.items()
        if key in data and data[key] is not None
    }
    api = data.get("api", "completions")
    if api not in APIS:
        raise WorkloadError("api", f"must be one of {', '.join(APIS)}, got {api!r}", source)
    ignore_eos = data.get("ignore_eos", True)
    if not isinstance(ignore_eos, bool):
        raise WorkloadError("ignore_eos", f"must be true or false, got {ignore_eos!r}", source)
    request_rate = data.get("request_rate")
    if request_rate is not None:
        request_rate = _float(data, "request_rate", 0.0, source, strict_min=True)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise WorkloadError("description", "must be a string", source)
    return Workload(
        name=name,
        version=ints["version"],
        input_len=ints["input_len"],
        output_len=ints["output_len"],
        concurrency=ints["concurrency"],
        num_requests=ints["num_requests"],
        trials=ints["trials"],
        warmup=ints.get("warmup", 0),
        api=api,
        ignore_eos=ignore_eos,
        temperature=_float(data, "temperature", 0.0, source, maximum=2.0),
        max_error_rate=_float(data, "max_error_rate", 0.0, source, maximum=1.0),
        request_rate=request_rate,
        burstiness=_float(data, "burstiness", 1.0, source, strict_min=True),
        timeout_s=_float(data, "timeout_s", 300.0, source, strict_min=True),
        prompts=_prompt_source(data.get("prompts"), source),
        slo=_slo(data.get("slo"), source),
        description=description,
        stages=_stages(data.get("stages"), data, source),
        base_dir=base_dir,
    )


def default_search_dirs() -> list[Path]:
    """Where ``load_workload`` looks up a workload given by name."""
    dirs = []
    env = os.environ.get("BENCHGATE_WORKLOADS_DIR")
    if env:
        dirs.append(Path(env))
    dirs.append(Path.cwd() / "workloads")
    # A source checkout / editable install: <repo>/src/benchgate/workload.py
    dirs.append(Path(__file__).resolve().parents[2] / "workloads")
    return dirs


def resolve_workload_path(name_or_path: str, search_dirs: Sequence[Path] | None = None) -> Path:
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if os.sep not in name_or_path and not path.suffix:
        for directory in search_dirs if search_dirs is not None else default_search_dirs():
            for suffix in (".yml", ".yaml"):
                candidate = directory / f"{name_or_path}{suffix}"
                if candidate.is_file():
                    return candidate
    raise WorkloadError("<file>", f"no workload file or name {name_or_path!r} found")


def load_workload(name_or_path: str | Path, search_dirs: Sequence[Path] | None = None) -> Workload:
    """Load a workload from a YAML file path, or by name from ``workloads/``."""
    path = resolve_workload_path(str(name_or_path), search_dirs)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise WorkloadError("<file>", f"not valid YAML: {exc}", str(path)) from exc
    return parse_workload(data, base_dir=str(path.parent.resolve()), source=str(path))


def workload_from_any(
    value: str | Path | Mapping[str, Any] | Workload, base_dir: str | None = None
) -> Workload:
    """A workload from a path/name, a mapping (e.g. Ansible vars) or a Workload."""
    if isinstance(value, Workload):
        return value
    if isinstance(value, Mapping):
        return parse_workload(value, base_dir=base_dir, source="<dict>")
    return load_workload(value)


# --------------------------------------------------------------------------- prompts


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``text`` for completions; also sent as a user message for chat."""

    text: str
    approx_tokens: int
    # This request's max_tokens; None: the workload's output_len.
    max_tokens: int | None = None


# Short, common words: with a BPE tokenizer each is about one token with its space.
_WORD_TEXT = (
    "the of and to in is for on that with as by at from this be it or are an was not but "
    "all can has have one if which will more about time when out up there what new so "
    "some other into than only its over also use two how our work first well way even any "
    "these may after most where back such long make day good each just through high old "
    "great see part place case point group number world area state system value data line "
    "name file list test code text type word read write open close start end run set get "
    "call return class model token server client request result error event order level "
    "range table field block thread queue task "
)
SYNTHETIC_WORDS = tuple(_WORD_TEXT.split())


def _synthetic_prompts(n: int, input_len: int, seed: int) -> list[Prompt]:
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        words = [rng.choice(SYNTHETIC_WORDS) for _ in range(input_len)]
        prompts.append(Prompt(text=" ".join(words), approx_tokens=input_len))
    return prompts


def _approx_tokens(text: str) -> int:
    # About 4 characters per token for English-like text.
    return max(1, len(text) // 4)


# A sample read from a prompt file: the prompt and its answer's length in
# tokens (None where the file holds no answer).
Sample = tuple[str, int | None]


def _read_prompt_file(path: Path) -> list[Sample]:
    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(raw)
        if not isinstance(data, list) or not all(isinstance(p, str) for p in data):
            raise WorkloadError("prompts.path", f"{path} must hold a JSON list of strings")
        return [(p, None) for p in data if p.strip()]
    return [(block.strip(), None) for block in raw.split("\n\n") if block.strip()]


def _answer_after(
    turns: list[Any], first: int, roles: tuple[str, ...], key: tuple[str, str]
) -> int | None:
    for turn in turns[first + 1 :]:
        if isinstance(turn, Mapping) and turn.get(key[0]) in roles:
            text = turn.get(key[1])
            return _approx_tokens(text) if isinstance(text, str) and text.strip() else None
    return None


def _first_turn(
    turns: list[Any], asks: tuple[str, ...], answers: tuple[str, ...], key: tuple[str, str]
) -> Sample | None:
    """The first turn whose role is in ``asks`` and the length of the answer after it."""
    for i, turn in enumerate(turns):
        if isinstance(turn, Mapping) and turn.get(key[0]) in asks:
            value = turn.get(key[1])
            if not (isinstance(value, str) and value.strip()):
                return None
            return value, _answer_after(turns, i, answers, key)
    return None


def _read_sharegpt(path: Path) -> list[Sample]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise WorkloadError("prompts.path", f"{path} must hold a JSON list of conversations")
    samples = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, Mapping) else None
        if isinstance(turns, list):
            sample = _first_turn(turns, ("human", "user"), ("gpt", "assistant"), ("from", "value"))
            if sample:
                samples.append(sample)
    return samples


def _jsonl_sample(item: Any, where: str) -> Sample | None:
    if not isinstance(item, Mapping):
        raise WorkloadError("prompts.path", f"{where}: must be a JSON object")
    if "messages" in item:
        turns = item["messages"]
        if not isinstance(turns, list):
            raise WorkloadError("prompts.path", f"{where}: 'messages' must be a list")
        return _first_turn(turns, ("user",), ("assistant",), ("role", "content"))
    prompt = item.get("prompt", item.get("text"))
    if not isinstance(prompt, str):
        raise WorkloadError("prompts.path", f"{where}: needs 'prompt' (a string) or 'messages'")
    if not prompt.strip():
        return None
    tokens = item.get("output_tokens")
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise WorkloadError(
                "prompts.path", f"{where}: 'output_tokens' must be an integer >= 1, got {tokens!r}"
            )
        return prompt, tokens
    answer = item.get("completion", item.get("response"))
    return prompt, _approx_tokens(answer) if isinstance(answer, str) and answer.strip() else None


def _read_jsonl(path: Path) -> list[Sample]:
    samples = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise WorkloadError("prompts.path", f"{path}:{number}: not JSON ({exc})") from exc
            sample = _jsonl_sample(item, f"{path}:{number}")
            if sample:
                samples.append(sample)
    return samples


_READERS = {"file": _read_prompt_file, "sharegpt": _read_sharegpt, "jsonl": _read_jsonl}


def build_prompts(workload: Workload, n: int, offset: int = 0) -> list[Prompt]:
    """``n`` prompts for the workload, deterministic for its seed.

    ``offset`` selects a different slice of the (seeded) sequence, so warm-up
    and trials do not reuse the same prompts (no prefix-cache hits).
    """
    src = workload.prompts
    if src.source == "synthetic":
        return _synthetic_prompts(offset + n, workload.input_len, src.seed)[offset:]
    assert src.path is not None
    path = Path(src.path).expanduser()
    if not path.is_absolute() and workload.base_dir:
        path = Path(workload.base_dir) / path
    if not path.is_file():
        raise WorkloadError("prompts.path", f"file not found: {path}")
    try:
        samples = _READERS[src.source](path)
    except (OSError, ValueError) as exc:
        if isinstance(exc, WorkloadError):
            raise
        raise WorkloadError("prompts.path", f"cannot read {path}: {exc}") from exc
    if not samples:
        raise WorkloadError("prompts.path", f"no prompts in {path}")
    rng = random.Random(src.seed)
    order = list(range(len(samples)))
    rng.shuffle(order)
    chosen = [samples[order[i % len(order)]] for i in range(offset, offset + n)]
    by_sample = src.output_lengths == "sample"
    return [
        Prompt(
            text=text,
            approx_tokens=_approx_tokens(text),
            max_tokens=min(answer, workload.output_len) if by_sample and answer else None,
        )
        for text, answer in chosen
    ]
