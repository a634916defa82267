"""ragmon's optional compiled parts (everything else is in pyproject.toml).

- The OTLP protobuf decoder, ``ragmon/otlp/_walker.pyx`` (Cython).
- The per-request path, the modules ``ragmon/compiled.py`` lists, compiled from their typed
  source by mypyc, all or none (they share one runtime library).

``pip install .`` builds both where a C compiler works; where a build fails, ragmon installs
without it and runs that part as Python (``ragmon_build_info`` says which runs), and says so
in one line naming the module and the first error. ``RAGMON_BUILD_PYTHON`` on (the switch rules
of ``ragmon/compiled.py``) builds neither (e.g. for mutation testing, which edits the source).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
COMPILED = runpy.run_path(str(HERE / "ragmon" / "compiled.py"))
"""``MODULES`` and the switches (``switch``): ``ragmon/compiled.py`` imports only the standard library."""
extensions: list[Extension] = []
mypyc_names: set[str] = set()


def say(line: str) -> None:
    """One line of the build's own on stderr."""
    print(f"ragmon: {line}", file=sys.stderr)


def first_error(text: str) -> str:
    """The first line of ``text`` that reads as an error (else its first line), shortened."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"\berror\b", line, re.IGNORECASE)]
    first = (errors or lines or ["no message"])[0]
    return first if len(first) <= 300 else first[:297] + "..."


def compile_error(exc: Exception) -> str:
    """Why a compile or link failed, short: the compiler's exit code (its own message is printed
    above), else the first error line."""
    code = re.search(r"(?:exit code|exit status) (-?\d+)", str(exc))
    if code:
        return f"{type(exc).__name__}: the C compiler exited with {code.group(1)}, its message above"
    return f"{type(exc).__name__}: {first_error(str(exc))}"


if not COMPILED["switch"](COMPILED["BUILD_SWITCH"]):
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
        paths = [module.replace(".", "/") + ".py" for module in COMPILED["MODULES"]]
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(said):  # mypy prints its errors there
                compiled = mypycify(paths, opt_level="3", group_name="ragmon", multi_file=True)
        except (SystemExit, Exception) as exc:  # mypy found an error in the source: run as Python
            why = first_error(said.getvalue()) if said.getvalue().strip() else f"{type(exc).__name__}: {exc}"
            say(f"not compiling the pipeline, mypyc refused it: {why}; the pipeline runs as Python")
        else:
            mypyc_names = {extension.name for extension in compiled}
            extensions += compiled
for extension in extensions:
    extension.optional = True  # a failed compile is a warning (cythonize drops the flag)


JOBS = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
"""C files compiled at once: one per usable core."""


@contextlib.contextmanager
def parallel_compile(compiler: Any, jobs: int = JOBS) -> Iterator[None]:
    """Compile the C files of one extension ``jobs`` at a time (distutils compiles them one after
    another; mypyc's ``multi_file`` output is one file per module)."""
    serial = compiler.compile

    def compile(sources: list[str], output_dir: str | None = None, macros: Any = None, include_dirs: Any = None,
                debug: bool = False, extra_preargs: Any = None, extra_postargs: Any = None, depends: Any = None) -> list[str]:
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj: str) -> None:
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(one, objects))
        return list(objects)

    compiler.compile = compile
    try:
        yield
    finally:
        compiler.compile = serial


class AllOrNone(build_ext):
    """Builds the extensions, their C files in parallel; when one of mypyc's fails, removes the
    others it built (a module whose shared library is missing cannot be imported) so that every
    module runs as Python. Says in one line what it compiled, and in how long."""

    def build_extensions(self) -> None:
        self._mypyc_failed = False
        self._decoder_failed = False
        started = time.monotonic()
        with parallel_compile(self.compiler):
            super().build_extensions()
        if self._mypyc_failed:
            for name in mypyc_names:
                built = Path(self.get_ext_fullpath(name))
                if built.exists():
                    built.unlink()
        compiled: list[str] = []
        python: list[str] = []
        if any(e.name == "ragmon.otlp._walker" for e in self.extensions):
            (python if self._decoder_failed else compiled).append("the protobuf decoder")
        else:
            python.append("the protobuf decoder (no Cython)")
        if mypyc_names:
            (python if self._mypyc_failed else compiled).append(f"the pipeline ({len(COMPILED['MODULES'])} modules)")
        else:
            python.append("the pipeline (mypyc refused it or is missing)")
        said = f"compiled {' and '.join(compiled) or 'nothing'} in {time.monotonic() - started:.0f}s with {JOBS} job(s)"
        say(said + (f"; {' and '.join(python)} run{'s' if len(python) == 1 else ''} as Python" if python else ""))

    def build_extension(self, ext: Any) -> None:
        if ext.name in mypyc_names and self._mypyc_failed:
            return
        try:
            super().build_extension(ext)
        except Exception as exc:  # a compile or link error (CCompilerError, DistutilsError, ...)
            part = "the pipeline" if ext.name in mypyc_names else "the protobuf decoder"
            say(f"compiling {ext.name} failed ({compile_error(exc)}); {part} runs as Python")
            if ext.name in mypyc_names:
                self._mypyc_failed = True
            else:
                self._decoder_failed = True


setup(ext_modules=extensions, cmdclass={"build_ext": AllOrNone})
