"""vllm serve argv (both speculative CLI generations), help-text detection, systemd quoting."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from benchgate.serve import (
    build_serve_argv,
    detect_cli_generation,
    draft_quantization_error,
    normalize_speculative,
    systemd_quote_argv,
    validate_speculative,
)

DATA = Path(__file__).parent / "data"
VLLM = "/opt/benchgate/vllm/current/bin/vllm"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
DRAFT = {"method": "draft_model", "model": "/models/draft", "num_speculative_tokens": 5}


def _argv(**kw):
    return build_serve_argv(VLLM, "/models/target", **kw)


# --------------------------------------------------------------------------
# argv
# --------------------------------------------------------------------------


def test_plain_argv_has_only_given_options():
    argv = _argv(
        served_model_name="tiny", host="127.0.0.1", port=8000, max_model_len=512, dtype="float32"
    )
    assert argv == [
        VLLM,
        "serve",
        "/models/target",
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--max-model-len",
        "512",
        "--dtype",
        "float32",
    ]


@pytest.mark.parametrize("off", [None, {}, ""])
def test_empty_speculative_means_no_speculative_flags(off):
    for cli in ("config", "flags", "none"):
        argv = _argv(speculative=off, cli=cli)
        assert not any("spec" in word or "ngram" in word for word in argv)


def test_ngram_config_generation_is_one_json_option():
    argv = _argv(speculative=NGRAM, cli="config")
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == NGRAM
    assert argv[i + 1] == '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}'
    assert argv.count("--speculative-config") == 1


def test_ngram_flags_generation_uses_bracketed_model():
    spec = dict(NGRAM, prompt_lookup_min=1)
    argv = _argv(speculative=spec, cli="flags")
    assert argv[3:] == [
        "--speculative-model",
        "[ngram]",
        "--num-speculative-tokens",
        "3",
        "--ngram-prompt-lookup-max",
        "3",
        "--ngram-prompt-lookup-min",
        "1",
    ]


def test_draft_model_config_generation_leaves_method_to_vllm():
    argv = _argv(speculative=dict(DRAFT, draft_tensor_parallel_size=1), cli="config")
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {
        "model": "/models/draft",
        "num_speculative_tokens": 5,
        "draft_tensor_parallel_size": 1,
    }


def test_draft_model_flags_generation():
    spec = {
        "method": "model",
        "model": "/models/draft",
        "num_speculative_tokens": 5,
        "draft_tensor_parallel_size": 1,
        "disable_mqa_scorer": True,
    }
    argv = _argv(speculative=spec, cli="flags")
    assert argv[3:] == [
        "--speculative-model",
        "/models/draft",
        "--num-speculative-tokens",
        "5",
        "--speculative-draft-tensor-parallel-size",
        "1",
        "--speculative-disable-mqa-scorer",
    ]


def test_eagle3_has_no_old_flag_form():
    spec = {"method": "eagle3", "model": "/models/eagle3", "num_speculative_tokens": 3}
    assert "--speculative-config" in _argv(speculative=spec, cli="config")
    with pytest.raises(ValueError, match="only --speculative-config"):
        _argv(speculative=spec, cli="flags")


def test_speculative_on_a_release_without_options_is_refused():
    with pytest.raises(ValueError, match="no speculative options"):
        _argv(speculative=NGRAM, cli="none")


def test_speculative_given_as_json_string():
    argv = _argv(speculative=json.dumps(NGRAM))
    assert json.loads(argv[-1]) == NGRAM


def test_config_json_is_stable_whatever_the_key_order():
    reordered = dict(reversed(list(dict(NGRAM, prompt_lookup_min=2).items())))
    a = _argv(speculative=reordered)
    b = _argv(speculative=dict(NGRAM, prompt_lookup_min=2))
    assert a == b


def test_extra_args_list_passes_through_last():
    argv = _argv(port=8000, speculative=NGRAM, extra_args=["--enforce-eager", "--seed", "0"])
    assert argv[-3:] == ["--enforce-eager", "--seed", "0"]


def test_extra_args_mapping():
    argv = _argv(
        extra_args={
            "enforce_eager": True,
            "disable_log_stats": False,
            "--seed": 0,
            "compilation_config": {"level": 0},
        }
    )
    assert argv[3:] == ["--enforce-eager", "--seed", "0", "--compilation-config", '{"level":0}']


def test_extra_args_as_a_string_is_refused():
    with pytest.raises(ValueError, match="list of words"):
        _argv(extra_args="--enforce-eager --seed 0")


def test_normalize_aliases():
    assert normalize_speculative(
        {"model": "[ngram]", "num_speculative_tokens": 2, "prompt_lookup_max": 2}
    ) == {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}
    assert normalize_speculative({"model": "/d", "num_speculative_tokens": 2})["method"] == (
        "draft_model"
    )


# --------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------


def _errors(spec, **kw):
    kw.setdefault("target_tp", 1)
    kw.setdefault("path_exists", lambda p: p == "/models/draft")
    return validate_speculative(spec, **kw)


def test_valid_configs_have_no_errors():
    assert _errors({}) == []
    assert _errors(NGRAM) == []
    assert _errors(DRAFT) == []
    assert _errors({"method": "mtp", "num_speculative_tokens": 1}) == []
    assert _errors(dict(NGRAM, prompt_lookup_min=2), cli="flags") == []


def test_unknown_method_suggests_the_closest():
    (msg,) = _errors({"method": "eagel3", "model": "/models/draft", "num_speculative_tokens": 3})
    assert "unknown method 'eagel3'" in msg and "'eagle3'" in msg


def test_unknown_key_suggests_the_closest():
    (msg,) = _errors(dict(NGRAM, num_speculative_token=3))
    assert "unknown key 'num_speculative_token'" in msg
    assert "did you mean 'num_speculative_tokens'" in msg


def test_old_key_names_are_unknown_to_the_config_generation():
    msgs = _errors(dict(DRAFT, disable_by_batch_size=8))
    assert any("unknown key 'disable_by_batch_size'" in m for m in msgs)
    assert _errors(dict(DRAFT, disable_by_batch_size=8), cli="flags") == []


def test_draft_path_missing_or_absent():
    assert any(
        "needs 'model'" in m for m in _errors({"method": "eagle", "num_speculative_tokens": 2})
    )
    (msg,) = _errors(dict(DRAFT, model="/models/nowhere"))
    assert "/models/nowhere" in msg and "does not exist" in msg


def test_draft_tp_must_be_one_or_the_targets():
    assert _errors(dict(DRAFT, draft_tensor_parallel_size=1), target_tp=4) == []
    assert _errors(dict(DRAFT, draft_tensor_parallel_size=4), target_tp=4) == []
    (msg,) = _errors(dict(DRAFT, draft_tensor_parallel_size=2), target_tp=4)
    assert "must be 1 or the target's tensor_parallel_size (4)" in msg


@pytest.mark.parametrize("k", [0, -1, 2.5, "3", True])
def test_k_must_be_a_positive_integer(k):
    (msg,) = _errors(dict(NGRAM, num_speculative_tokens=k))
    assert "num_speculative_tokens must be an integer >= 1" in msg


def test_prompt_lookup_min_above_max():
    (msg,) = _errors(dict(NGRAM, prompt_lookup_max=2, prompt_lookup_min=4))
    assert msg == "prompt_lookup_min=4 must be <= prompt_lookup_max=2"


def test_malformed_json_string():
    (msg,) = _errors('{"method": "ngram", num_speculative_tokens: 3}')
    assert "not valid JSON" in msg


def test_method_the_old_cli_cannot_express():
    (msg,) = _errors(
        {"method": "eagle3", "model": "/models/draft", "num_speculative_tokens": 3}, cli="flags"
    )
    assert "needs --speculative-config" in msg


# The A/B's by-load advice (benchgate.ab.drafting_by_load): k=3 at batch size 1, none above.
SCHEDULED = dict(NGRAM, num_speculative_tokens_per_batch_size=[[1, 1, 3], [2, 2, 0]])


def _schedule_errors(schedule, k=3):
    return _errors(
        dict(NGRAM, num_speculative_tokens=k, num_speculative_tokens_per_batch_size=schedule)
    )


def test_a_batch_size_schedule_is_valid_as_vllm_takes_it():
    assert _errors(SCHEDULED) == []
    assert _schedule_errors([[1, 8, 3]]) == []  # one range: k carries on above it
    assert _schedule_errors([[1, 4, 3], [5, 16, 1], [17, 17, 0]]) == []
    # In any order: vLLM sorts the entries before it checks them.
    assert _schedule_errors([[5, 16, 1], [1, 4, 3], [17, 17, 0]]) == []
    assert _schedule_errors(((1, 2, 2), (3, 3, 0))) == []  # tuples, as from Python
    # The key without a value is vLLM's default (no schedule).
    assert _errors(dict(NGRAM, num_speculative_tokens_per_batch_size=None)) == []


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([], "must be a list of [first, last, k] entries (batch sizes first to last draft k "
         "tokens; k=0 drafts nothing), got []"),
        ("[[1, 4, 3]]", 'must be a list of [first, last, k] entries (batch sizes first to '
         'last draft k tokens; k=0 drafts nothing), got "[[1, 4, 3]]"'),
        ({"1-4": 3}, 'got {"1-4": 3}'),
        ([1, 4, 3], "k=0 drafts nothing) (one range: [[1, 4, 3]]), got [1, 4, 3]"),
        ([1, 4], "k=0 drafts nothing), got [1, 4]"),
        ([[1, 4, 3], 5], "entry 5: write each entry as [first, last, k], three whole numbers"),
        ([[1, 4]], "entry [1, 4]: write each entry as [first, last, k], three whole numbers"),
        ([[1, 4, "3"]], 'entry [1, 4, "3"]: write each entry as [first, last, k]'),
        ([[1, 4, 2.5]], "entry [1, 4, 2.5]: write each entry as [first, last, k]"),
        ([[1, 4, True]], "entry [1, 4, true]: write each entry as [first, last, k]"),
        ([[0, 4, 3]], "entry [0, 4, 3]: batch sizes start at 1"),
        ([[1, 4, 3], [5, -1, 0]], "entry [5, -1, 0]: batch sizes start at 1"),
        ([[5, 4, 3]], "entry [5, 4, 3]: the first batch size 5 is above the last 4"),
        ([[1, 4, -1]], "entry [1, 4, -1]: k=-1 must be 0 (draft nothing) or more"),
        ([[1, 4, 5], [5, 5, 0]], "entry [1, 4, 5]: k=5 is more than num_speculative_tokens=3 "
         "(vLLM would clamp it to 3 without saying so)"),
        ([[5, 8, 0], [1, 6, 3]], "ranges overlap: [1, 6, 3] and [5, 8, 0]"),
        ([[1, 4, 3], [3, 8, 0]], "ranges overlap: [1, 4, 3] and [3, 8, 0]"),
        ([[1, 4, 3], [4, 4, 0]], "ranges overlap: [1, 4, 3] and [4, 4, 0]"),
        ([[2, 4, 3], [5, 5, 0]], ": the first range must start at 1 (a batch of one request), "
         "got [2, 4, 3]"),
    ],
)  # fmt: skip
def test_a_batch_size_schedule_vllm_would_refuse_says_what_to_write(schedule, message):
    (msg,) = _schedule_errors(schedule)
    assert msg.startswith("num_speculative_tokens_per_batch_size")
    assert message in msg


def test_every_broken_entry_is_named():
    msgs = _schedule_errors([[0, 4, 3], [5, 6, 9], [7, 7, -2]])
    assert msgs == [
        "num_speculative_tokens_per_batch_size entry [0, 4, 3]: batch sizes start at 1",
        "num_speculative_tokens_per_batch_size entry [5, 6, 9]: k=9 is more than "
        "num_speculative_tokens=3 (vLLM would clamp it to 3 without saying so)",
        "num_speculative_tokens_per_batch_size entry [7, 7, -2]: k=-2 must be 0 "
        "(draft nothing) or more",
    ]


def test_a_schedule_is_not_held_to_a_k_that_is_itself_wrong():
    assert _schedule_errors([[1, 4, 5]], k=0) == [
        "num_speculative_tokens must be an integer >= 1, got 0"
    ]


def test_the_per_flag_cli_has_no_schedule():
    (msg,) = _errors(SCHEDULED, cli="flags")
    assert msg.startswith("unknown key 'num_speculative_tokens_per_batch_size' for the per-flag")


def test_a_schedule_renders_as_compact_json_in_the_config():
    argv = _argv(speculative=SCHEDULED)
    body = argv[argv.index("--speculative-config") + 1]
    assert body == (
        '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,'
        '"num_speculative_tokens_per_batch_size":[[1,1,3],[2,2,0]]}'
    )
    assert json.loads(body) == SCHEDULED
    assert systemd_split(systemd_quote_argv(argv)) == argv


# --------------------------------------------------------------------------
# help text -> CLI generation (fixtures: real 0.32.0 output, and help text
# rebuilt from the argparse calls of the released 0.7.3 / 0.8.2 wheels)
# --------------------------------------------------------------------------


def test_detect_032_help_all_is_config():
    found = detect_cli_generation((DATA / "vllm-serve-help-all-0.32.0.txt").read_text())
    assert found["speculative"] == "config"
    assert {"--speculative-config", "--spec-method", "--max-model-len", "--port"} <= found["flags"]
    assert "--speculative-model" not in found["flags"]


def test_detect_032_grouped_summary_asks_for_help_all():
    with pytest.raises(ValueError, match="--help=all"):
        detect_cli_generation((DATA / "vllm-serve-help-0.32.0.txt").read_text())


def test_detect_073_is_flags():
    found = detect_cli_generation((DATA / "vllm-serve-help-0.7.3-reconstructed.txt").read_text())
    assert found["speculative"] == "flags"
    assert {
        "--speculative-model",
        "--num-speculative-tokens",
        "--ngram-prompt-lookup-max",
        "--speculative-draft-tensor-parallel-size",
    } <= found["flags"]


def test_detect_082_has_both_and_prefers_config():
    found = detect_cli_generation((DATA / "vllm-serve-help-0.8.2-reconstructed.txt").read_text())
    assert {"--speculative-config", "--speculative-model"} <= found["flags"]
    assert found["speculative"] == "config"


def test_detect_none():
    text = "usage: vllm serve\n\noptions:\n  --port PORT  Port number.\n  --host HOST  Host.\n"
    assert detect_cli_generation(text) == {"speculative": "none", "flags": {"--port", "--host"}}


# --------------------------------------------------------------------------
# systemd quoting
# --------------------------------------------------------------------------

_CESC = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}


def _cunescape(s: str, i: int) -> tuple[str, int]:
    """One C escape at s[i] (just after the backslash), as systemd's cunescape_one."""
    c = s[i]
    if c in _CESC:
        return _CESC[c], i + 1
    if c == "x":
        return chr(int(s[i + 1 : i + 3], 16)), i + 3
    raise AssertionError(f"systemd would warn about the unknown escape \\{c} in {s!r}")


