"""The user's rule settings: `[tool.perfsleuth]` in pyproject.toml, `--rules` paths and `--set`
threshold overrides, merged into the `Config` fields of the rule engine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Iterable, Optional, Union

import msgspec
import tomllib

from ..errors import TraceError, UsageError
from ..trace.files import open_regular
from .catalog import RuleError, load_catalog


def parse_value(text: str) -> Any:
    """A --set value: a TOML scalar (0.05, 3, true) or else the raw string (rejected later if not a number)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_sets(items: Iterable[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key.strip() or not value.strip():
            raise UsageError(f"--set expects RULE.THRESHOLD=VALUE (e.g. num-workers.min_share=0.05), got '{item}'")
        out[key.strip()] = parse_value(value.strip())
    return out


class ToolSettings(msgspec.Struct):
    """`[tool.perfsleuth]`: the shape it must have (a path or a list of paths; numbers, or one table of
    numbers per rule)."""

    rules: Union[str, list[str]] = []
    thresholds: dict[str, Union[float, dict[str, float]]] = {}
    peak_tflops: Optional[float] = None  # the device's compute peak (docs/efficiency.md#peaks)
    peak_arch: Optional[str] = None  # a TraceLens arch JSON, relative to the pyproject's folder


def project_settings(pyproject: Path) -> tuple[list, dict]:
    """Rule paths and threshold overrides from `[tool.perfsleuth]` in a pyproject.toml (paths are
    relative to its folder). Thresholds may be dotted keys or one table per rule. Anything of the
    wrong shape (`tool = "x"`, `thresholds = [1, 2]`, nesting deeper than the TOML reader goes) is
    one UsageError naming the file."""
    try:
        with open_regular(pyproject) as f:
            doc = tomllib.loads(f.read().decode("utf-8"))
    except TraceError as exc:
        raise UsageError(f"{pyproject}: cannot read [tool.perfsleuth] ({exc.problem})") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{pyproject}: cannot read [tool.perfsleuth] ({exc})") from None
    except RecursionError:
        raise UsageError(f"{pyproject}: cannot read [tool.perfsleuth] (nested too deeply)") from None
    tool = doc.get("tool", {})
    if not isinstance(tool, dict):
        raise UsageError(f"{pyproject}: 'tool' must be a table ([tool.perfsleuth])")
    tool = tool.get("perfsleuth", {})
    if not isinstance(tool, dict):
        raise UsageError(f"{pyproject}: [tool.perfsleuth] must be a table")
    unknown = set(tool) - {"rules", "thresholds", "peak_tflops", "peak_arch"}
    if unknown:
        raise UsageError(f"{pyproject}: unknown key(s) in [tool.perfsleuth]: {', '.join(sorted(unknown))}")
    try:
        settings = msgspec.convert(tool, ToolSettings)
    except msgspec.ValidationError as exc:
        where = str(exc).replace("`$.", "`tool.perfsleuth.")
        raise UsageError(f"{pyproject}: [tool.perfsleuth] is not valid ({where})") from None
    rules = [settings.rules] if isinstance(settings.rules, str) else settings.rules
    thresholds: dict = {}
    for key, value in settings.thresholds.items():
        if isinstance(value, dict):
            thresholds.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            thresholds[key] = value
    return [str(pyproject.parent / r) for r in rules], thresholds


def rule_settings(rule_paths: Iterable = (), sets: Iterable[str] = (), pyproject: Optional[Path] = None) -> dict:
    """Config fields for the rule engine from `[tool.perfsleuth]` in `pyproject` (default
    ./pyproject.toml when present), `--rules` paths and `--set` items (which win). The catalog is
    loaded once here so that a bad rule file or threshold fails before any trace is read."""
    pyproject = Path("pyproject.toml") if pyproject is None else pyproject
    paths, thresholds = project_settings(pyproject) if os.path.lexists(pyproject) else ([], {})
    if thresholds:
        try:  # the project's own thresholds, checked on their own so that the message says where they are
            load_catalog(paths, thresholds)
        except RuleError:
            raise
        except UsageError as exc:
            raise UsageError(f"{pyproject}: [tool.perfsleuth] {exc}") from None
    paths += [str(p) for p in rule_paths]
    thresholds.update(parse_sets(sets))
    load_catalog(paths, thresholds)
    return {"rule_paths": tuple(paths), "thresholds": thresholds}


class ArchPeaks(msgspec.Struct):
    """A TraceLens arch JSON (TraceLens/Agent/Analysis/utils/arch/*.json): what perfsleuth reads."""

    max_achievable_tflops: dict[str, Annotated[float, msgspec.Meta(gt=0)]]
    name: Optional[str] = None
    mem_bw_gbps: Optional[Annotated[float, msgspec.Meta(gt=0)]] = None


def read_arch(path: Path) -> dict:
    """A peak file in TraceLens's arch format, checked: else one UsageError line naming the file."""
    try:
        with open_regular(path) as f:
            arch = msgspec.json.decode(f.read(), type=ArchPeaks)
    except TraceError as exc:
        raise UsageError(f"{path}: cannot read the peak file ({exc.problem})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the peak file ({exc.strerror or exc})") from None
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise UsageError(f"{path}: not a peak file in TraceLens's arch format ({exc})") from None
    return msgspec.to_builtins(arch)


def peak_settings(peak_tflops: Optional[float] = None, peak_arch: Optional[Path] = None,
                  pyproject: Optional[Path] = None) -> dict:
    """Config's `peak_tflops` / `peak_arch` (the file read): the options', else `[tool.perfsleuth]`."""
    pyproject = Path("pyproject.toml") if pyproject is None else pyproject
    if (peak_tflops is None or peak_arch is None) and os.path.lexists(pyproject):
        tool = _tool_table(pyproject)
        if peak_tflops is None and tool.peak_tflops is not None:
            if tool.peak_tflops <= 0:
                raise UsageError(f"{pyproject}: [tool.perfsleuth] peak_tflops must be above 0")
            peak_tflops = tool.peak_tflops
        if peak_arch is None and tool.peak_arch:
            peak_arch = pyproject.parent / tool.peak_arch
    arch = read_arch(Path(peak_arch)) if peak_arch else None
    return {"peak_tflops": peak_tflops, "peak_arch": arch}


def _tool_table(pyproject: Path) -> ToolSettings:
    try:
        with open_regular(pyproject) as f:
            doc = tomllib.loads(f.read().decode("utf-8"))
        return msgspec.convert(doc.get("tool", {}).get("perfsleuth", {}), ToolSettings)
    except (TraceError, OSError, UnicodeDecodeError, tomllib.TOMLDecodeError,
            msgspec.ValidationError,
            AttributeError, RecursionError) as exc:
        raise UsageError(f"{pyproject}: cannot read [tool.perfsleuth] ({exc})") from None
