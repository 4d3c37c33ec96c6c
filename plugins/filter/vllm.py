# Copyright: benchgate contributors
# Apache-2.0
"""Filters that turn structured vLLM settings into a command line and an ExecStart= value.

The logic lives in the ``benchgate`` package (``benchgate.serve``, ``benchgate.ab``);
these filters only check their input and translate errors into AnsibleFilterError.
They need ``benchgate`` importable by the controller's Python.

Each filter is documented, with an example taken from the roles, in the YAML file
of its name beside this one: ``ansible-doc -t filter vllm_serve_argv``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

_ARGV_KEYS = (
    "executable",
    "model",
    "served_model_name",
    "host",
    "port",
    "tensor_parallel_size",
    "max_model_len",
    "dtype",
    "extra_args",
    "speculative",
    "cli",
)
_INT_SETTINGS = ("port", "tensor_parallel_size", "max_model_len")
_INT_SPEC_KEYS = (
    "num_speculative_tokens",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "draft_tensor_parallel_size",
)


def _serve() -> Any:
    try:
        from benchgate import serve
    except ImportError as exc:
        raise AnsibleFilterError(
            "the vllm filters need the 'benchgate' Python package in the controller's Python "
            "(ansible_playbook_python); install it there, e.g. `pip install -e .` in the "
            f"benchgate checkout ({exc})"
        ) from exc
    return serve


def _int_like(value: Any, what: str) -> Any:
    """Accept '8000' for 8000: values from -e and inventories often arrive as strings."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, float) and value.is_integer():
        raise AnsibleFilterError(f"{what} must be an integer, got {value!r}")
    return value