def systemd_split(value: str) -> list[str]:
    """What systemd makes of an ExecStart= value, written from systemd.service(5),
    systemd.syntax(7) and systemd.unit(5): specifiers first (only '%%' allowed
    here), then words with "..."/'...' quoting and C escapes, '\\;' as a literal
    ';', a bare ';' as a command separator (refused here), then at exec time
    '$$' -> '$' (a '${' would be a variable: refused here).
    """
    assert re.fullmatch(r"(?:[^%]|%%)*", value), f"unescaped specifier in {value!r}"
    value = value.replace("%%", "%")
    words: list[str] = []
    i, n = 0, len(value)
    while True:
        while i < n and value[i] in " \t\n\r":
            i += 1
        if i >= n:
            break
        if value[i] == ";" and (i + 1 == n or value[i + 1] in " \t"):
            raise AssertionError(f"bare ';' would start a second command line in {value!r}")
        if value[i : i + 2] == "\\;" and (i + 2 == n or value[i + 2] in " \t"):
            words.append(";")
            i += 2
            continue
        word, quote = [], None
        while i < n:
            c = value[i]
            if quote:
                if c == quote:
                    quote = None
                    i += 1
                elif c == "\\":
                    ch, i = _cunescape(value, i + 1)
                    word.append(ch)
                else:
                    word.append(c)
                    i += 1
            elif c in " \t\n\r":
                break
            elif c in "\"'":
                quote = c
                i += 1
            elif c == "\\":
                ch, i = _cunescape(value, i + 1)
                word.append(ch)
            else:
                word.append(c)
                i += 1
        assert quote is None, f"unbalanced quoting in {value!r}"
        words.append("".join(word))
    out = []
    for w in words:
        assert "${" not in w.replace("$$", ""), f"variable expansion in {w!r}"
        assert not re.fullmatch(r"\$[A-Za-z_]\w*", w.replace("$$", "")), w
        out.append(w.replace("$$", "$"))
    return out


