"""Reading a checkpoint's ``manifest.json``: JSON of the right shape, or one clear error.

Its format, version, the types of the keys parcat reads and the ``files`` it records are
checked before anything in it is used; names in ``files`` and ``agents`` stay inside the
checkpoint directory. Messages never quote the file's content, only what kind of value arrived.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

from parcat.core.errors import CheckpointError
from parcat.core.readfile import read_regular

POLICY_FORMAT = "parcat.policy"
RUN_FORMAT = "parcat.run"
VERSION = 2
"""The one version this parcat writes and reads (``files``: each file's size and SHA-256)."""
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 16 * 2**20
"""parcat writes manifests of a few KiB; anything this large is not one."""
FIX = "restore the checkpoint from a copy or train it again"

_MISSING = object()
_SHA256 = re.compile(r"[0-9a-f]{64}")
_JSON_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false",
               int: "an integer", float: "a number", type(None): "null"}


def parse_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the checkpoint directory ``path``, checked (else ``CheckpointError``)."""
    file = path / MANIFEST
    try:
        size = file.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise CheckpointError(
                f"checkpoint '{path}' is corrupted: {MANIFEST} has {size} bytes, more than a "
                f"manifest's {MAX_MANIFEST_BYTES}; {FIX}"
            )
        data = read_regular(file)
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint manifest '{file}' is unreadable: {exc.strerror}"
        ) from exc
    try:
        manifest = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _corrupted(path, f"{MANIFEST} is not UTF-8 text") from exc
    except json.JSONDecodeError as exc:
        raise _corrupted(
            path, f"{MANIFEST} is not valid JSON (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except (ValueError, RecursionError) as exc:  # a huge integer, deep nesting
        raise _corrupted(path, f"{MANIFEST} is not a manifest parcat can read") from exc
    return _checked(path, manifest)


def _checked(path: Path, manifest: Any) -> dict[str, Any]:
    file = path / MANIFEST
    _check_types(file, [("the manifest", manifest, dict, "an object")])
    if (fmt := manifest.get("format")) not in (POLICY_FORMAT, RUN_FORMAT):
        raise CheckpointError(
            f"checkpoint manifest '{file}': format is not '{POLICY_FORMAT}' or '{RUN_FORMAT}'; "
            f"'{path}' is not a parcat checkpoint"
        )
    version = manifest.get("version", _MISSING)
    if not _is_int(version):
        raise _wrong_type(file, "'version'", "an integer", version)
    if version != VERSION:
        raise CheckpointError(
            f"checkpoint '{path}' has version {version}; this parcat reads version {VERSION}; "
            "use the parcat that wrote it"
        )
    _check_files(file, manifest.get("files", _MISSING))
    if fmt == POLICY_FORMAT:
        _check_policy(file, manifest)
    else:
        _check_run(file, manifest)
    return manifest


def _check_files(file: Path, files: Any) -> None:
    if not isinstance(files, dict):
        raise _wrong_type(file, "'files'", "an object", files)
    for name, record in files.items():
        if not _is_relative(name):
            raise CheckpointError(
                f"checkpoint manifest '{file}': 'files' names a path outside the checkpoint; "
                f"{FIX}"
            )
        _check_types(file, [(f"'files' entry '{name}'", record, dict, "an object")])
        size, digest = record.get("size", _MISSING), record.get("sha256", _MISSING)
        if not _is_int(size) or size < 0:
            raise _wrong_type(file, f"'size' of '{name}'", "an integer >= 0", size)
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise _wrong_type(file, f"'sha256' of '{name}'", "64 hex digits", digest)


def _check_types(file: Path, checks: list[tuple[str, Any, type, str]]) -> None:
    for what, value, kind, expected in checks:
        if not isinstance(value, kind):
            raise _wrong_type(file, what, expected, value)


def _check_policy(file: Path, manifest: Mapping[str, Any]) -> None:
    _check_types(file, [
        ("'policy'", manifest.get("policy", _MISSING), str, "a 'module:Class' string"),
        ("'kwargs'", manifest.get("kwargs", {}), dict, "an object")])
    if "arrays.npz" not in manifest["files"]:
        raise CheckpointError(
            f"checkpoint manifest '{file}': 'files' does not record arrays.npz; {FIX}"
        )


def _check_run(file: Path, manifest: Mapping[str, Any]) -> None:
    agents = manifest.get("agents", _MISSING)
    _check_types(file, [("'agents'", agents, dict, "an object of agent directories")])
    for agent, name in agents.items():
        if not isinstance(name, str) or "/" in name or not _is_relative(name):
            raise _wrong_type(file, f"the directory of agent '{agent}'", "a directory name",
                              name)
    epoch = manifest.get("epoch", 0)
    if not _is_int(epoch) or epoch < 0:
        raise _wrong_type(file, "'epoch'", "an integer >= 0", epoch)
    config = manifest.get("config", {})
    _check_types(file, [("'config'", config, dict, "an object")])
    # what `eval -p RUN` takes from a run: the mission and its parameters
    _check_types(file, [
        ("'mission'", manifest.get("mission", ""), str, "a string"),
        ("'config.mission'", config.get("mission", ""), str, "a string"),
        ("'mission_params'", manifest.get("mission_params", {}), dict, "an object"),
        ("'eval_return'", manifest.get("eval_return", {}), dict, "an object")])


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_relative(name: str) -> bool:
    return bool(name) and "\\" not in name and "\0" not in name and all(
        part not in ("", ".", "..") for part in name.split("/"))


def _wrong_type(file: Path, what: str, expected: str, value: Any) -> CheckpointError:
    kind = "nothing" if value is _MISSING else _JSON_KINDS.get(type(value), "something else")
    if isinstance(value, str) and expected.startswith("64"):
        kind = f"a string of {len(value)} characters"
    return CheckpointError(
        f"checkpoint manifest '{file}': {what} must be {expected}, got {kind}; {FIX}"
    )


def _corrupted(path: Path, detail: str) -> CheckpointError:
    return CheckpointError(f"checkpoint '{path}' is corrupted: {detail}; {FIX}")
