"""ragmon's optional compiled parts (everything else is in pyproject.toml).

- The OTLP protobuf decoder, ``ragmon/otlp/_walker.pyx`` (Cython).
- The per-request path, the modules ``ragmon/compiled.py`` lists, compiled from their typed
  source by mypyc, all or none (they share one runtime library).

``pip install .`` builds both where a C compiler works; where a build fails, ragmon installs
without it and runs that part as Python (``ragmon_build_info`` says which runs). Set
``RAGMON_BUILD_PYTHON=1`` to build neither (e.g. for mutation testing, which edits the source).
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
extensions: list[Extension] = []
mypyc_names: set[str] = set()

if os.environ.get("RAGMON_BUILD_PYTHON", "") not in ("1", "true", "yes"):
    try:
        from Cython.Build import cythonize
    except ImportError:  # Cython is a build requirement; without it (no build isolation), no decoder
        pass
    else:
        extensions += cythonize(
            [Extension("ragmon.otlp._walker", ["ragmon/otlp/_walker.pyx"])],
            compiler_directives={"language_level": 3},
        )
    try:
        from mypyc.build import mypycify
    except ImportError:  # mypy is a build requirement; without it, the pipeline runs as Python
        pass
    else:
        modules = runpy.run_path(str(HERE / "ragmon" / "compiled.py"))["MODULES"]
        paths = [module.replace(".", "/") + ".py" for module in modules]
        try:
            compiled = mypycify(paths, opt_level="3", group_name="ragmon")
        except (SystemExit, Exception) as exc:  # mypy found an error: run as Python
            print(f"ragmon: not compiling the pipeline ({exc!r})", file=sys.stderr)
        else:
            mypyc_names = {extension.name for extension in compiled}
            extensions += compiled
for extension in extensions:
    extension.optional = True  # a failed compile is a warning (cythonize drops the flag)


class AllOrNone(build_ext):
    """Builds the extensions; when one of mypyc's fails, removes the others it built (a module
    whose shared library is missing cannot be imported) so that every module runs as Python."""

    def build_extensions(self) -> None:
        self._mypyc_failed = False
        super().build_extensions()
        if self._mypyc_failed:
            for name in mypyc_names:
                built = Path(self.get_ext_fullpath(name))
                if built.exists():
                    built.unlink()
            print("ragmon: a compiled module failed to build; the pipeline runs as Python", file=sys.stderr)

    def build_extension(self, ext: Any) -> None:
        if ext.name not in mypyc_names:
            super().build_extension(ext)
            return
        if self._mypyc_failed:
            return
        try:
            super().build_extension(ext)
        except Exception as exc:  # a compile or link error (CCompilerError, DistutilsError, ...)
            print(f"ragmon: compiling {ext.name} failed ({exc!r})", file=sys.stderr)
            self._mypyc_failed = True


setup(ext_modules=extensions, cmdclass={"build_ext": AllOrNone})
