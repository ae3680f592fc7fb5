"""Regenerate the protobuf and gRPC modules of ``millstream.proto`` from ``proto/*.proto``.

The generated files are checked in so that installing Millstream needs no build step; a unit test
compares them with a fresh generation. Sources are compiled under a ``millstream/proto/`` include
root so that generated cross-file imports read ``from millstream.proto import x_pb2``.
"""
from __future__ import annotations

import pathlib
import shutil
import sys
import tempfile

from grpc_tools import protoc

PROTO_DIR = pathlib.Path(__file__).resolve().parent


def generate(out_dir: pathlib.Path = PROTO_DIR) -> list[pathlib.Path]:
    """Compile every ``.proto`` in this folder into ``out_dir``; return the files written."""
    import grpc_tools

    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        pkg = root / "millstream" / "proto"
        pkg.mkdir(parents=True)
        sources = sorted(PROTO_DIR.glob("*.proto"))
        for src in sources:
            shutil.copy(src, pkg / src.name)
        build = root / "out"
        build.mkdir()
        args = [
            "grpc_tools.protoc",
            f"-I{root}",
            f"-I{well_known}",
            f"--python_out={build}",
            f"--pyi_out={build}",
            f"--grpc_python_out={build}",
        ] + [f"millstream/proto/{src.name}" for src in sources]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {[s.name for s in sources]}")
        written = []
        for produced in sorted((build / "millstream" / "proto").iterdir()):
            target = out_dir / produced.name
            shutil.copy(produced, target)
            written.append(target)
        return written


if __name__ == "__main__":
    for path in generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_DIR):
        print(path)