TRICKY = [
    "plain",
    "with space",
    "100%",
    "%h",
    "$HOME",
    "${HOME}",
    "$$",
    ";",
    "a;b",
    ";x",
    "\\;",
    "",
    'say "hi"',
    "it's",
    "back\\slash",
    "ends with backslash\\",
    "tab\tnew\nline\rcr",
    "\x01ctl",
    "ünïcödé ✓",
    '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}',
    '{"num_speculative_tokens":3,"num_speculative_tokens_per_batch_size":[[1,1,3],[2,2,0]]}',
]


@pytest.mark.parametrize("word", TRICKY)
def test_quote_round_trip_single_word(word):
    argv = ["/usr/bin/env", word, "tail"]
    assert systemd_split(systemd_quote_argv(argv)) == argv


def test_quote_examples_exact():
    assert systemd_quote_argv(["/bin/echo", "a b", "%h", "$HOME", ";", "x;y", ""]) == (
        '/bin/echo "a b" %%h $$HOME \\; "x;y" ""'
    )
    assert systemd_quote_argv(["/bin/x", 'q"\\']) == '/bin/x "q\\"\\\\"'


def test_quote_real_argv_round_trip():
    argv = _argv(
        served_model_name="my model",
        port=8000,
        speculative=NGRAM,
        extra_args=["--chat-template", "{% for m in messages %}{{ m }}{% endfor %}"],
    )
    assert systemd_split(systemd_quote_argv(argv)) == argv


