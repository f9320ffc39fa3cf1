"""Packaging: the standard-library build backend makes a valid wheel, and pip installs the
SDK offline (``--no-index``) with it: no setuptools, no ``wheel``, no download."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SDK, "build_backend"))

import orbit_build  # noqa: E402


class PackagingTest(unittest.TestCase):
    def test_the_wheel_holds_the_package_and_a_valid_record(self) -> None:
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        name = orbit_build.build_wheel(tmp)
        self.assertEqual(name, "orbit_sdk-0.1.0-py3-none-any.whl")
        with zipfile.ZipFile(os.path.join(tmp, name)) as z:
            names = set(z.namelist())
            for member in ("orbit_sdk/__init__.py", "orbit_sdk/worker.py", "orbit_sdk/py.typed"):
                self.assertIn(member, names)
            self.assertFalse(any("__pycache__" in n or n.startswith("tests/") for n in names), names)
            meta = z.read("orbit_sdk-0.1.0.dist-info/METADATA").decode()
            self.assertIn("Name: orbit-sdk", meta)
            self.assertIn("Requires-Python: >=3.9", meta)
            self.assertNotIn("Requires-Dist", meta)  # no dependencies
            for line in z.read("orbit_sdk-0.1.0.dist-info/RECORD").decode().splitlines():
                path, digest, size = line.split(",")
                if not digest:
                    continue
                data = z.read(path)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual((digest, int(size)), (f"sha256={want}", len(data)), path)

    @unittest.skipUnless(importlib.util.find_spec("pip"), "pip is not installed")
    def test_pip_installs_it_offline(self) -> None:
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        src = os.path.join(tmp, "src")  # a copy: pip must not write into the source tree
        shutil.copytree(SDK, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        target = os.path.join(tmp, "site")
        run = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
             "--no-cache-dir", "--target", target, src],
            capture_output=True,
            text=True,
            env=dict(os.environ, PIP_NO_INPUT="1"),
        )
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        check = subprocess.run(
            [sys.executable, "-c", "import orbit_sdk, sys; print(orbit_sdk.__file__, orbit_sdk.__version__)"],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=target),
            cwd=tmp,
        )
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertTrue(check.stdout.startswith(os.path.join(target, "orbit_sdk")), check.stdout)
        self.assertTrue(os.path.exists(os.path.join(target, "orbit_sdk", "py.typed")))


if __name__ == "__main__":
    unittest.main()