def _spec(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(
            "speculative settings must be a mapping such as "
            "{method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 3} "
            f"(or {{}} for off), got {type(value).__name__}"
        )
    out = dict(value)
    for key in _INT_SPEC_KEYS:
        if key in out:
            out[key] = _int_like(out[key], key)
    return out


def vllm_serve_argv(settings: Any) -> list[str]:
    """Mapping of settings -> argv list of ``vllm serve`` (see benchgate.serve.build_serve_argv)."""
    serve = _serve()
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(
            "vllm_serve_argv expects a mapping with at least 'executable' and 'model', "
            f"got {type(settings).__name__}"
        )
    unknown = sorted(set(settings) - set(_ARGV_KEYS))
    if unknown:
        raise AnsibleFilterError(
            f"vllm_serve_argv: unknown setting(s) {', '.join(map(str, unknown))}; "
            f"known: {', '.join(_ARGV_KEYS)} (put other vLLM options in extra_args)"
        )
    for required in ("executable", "model"):
        if not settings.get(required):
            raise AnsibleFilterError(f"vllm_serve_argv: '{required}' is required")
    kwargs = {k: settings[k] for k in _ARGV_KEYS[2:] if k in settings}
    for key in _INT_SETTINGS:
        if key in kwargs:
            kwargs[key] = _int_like(kwargs[key], key)
    kwargs["speculative"] = _spec(kwargs.get("speculative"))
    cli = kwargs.get("cli", "config")
    if cli not in ("config", "flags", "none"):
        raise AnsibleFilterError(
            f"vllm_serve_argv: cli must be 'config', 'flags' or 'none' (from the "
            f"vllm_cli_generation filter), got {cli!r}"
        )
    tp = kwargs.get("tensor_parallel_size") or 1
    try:
        errors = serve.validate_speculative(
            kwargs["speculative"],
            target_tp=tp,
            path_exists=lambda _path: True,  # the controller cannot see the target's files
            cli=cli,
        )
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_serve_argv: {exc}") from exc
    if errors:
        raise AnsibleFilterError(
            "vllm_serve_argv: invalid speculative settings: " + "; ".join(errors)
        )
    try:
        return list(serve.build_serve_argv(settings["executable"], settings["model"], **kwargs))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_serve_argv: {exc}") from exc


def systemd_exec_quote(argv: Any) -> str:
    """argv list -> ExecStart= value (see benchgate.serve.systemd_quote_argv)."""
    serve = _serve()
    if isinstance(argv, str) or not isinstance(argv, Sequence):
        raise AnsibleFilterError(
            "systemd_exec_quote expects a list of words (e.g. the output of vllm_serve_argv), "
            f"got {type(argv).__name__}"
        )
    words = []
    for word in argv:
        if isinstance(word, bool) or not isinstance(word, (str, int, float)):
            raise AnsibleFilterError(
                f"systemd_exec_quote: every item must be a string, got {word!r}"
            )
        words.append(str(word))
    try:
        return str(serve.systemd_quote_argv(words))
    except ValueError as exc:
        raise AnsibleFilterError(f"systemd_exec_quote: {exc}") from exc


def vllm_speculative_errors(spec: Any, target_tp: Any = 1, cli: str = "config") -> list[str]:
    """Speculative config (+ target TP, CLI generation) -> list of problems; [] when valid.

    Draft paths are not checked here (the controller cannot see the target's
    files); the role checks them on the target with ansible.builtin.stat.
    """
    serve = _serve()
    if spec is not None and not isinstance(spec, (str, Mapping)):
        return [f"speculative settings must be a mapping (or {{}} for off), got {spec!r}"]
    spec = _spec(spec) if isinstance(spec, Mapping) else spec
    tp = _int_like(target_tp, "target tensor_parallel_size")
    return list(
        serve.validate_speculative(spec, target_tp=tp, path_exists=lambda _path: True, cli=cli)
    )


def vllm_draft_quantization_error(spec: Any, draft_config: Any) -> str:
    """Speculative settings + the draft's config.json -> why vLLM cannot load the draft
    quantized ("" when it can; see benchgate.serve.draft_quantization_error)."""
    if not isinstance(draft_config, Mapping):
        raise AnsibleFilterError(
            "vllm_draft_quantization_error expects the draft's config.json as a mapping, "
            f"got {type(draft_config).__name__}"
        )
    try:
        return str(_serve().draft_quantization_error(_spec(spec), draft_config))
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_draft_quantization_error: {exc}") from exc


def vllm_cli_generation(help_text: Any) -> dict[str, Any]:
    """Help text of ``vllm serve --help=all`` -> {'speculative': ..., 'flags': [sorted options]}."""
    serve = _serve()
    if not isinstance(help_text, str):
        raise AnsibleFilterError(
            "vllm_cli_generation expects the stdout of `vllm serve --help=all` as a string"
        )
    try:
        found = serve.detect_cli_generation(help_text)
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_cli_generation: {exc}") from exc
    # A list, not a set: facts and templates need JSON-able values.
    return {"speculative": found["speculative"], "flags": sorted(found["flags"])}


def vllm_speculative_arms(candidates: Any, k_sweep: Any = None) -> list[dict[str, Any]]:
    """Candidate speculative configs (+ a sweep of k) -> [{name, config}], "off" first."""
    try:
        from benchgate import ab
    except ImportError as exc:  # pragma: no cover - same as _serve()
        raise AnsibleFilterError(
            f"vllm_speculative_arms needs the benchgate package: {exc}"
        ) from exc
    if candidates in (None, ""):
        candidates = []
    if isinstance(candidates, Mapping):
        candidates = [candidates] if candidates else []
    if not isinstance(candidates, Sequence) or isinstance(candidates, str):
        raise AnsibleFilterError(
            f"vllm_speculative_arms: candidates must be a list of mappings, got {candidates!r}"
        )
    sweep = [] if k_sweep in (None, "") else k_sweep
    if not isinstance(sweep, Sequence) or isinstance(sweep, str):
        raise AnsibleFilterError(f"vllm_speculative_arms: k_sweep must be a list, got {sweep!r}")
    try:
        arms = ab.expand_arms(list(candidates), list(sweep))
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_speculative_arms: {exc}") from exc
    return [{"name": arm.name, "config": arm.config} for arm in arms]


def vllm_base_url(host: Any, port: Any) -> str:
    """Bind address + port -> base URL for a client on the host (see benchgate.serve.base_url)."""
    try:
        return str(_serve().base_url(host, port))
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_base_url: {exc}") from exc


def systemd_env_line(name: Any, value: Any) -> str:
    """NAME + value -> one EnvironmentFile line (see benchgate.serve.env_file_line)."""
    try:
        return str(_serve().env_file_line(name, value))
    except ValueError as exc:
        raise AnsibleFilterError(f"systemd_env_line: {exc}") from exc


def api_key_elsewhere(
    extra_args: Any, environments: Any = None, extra_args_name: str = "vllm_service_extra_args"
) -> list[str]:
    """Where the API key is set other than in vllm_service_api_key (names, never values)."""
    if environments is not None and not isinstance(environments, Mapping):
        raise AnsibleFilterError(
            "api_key_elsewhere expects a mapping of setting name -> environment, "
            f"got {type(environments).__name__}"
        )
    return list(_serve().api_key_elsewhere(extra_args, environments, str(extra_args_name)))


def side_by_side_unit(unit: Any, executable: Any, port: Any, host: Any = "127.0.0.1") -> str:
    """The unit that served before, for a server beside the candidate
    (see benchgate.serve.side_by_side_unit)."""
    try:
        return str(_serve().side_by_side_unit(str(unit), str(executable), int(port), str(host)))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"side_by_side_unit: {exc}") from exc


class FilterModule:
    """vLLM command line and systemd quoting filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "vllm_serve_argv": vllm_serve_argv,
            "systemd_exec_quote": systemd_exec_quote,
            "vllm_speculative_errors": vllm_speculative_errors,
            "vllm_draft_quantization_error": vllm_draft_quantization_error,
            "vllm_cli_generation": vllm_cli_generation,
            "vllm_speculative_arms": vllm_speculative_arms,
            "vllm_base_url": vllm_base_url,
            "systemd_env_line": systemd_env_line,
            "api_key_elsewhere": api_key_elsewhere,
            "side_by_side_unit": side_by_side_unit,
        }