@pytest.mark.parametrize(
    "bad", [[], "/bin/echo hi", ["relative/vllm"], ["-/bin/x"], ["/opt/$X/vllm"], ["/bin/x", 3]]
)
def test_quote_refuses_bad_argv(bad):
    with pytest.raises(ValueError):
        systemd_quote_argv(bad)


# The real parser: systemd-analyze (installed here, no systemd as PID 1 needed)
# loads the unit and, at debug level, prints the parsed command line. It shows
# the words after specifier expansion and before the exec-time '$$' -> '$'.
_DUMP_ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "$": "$", "`": "`"}


def _split_dump(line: str) -> list[str]:
    words, i, n = [], 0, len(line)
    while i < n:
        if line[i] == " ":
            i += 1
            continue
        word = []
        if line[i] == '"':
            i += 1
            while line[i] != '"':
                if line[i] == "\\":
                    nxt = line[i + 1]
                    if nxt == "x":
                        word.append(chr(int(line[i + 2 : i + 4], 16)))
                        i += 4
                        continue
                    word.append(_DUMP_ESC[nxt])
                    i += 2
                else:
                    word.append(line[i])
                    i += 1
            i += 1
        else:
            while i < n and line[i] != " ":
                word.append(line[i])
                i += 1
        words.append("".join(word))
    return words


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_quote_against_real_systemd(tmp_path):
    words = [w for w in TRICKY if "\x01" not in w]  # the dump prints \001 as octal
    argv = ["/bin/echo", *words]
    unit = tmp_path / "bg-quote.service"
    unit.write_text(f"[Service]\nExecStart={systemd_quote_argv(argv)}\n", encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin"}
    quiet = subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    # verify exits 0 on mere warnings (e.g. "Ignoring unknown escape sequences").
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        env=dict(env, SYSTEMD_LOG_LEVEL="debug"),
        timeout=60,
    )
    dump = proc.stdout + proc.stderr
    lines = [
        line.split("Command Line: ", 1)[1] for line in dump.splitlines() if "Command Line: " in line
    ]
    assert lines, dump[-2000:]
    parsed = [w.replace("$$", "$") for w in _split_dump(lines[0])]
    assert parsed == argv


def test_a_draft_that_vllm_would_have_to_quantize_as_it_loads_it() -> None:
    spec = {"model": "/srv/models/qwen3-4b", "num_speculative_tokens": 3, "quantization": "fp8"}
    message = draft_quantization_error(spec, {"model_type": "qwen3"})
    assert message.startswith('the draft model "/srv/models/qwen3-4b" is not quantized')
    assert '"quantization": "fp8"' in message and "quantized with fp8" in message
    # A checkpoint quantized already, or no quantization asked for: nothing to say.
    fp8 = {"model_type": "qwen3", "quantization_config": {"quant_method": "fp8"}}
    assert draft_quantization_error(spec, fp8) == ""
    plain = {k: v for k, v in spec.items() if k != "quantization"}
    assert draft_quantization_error(plain, {"model_type": "qwen3"}) == ""
    assert draft_quantization_error({}, {"model_type": "qwen3"}) == ""
