"""A PEP 517 / PEP 660 build backend on the standard library alone, for ``orbit-sdk``.

Why not setuptools: a fresh venv has setuptools without ``wheel``, and without an index pip
can neither install ``wheel`` nor build isolation's requirements, so ``pip install
./sdk/python`` would fail offline. This backend needs nothing: ``requires = []``. It packs
``orbit_sdk/`` (every ``.py`` file and ``py.typed``) into a wheel with the metadata taken from
the ``[project]`` table of pyproject.toml (read with ``tomllib`` when there is one, with a
small reader for the few keys used here otherwise).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "orbit_sdk"


def _project() -> Dict[str, Any]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = f.read()
    try:
        import tomllib  # Python >= 3.11

        return tomllib.loads(data.decode())["project"]
    except ImportError:
        pass
    project: Dict[str, Any] = {}
    section = None
    for line in data.decode().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
            continue
        m = re.match(r'^([A-Za-z_-]+)\s*=\s*"(.*)"\s*$', line)
        if section == "project" and m:
            project[m.group(1)] = m.group(2)
    return project


def _names() -> Tuple[str, str, str]:
    project = _project()
    name, version = project["name"], project["version"]
    return name, version, re.sub(r"[-_.]+", "_", name)


def _metadata() -> str:
    project = _project()
    name, version, _ = _names()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {project.get('description', '')}",
        f"Requires-Python: {project.get('requires-python', '>=3.9')}",
    ]
    for c in project.get("classifiers", []) if isinstance(project.get("classifiers"), list) else []:
        lines.append(f"Classifier: {c}")
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _files() -> List[str]:
    out = []
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for fn in sorted(filenames):
            if fn.endswith(".py") or fn == "py.typed":
                out.append(os.path.relpath(os.path.join(dirpath, fn), ROOT))
    return sorted(out)


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory: str, entries: List[Tuple[str, bytes]]) -> str:
    _, version, dist = _names()
    info = f"{dist}-{version}.dist-info"
    filename = f"{dist}-{version}-py3-none-any.whl"
    entries = list(entries) + [
        (f"{info}/METADATA", _metadata().encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: orbit_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{info}/top_level.txt", f"{PACKAGE}\n".encode()),
    ]
    record = [_record_line(p, d) for p, d in entries] + [f"{info}/RECORD,,"]
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries:
            zi = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    entries = []
    for rel in _files():
        with open(os.path.join(ROOT, rel), "rb") as f:
            entries.append((rel.replace(os.sep, "/"), f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    """``pip install -e``: a wheel with a .pth file that puts this source tree on sys.path."""
    _, _, dist = _names()
    return _write_wheel(wheel_directory, [(f"__editable__.{dist}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    _, version, dist = _names()
    base = f"{dist}-{version}"
    filename = f"{base}.tar.gz"
    names = ["pyproject.toml", "README.md", "build_backend/orbit_build.py"] + _files()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel in names:
            path = os.path.join(ROOT, rel)
            if os.path.exists(path):
                tar.add(path, arcname=f"{base}/{rel}")
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tar.addfile(ti, io.BytesIO(pkg_info))
    return filename
