"""Setup's entry point: ``python -m engine.spark build-class-archive``.

Builds the class-data archive unless this Java and Spark already have one, printing a
line only when it builds one (or cannot).
"""

from __future__ import annotations

import sys

from engine.errors import EnvironmentProblem
from engine.spark.archive import build_class_archive, class_archive

if sys.argv[1:] != ["build-class-archive"]:
    sys.exit("usage: python -m engine.spark build-class-archive")
try:
    if not class_archive().is_file():
        print("building the Spark class archive (about 15 s, once)", file=sys.stderr)
        print(f"Spark class archive: {build_class_archive()}", file=sys.stderr)
except EnvironmentProblem as problem:
    print(f"Spark class archive not built ({problem}); Spark starts slower", file=sys.stderr)
