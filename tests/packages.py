"""Python packages made by hand for the Python-environment tests (unit and integration): no build
backend, no network."""
from __future__ import annotations

import zipfile
from pathlib import Path


def tiny_wheel(directory: Path, value: str = "42") -> Path:
    """A pure-Python wheel made by hand (no build backend, no network): module ``tinypkg``."""
    wheel = directory / "tinypkg-1.0-py3-none-any.whl"
    files = {
        "tinypkg/__init__.py": f"VALUE = {value!r}\n",
        "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "tinypkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr("tinypkg-1.0.dist-info/RECORD", record)
    return wheel


def requirements(tmp_path: Path) -> tuple[Path, Path]:
    cache = tmp_path / "cache"
    cache.mkdir()
    tiny_wheel(cache)
    req = tmp_path / "requirements.txt"
    req.write_text("tinypkg==1.0\n")
    return req, cache


def tiny_sdist(directory: Path) -> Path:
    """A source distribution (setup.py, no wheel) as PyFlink's cached-directory test ships one."""
    import io
    import tarfile

    sdist = directory / "python-package1-0.0.0.tar.gz"
    root = "python-package1-0.0.0"
    files = {
        f"{root}/setup.py": "from setuptools import setup\nsetup(name='python-package1', version='0.0.0', "
                            "packages=['python_package1'])\n",
        f"{root}/PKG-INFO": "Metadata-Version: 1.0\nName: python-package1\nVersion: 0.0.0\n",
        f"{root}/python_package1/__init__.py": "def plus(a, b):\n    return a + b\n",
    }
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return sdist
